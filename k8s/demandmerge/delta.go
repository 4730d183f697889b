package demandmerge

import (
	"errors"
	"fmt"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// ErrInvalidDelta is returned (wrapped) by Store.Apply for a delta it
// refuses; a refused delta changes nothing.
var ErrInvalidDelta = errors.New("demandmerge: invalid delta")

// ErrInvalidConfig is returned (wrapped) by the constructors.
var ErrInvalidConfig = errors.New("demandmerge: invalid config")

// Delta is what one router's embedded core ships to the leader: full
// snapshots of the closed buckets that changed since its last
// acknowledged delta.
type Delta struct {
	// Router identifies the router replica (e.g. its pod name).
	Router string `json:"router"`
	// Epoch is the router process's incarnation (e.g. its start time in
	// Unix ns): a restarted router starts a new epoch with an empty
	// history, and its buckets add to those of its earlier epochs.
	Epoch uint64 `json:"epoch"`
	// Seq increases with every delta within an epoch; per bucket the
	// highest Seq wins, so duplicates and stale reorders are ignored.
	Seq uint64 `json:"seq"`
	// WidthNs and AttainmentWidthNs are the sender's bucket widths; they
	// must equal the leader's.
	WidthNs           int64              `json:"width_ns"`
	AttainmentWidthNs int64              `json:"attainment_width_ns,omitempty"`
	Demand            []DemandBucket     `json:"demand,omitempty"`
	Attainment        []AttainmentBucket `json:"attainment,omitempty"`
}

// DemandBucket is the whole content of one demand bucket of one kind.
type DemandBucket struct {
	Kind    buckets.Kind `json:"kind"`
	StartNs int64        `json:"start_ns"`
	// Cells are the exact cells as [input, output, count], sorted by
	// (input, output); at most buckets.ExactCells.
	Cells    [][3]int64     `json:"cells,omitempty"`
	Overflow buckets.Cohort `json:"overflow"`
	Unsized  int64          `json:"unsized,omitempty"`
	// Invalid: the bucket's boundary evidence was invalidated by a
	// repricing.
	Invalid bool `json:"invalid,omitempty"`
}

// AttainmentBucket is the whole content of one attainment bucket.
type AttainmentBucket struct {
	StartNs   int64                               `json:"start_ns"`
	ByOutcome [buckets.NumOutcomes]buckets.Counts `json:"by_outcome"`
}

func (b *DemandBucket) empty() bool {
	return len(b.Cells) == 0 && b.Overflow.Count == 0 && b.Unsized == 0
}

func (b *AttainmentBucket) empty() bool {
	return b.ByOutcome == [buckets.NumOutcomes]buckets.Counts{}
}

func validTokens(v int64) bool { return v >= 0 && v <= buckets.MaxTokens }

// validate checks every field against the store's geometry.
func (d *Delta) validate(widthNs, attWidthNs int64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: router %q epoch %d seq %d: %s", ErrInvalidDelta, d.Router, d.Epoch, d.Seq, fmt.Sprintf(format, args...))
	}
	if d.Router == "" {
		return bad("router is empty")
	}
	if d.Seq == 0 {
		return bad("seq must be > 0")
	}
	if len(d.Demand) > 0 && d.WidthNs != widthNs {
		return bad("width_ns %d, leader uses %d", d.WidthNs, widthNs)
	}
	if len(d.Attainment) > 0 && d.AttainmentWidthNs != attWidthNs {
		return bad("attainment_width_ns %d, leader uses %d", d.AttainmentWidthNs, attWidthNs)
	}
	type key struct {
		k buckets.Kind
		s int64
	}
	seen := make(map[key]bool, len(d.Demand))
	for i := range d.Demand {
		b := &d.Demand[i]
		if b.Kind >= buckets.NumKinds {
			return bad("demand[%d]: kind %d unknown", i, b.Kind)
		}
		if b.StartNs < 0 || b.StartNs%widthNs != 0 {
			return bad("demand[%d]: start_ns %d is not a bucket start", i, b.StartNs)
		}
		if seen[key{b.Kind, b.StartNs}] {
			return bad("demand[%d]: %s bucket %d sent twice", i, b.Kind, b.StartNs)
		}
		seen[key{b.Kind, b.StartNs}] = true
		if len(b.Cells) > buckets.ExactCells {
			return bad("demand[%d]: %d cells > %d", i, len(b.Cells), buckets.ExactCells)
		}
		for j, c := range b.Cells {
			if !validTokens(c[0]) || !validTokens(c[1]) || c[2] <= 0 {
				return bad("demand[%d].cells[%d] = %v: want tokens in [0, %d] and count > 0", i, j, c, buckets.MaxTokens)
			}
			if j > 0 {
				p := b.Cells[j-1]
				if p[0] > c[0] || (p[0] == c[0] && p[1] >= c[1]) {
					return bad("demand[%d].cells not sorted by shape or shape repeated at %d", i, j)
				}
			}
		}
		o := b.Overflow
		if o.Count < 0 || !validTokens(o.MaxInput) || !validTokens(o.MaxOutput) || (o.Count == 0 && (o.MaxInput != 0 || o.MaxOutput != 0 || o.ZeroOutput)) {
			return bad("demand[%d].overflow %+v is inconsistent", i, o)
		}
		if b.Unsized < 0 {
			return bad("demand[%d].unsized %d < 0", i, b.Unsized)
		}
	}
	seenAtt := make(map[int64]bool, len(d.Attainment))
	for i := range d.Attainment {
		b := &d.Attainment[i]
		if b.StartNs < 0 || attWidthNs <= 0 || b.StartNs%attWidthNs != 0 {
			return bad("attainment[%d]: start_ns %d is not a bucket start", i, b.StartNs)
		}
		if seenAtt[b.StartNs] {
			return bad("attainment[%d]: bucket %d sent twice", i, b.StartNs)
		}
		seenAtt[b.StartNs] = true
		for o, c := range b.ByOutcome {
			if c.Total < 0 || c.TTFTMet < 0 || c.TPOTMet < 0 || c.TTFTMet > c.Total || c.TPOTMet > c.Total {
				return bad("attainment[%d] %s counts %+v inconsistent", i, buckets.Outcome(o), c)
			}
		}
	}
	return nil
}
