package buckets

import "github.com/prometheus/client_golang/prometheus"

var (
	descRetainedCells = prometheus.NewDesc("narwhal_demand_history_retained_cells",
		"Exact shape cells in use in retained demand buckets.", []string{"kind"}, nil)
	descCellLimit = prometheus.NewDesc("narwhal_demand_history_cell_limit",
		"Exact shape cells the retained demand buckets can hold.", []string{"kind"}, nil)
	descObservations = prometheus.NewDesc("narwhal_demand_history_observations",
		"Sized observations (exact and overflow) in retained demand buckets.", []string{"kind"}, nil)
	descOverflow = prometheus.NewDesc("narwhal_demand_history_overflow_observations",
		"Observations held by overflow cohorts in retained demand buckets.", []string{"kind"}, nil)
	descUnsizedPending = prometheus.NewDesc("narwhal_demand_history_unsized_pending",
		"Request bodies still being read (offers not yet sized).", nil, nil)
	descUnsizedObs = prometheus.NewDesc("narwhal_demand_history_unsized_observations",
		"Retained offers that terminated before sizing.", nil, nil)
	descExpired = prometheus.NewDesc("narwhal_demand_history_expired_observations_total",
		"Observations expired from demand history since start.", []string{"kind"}, nil)
	descRefused = prometheus.NewDesc("narwhal_demand_history_refused_records_total",
		"Records refused for their timestamp: reason too_old (bucket expired) or too_far (far ahead of the newest bucket).", []string{"kind", "reason"}, nil)
	descJumps = prometheus.NewDesc("narwhal_demand_history_jumps_total",
		"Advances of the newest bucket by more than one retention (idle gaps, confirmed far-ahead records).", []string{"kind"}, nil)
)

type demandCollector struct{ d *Demand }

// NewCollector exports demand_history as narwhal_demand_history_* metrics.
// Everything is read at scrape time; recording costs nothing extra.
func NewCollector(d *Demand) prometheus.Collector { return demandCollector{d: d} }

func (c demandCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRetainedCells, descCellLimit, descObservations,
		descOverflow, descUnsizedPending, descUnsizedObs, descExpired, descRefused, descJumps} {
		ch <- d
	}
}

func (c demandCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.d.Snapshot()
	for k, st := range [NumKinds]KindStats{snap.Arrivals, snap.Residency, snap.Outputs} {
		kind := Kind(k).String()
		ch <- prometheus.MustNewConstMetric(descRetainedCells, prometheus.GaugeValue, float64(st.RetainedCells), kind)
		ch <- prometheus.MustNewConstMetric(descCellLimit, prometheus.GaugeValue, float64(st.CellLimit), kind)
		ch <- prometheus.MustNewConstMetric(descObservations, prometheus.GaugeValue, float64(st.Observations), kind)
		ch <- prometheus.MustNewConstMetric(descOverflow, prometheus.GaugeValue, float64(st.OverflowObservations), kind)
		h := c.d.History(Kind(k))
		sized, _ := h.Expired()
		ch <- prometheus.MustNewConstMetric(descExpired, prometheus.CounterValue, float64(sized), kind)
		old, far, jumps := h.Refusals()
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(old), kind, "too_old")
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(far), kind, "too_far")
		ch <- prometheus.MustNewConstMetric(descJumps, prometheus.CounterValue, float64(jumps), kind)
	}
	ch <- prometheus.MustNewConstMetric(descUnsizedPending, prometheus.GaugeValue, float64(snap.Unsized.Pending))
	ch <- prometheus.MustNewConstMetric(descUnsizedObs, prometheus.GaugeValue, float64(snap.Unsized.Observations))
}

var (
	descAttTotal = prometheus.NewDesc("narwhal_attainment_requests",
		"Requests in the retained SLO-attainment window, by outcome.", []string{"outcome"}, nil)
	descAttTTFT = prometheus.NewDesc("narwhal_attainment_ttft_met",
		"Requests that met the TTFT SLO in the retained window, by outcome.", []string{"outcome"}, nil)
	descAttTPOT = prometheus.NewDesc("narwhal_attainment_tpot_met",
		"Requests that met the TPOT SLO in the retained window, by outcome.", []string{"outcome"}, nil)
	descAttCovered = prometheus.NewDesc("narwhal_attainment_covered_seconds",
		"Age of the oldest retained attainment bucket, capped at the retention (covered_s).", nil, nil)
)

type attainmentCollector struct {
	a   *Attainment
	now func() int64
}

// NewAttainmentCollector exports the retained attainment window as
// narwhal_attainment_* metrics, read at scrape time. now supplies the time
// of a scrape (the caller's clock: core packages read none).
func NewAttainmentCollector(a *Attainment, now func() int64) prometheus.Collector {
	return attainmentCollector{a: a, now: now}
}

func (c attainmentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAttTotal
	ch <- descAttTTFT
	ch <- descAttTPOT
	ch <- descAttCovered
}

func (c attainmentCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	w := c.a.Window(0, now)
	for o, n := range w.ByOutcome {
		name := Outcome(o).String()
		ch <- prometheus.MustNewConstMetric(descAttTotal, prometheus.GaugeValue, float64(n.Total), name)
		ch <- prometheus.MustNewConstMetric(descAttTTFT, prometheus.GaugeValue, float64(n.TTFTMet), name)
		ch <- prometheus.MustNewConstMetric(descAttTPOT, prometheus.GaugeValue, float64(n.TPOTMet), name)
	}
	ch <- prometheus.MustNewConstMetric(descAttCovered, prometheus.GaugeValue, c.a.CoveredS(now))
}
