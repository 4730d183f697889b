package buckets

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/ring"
)

// Monotonic totals of finished requests, beside the attainment buckets:
// the buckets answer "attainment over the last window" and expire, the
// totals only grow, which is what Prometheus rates and SLO burn-rate
// rules need (narwhal_requests_*_total). They are striped like the
// buckets (one stripe per P, two cache lines each), so a record costs
// up to four uncontended atomic adds and no allocation.

const (
	totFinished = iota
	totTTFT
	totTPOT
	totBoth
	totPerOutcome
)

// totBlock is one stripe of the totals: per outcome finished, TTFT-met,
// TPOT-met and both-met, padded to two cache lines.
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

func (t *Totals) add(o Outcome, ttftMet, tpotMet bool) {
	b := &t.stripes[ring.Stripe(t.mask)]
	base := int(o) * totPerOutcome
	b.c[base+totFinished].Add(1)
	if ttftMet {
		b.c[base+totTTFT].Add(1)
	}
	if tpotMet {
		b.c[base+totTPOT].Add(1)
	}
	if ttftMet && tpotMet {
		b.c[base+totBoth].Add(1)
	}
}

// Read sums the stripes. While writers run the outcomes are read one
// counter at a time, so a read may see a request counted as finished and
// not yet as met; every counter is still monotonic.
func (t *Totals) Read() [NumOutcomes]TotalCounts {
	var out [NumOutcomes]TotalCounts
	for i := range t.stripes {
		b := &t.stripes[i]
		for o := range out {
			base := o * totPerOutcome
			out[o].Finished += b.c[base+totFinished].Load()
			out[o].TTFTMet += b.c[base+totTTFT].Load()
			out[o].TPOTMet += b.c[base+totTPOT].Load()
			out[o].BothMet += b.c[base+totBoth].Load()
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
