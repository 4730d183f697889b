package buckets

import (
	"fmt"
	"sync/atomic"

	"github.com/narwhal-io/narwhal/core/ring"
)

// BucketWidth is the demand bucket width: the minimum of one second, the
// controller step and the minimum evidence span. Non-positive arguments are
// ignored (one second remains).
func BucketWidth(stepNs, minEvidenceSpanNs int64) int64 {
	w := int64(1e9)
	if stepNs > 0 && stepNs < w {
		w = stepNs
	}
	if minEvidenceSpanNs > 0 && minEvidenceSpanNs < w {
		w = minEvidenceSpanNs
	}
	return w
}

// Retention of each kind, in demand windows.
const (
	ArrivalsWindows  = 1
	ResidencyWindows = 1
	OutputsWindows   = 4
)

// DemandConfig sizes the demand histories.
type DemandConfig struct {
	BucketWidthNs  int64 `json:"bucket_width_ns"`
	DemandWindowNs int64 `json:"demand_window_ns"`
}

// Demand holds the three demand histories and the unsized offers.
type Demand struct {
	Arrivals  *History
	Residency *History
	Outputs   *History
	_         ring.Pad
	pending   atomic.Int64
	_         ring.Pad
}

// NewDemand builds the three histories: arrivals and residency retained for
// one demand window, outputs for four.
func NewDemand(cfg DemandConfig) (*Demand, error) {
	if cfg.BucketWidthNs <= 0 || cfg.DemandWindowNs < cfg.BucketWidthNs {
		return nil, fmt.Errorf("buckets: new demand: %w: bucket_width_ns %d, demand_window_ns %d (want width > 0 and window >= width)",
			ErrInvalidConfig, cfg.BucketWidthNs, cfg.DemandWindowNs)
	}
	d := &Demand{}
	var err error
	if d.Arrivals, err = NewHistory(cfg.BucketWidthNs, ArrivalsWindows*cfg.DemandWindowNs); err != nil {
		return nil, fmt.Errorf("arrivals: %w", err)
	}
	if d.Residency, err = NewHistory(cfg.BucketWidthNs, ResidencyWindows*cfg.DemandWindowNs); err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	if d.Outputs, err = NewHistory(cfg.BucketWidthNs, OutputsWindows*cfg.DemandWindowNs); err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	return d, nil
}

// History returns the history of kind k (nil for an unknown kind).
func (d *Demand) History(k Kind) *History {
	switch k {
	case KindArrivals:
		return d.Arrivals
	case KindResidency:
		return d.Residency
	case KindOutputs:
		return d.Outputs
	}
	return nil
}

// The pending word packs two counters so that OfferStarted is one atomic
// add: the low 32 bits count offers pending now, the high 32 bits count
// every offer ever started (mod 2^32), which is what ExpirePending needs.
const (
	pendingMask = 1<<32 - 1
	startedOne  = 1 << 32
)

// OfferStarted counts a request body being read (pending).
func (d *Demand) OfferStarted() { d.pending.Add(startedOne | 1) }

// EndPending ends one pending offer without recording anything (never
// below zero: an end without a start is ignored). It returns whether an
// offer was pending.
func (d *Demand) EndPending() bool {
	for {
		p := d.pending.Load()
		if p&pendingMask == 0 {
			return false
		}
		if d.pending.CompareAndSwap(p, p-1) {
			return true
		}
	}
}

// Started is the number of offers ever started, mod 2^32 (for
// ExpirePending's marks).
func (d *Demand) Started() uint32 { return uint32(uint64(d.pending.Load()) >> 32) }

// ExpirePending ends the offers that were already pending when Started
// returned mark and are still pending now, and records each as an unsized
// observation at nowNs. Offers carry no identity, so ends are matched to
// the oldest pending offers first: of the offers started before the mark,
// at least pending − (started since the mark) are still pending. That
// bound alone never expires an offer a crashed router left while other
// offers keep starting and ending (their ends are matched to it), so the
// caller also passes floor, the fewest offers pending at any moment it
// sampled since the mark: at least that many are expired (at most all
// pending). It returns how many it expired.
func (d *Demand) ExpirePending(mark uint32, floor, nowNs int64) int64 {
	for {
		p := d.pending.Load()
		since := int64(uint32(uint64(p)>>32) - mark)
		pending := int64(p & pendingMask)
		n := max(pending-since, min(floor, pending))
		if n <= 0 {
			return 0
		}
		if d.pending.CompareAndSwap(p, p-n) {
			for range n {
				d.Arrivals.RecordUnsized(nowNs)
			}
			return n
		}
	}
}

// OfferSized ends a pending offer (never below zero) and records its shape
// in the arrivals history at its arrival time.
func (d *Demand) OfferSized(arrivalNs int64, s Shape) bool {
	d.EndPending()
	return d.Arrivals.Record(arrivalNs, s)
}

// OfferUnsizedEnd ends a pending offer (never below zero) that terminated
// before sizing and records it in the arrivals history's unsized cell.
func (d *Demand) OfferUnsizedEnd(tsNs int64) bool {
	d.EndPending()
	return d.Arrivals.RecordUnsized(tsNs)
}

// Pending counts request bodies still being read.
func (d *Demand) Pending() int64 { return d.pending.Load() & pendingMask }

// Prune prunes the three histories and returns the observations expired.
func (d *Demand) Prune() int64 {
	return d.Arrivals.Prune() + d.Residency.Prune() + d.Outputs.Prune()
}

// Advance moves the three histories to a trusted clock reading (see
// History.Advance) and returns the observations expired.
func (d *Demand) Advance(nowNs int64) int64 {
	return d.Arrivals.Advance(nowNs) + d.Residency.Advance(nowNs) + d.Outputs.Advance(nowNs)
}

// Snapshot reads demand_history (a scan of the retained buckets).
func (d *Demand) Snapshot() DemandHistory {
	return DemandHistory{
		Arrivals:  d.Arrivals.Stats(),
		Residency: d.Residency.Stats(),
		Outputs:   d.Outputs.Stats(),
		Unsized: UnsizedStats{
			Pending:      d.Pending(),
			Observations: d.Arrivals.UnsizedObservations(),
		},
	}
}
