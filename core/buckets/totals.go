package buckets

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/ring"
)

// Monotonic totals of finished requests, beside the attainment buckets:
// the buckets answer "attainment over the last window" and expire, the
// totals only grow, which is what Prometheus rates and SLO burn-rate
// rules need (narwhal_requests_*_total). A record adds 1 to one counter:
// the one for its outcome and its (TTFT met, TPOT met) combination, on
// the stripe of the P it runs on (the same stripe as its bucket), so it
// costs one uncontended atomic add and no allocation; a read sums the
// combinations.

const (
	totNeither = iota // met neither SLO
	totTTFT           // met TTFT only
	totTPOT           // met TPOT only
	totBoth           // met both
	totPerOutcome
)

// totBlock is one stripe of the totals: per outcome the count of each
// (TTFT met, TPOT met) combination, padded to two cache lines.
type totBlock struct {
	c [int(NumOutcomes) * totPerOutcome]atomic.Uint64
	_ [(16 - int(NumOutcomes)*totPerOutcome%16) % 16]uint64
}

// Totals are monotonic counts of finished requests per outcome.
type Totals struct {
	stripes []totBlock
	mask    int
}

// TotalCounts are one outcome's monotonic counts.
type TotalCounts struct {
	Finished uint64 `json:"finished"`
	TTFTMet  uint64 `json:"ttft_met"`
	TPOTMet  uint64 `json:"tpot_met"`
	// BothMet met TTFT and TPOT: the SLO's good events.
	BothMet uint64 `json:"both_met"`
}

func newTotals() *Totals {
	_, mask := ring.StripeLayout()
	return &Totals{stripes: make([]totBlock, mask+1), mask: mask}
}

// add counts one request on stripe st (0..mask).
func (t *Totals) add(st int, o Outcome, ttftMet, tpotMet bool) {
	k := totNeither
	if ttftMet {
		k |= totTTFT
	}
	if tpotMet {
		k |= totTPOT
	}
	t.stripes[st&t.mask].c[int(o)*totPerOutcome+k].Add(1)
}

// Read sums the stripes. Each request is one count, so a read while
// writers run sees it wholly or not at all; every total is monotonic.
func (t *Totals) Read() [NumOutcomes]TotalCounts {
	var out [NumOutcomes]TotalCounts
	for i := range t.stripes {
		b := &t.stripes[i]
		for o := range out {
			base := o * totPerOutcome
			neither, ttft := b.c[base+totNeither].Load(), b.c[base+totTTFT].Load()
			tpot, both := b.c[base+totTPOT].Load(), b.c[base+totBoth].Load()
			out[o].Finished += neither + ttft + tpot + both
			out[o].TTFTMet += ttft + both
			out[o].TPOTMet += tpot + both
			out[o].BothMet += both
		}
	}
	return out
}

// Totals returns the attainment's monotonic totals: every request Record
// accepted since the structure was built, never expired.
func (a *Attainment) Totals() *Totals { return a.totals }

var (
	descFinished = prometheus.NewDesc("narwhal_requests_finished_total",
		"Requests that finished, by outcome (completed, failed, expired, refused).", []string{"outcome"}, nil)
	descTTFTMet = prometheus.NewDesc("narwhal_requests_ttft_met_total",
		"Finished requests whose first token came within the TTFT SLO, by outcome.", []string{"outcome"}, nil)
	descTPOTMet = prometheus.NewDesc("narwhal_requests_tpot_met_total",
		"Finished requests whose time per output token met the TPOT SLO, by outcome (a failed, expired or refused request never does).", []string{"outcome"}, nil)
	descSLOMet = prometheus.NewDesc("narwhal_requests_slo_met_total",
		"Finished requests that met both the TTFT and the TPOT SLO (the SLO's good events), by outcome.", []string{"outcome"}, nil)
)

type totalsCollector struct{ t *Totals }

// NewTotalsCollector exports the totals as the monotonic counters
// narwhal_requests_finished_total, narwhal_requests_ttft_met_total,
// narwhal_requests_tpot_met_total and narwhal_requests_slo_met_total,
// each by outcome, read at scrape time.
func NewTotalsCollector(t *Totals) prometheus.Collector { return totalsCollector{t: t} }

func (c totalsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFinished
	ch <- descTTFTMet
	ch <- descTPOTMet
	ch <- descSLOMet
}

func (c totalsCollector) Collect(ch chan<- prometheus.Metric) {
	for o, n := range c.t.Read() {
		name := Outcome(o).String()
		ch <- prometheus.MustNewConstMetric(descFinished, prometheus.CounterValue, float64(n.Finished), name)
		ch <- prometheus.MustNewConstMetric(descTTFTMet, prometheus.CounterValue, float64(n.TTFTMet), name)
		ch <- prometheus.MustNewConstMetric(descTPOTMet, prometheus.CounterValue, float64(n.TPOTMet), name)
		ch <- prometheus.MustNewConstMetric(descSLOMet, prometheus.CounterValue, float64(n.BothMet), name)
	}
}
