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

// OfferStarted counts a request body being read (pending).
func (d *Demand) OfferStarted() { d.pending.Add(1) }

func (d *Demand) donePending() {
	for {
		p := d.pending.Load()
		if p <= 0 || d.pending.CompareAndSwap(p, p-1) {
			return
		}
	}
}

// OfferSized ends a pending offer (never below zero) and records its shape
// in the arrivals history at its arrival time.
func (d *Demand) OfferSized(arrivalNs int64, s Shape) bool {
	d.donePending()
	return d.Arrivals.Record(arrivalNs, s)
}

// OfferUnsizedEnd ends a pending offer (never below zero) that terminated
// before sizing and records it in the arrivals history's unsized cell.
func (d *Demand) OfferUnsizedEnd(tsNs int64) bool {
	d.donePending()
	return d.Arrivals.RecordUnsized(tsNs)
}

// Pending counts request bodies still being read.
func (d *Demand) Pending() int64 { return d.pending.Load() }

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
			Pending:      d.pending.Load(),
			Observations: d.Arrivals.UnsizedObservations(),
		},
	}
}
