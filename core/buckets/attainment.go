package buckets

import (
	"fmt"
	"sync/atomic"

	"github.com/narwhal-io/narwhal/core/ring"
)

const (
	cntTotal = iota
	cntTTFT
	cntTPOT
	cntPerOutcome
)

// attBlock is one stripe of one attainment bucket: per outcome the total,
// TTFT-met and TPOT-met counts, padded to two cache lines.
type attBlock struct {
	c [int(NumOutcomes) * cntPerOutcome]atomic.Uint64
	_ [16 - int(NumOutcomes)*cntPerOutcome]uint64
}

// Attainment holds SLO attainment buckets of monitor_interval_s: per outcome
// the TTFT-met, TPOT-met and total counts.
type Attainment struct {
	r          ring.Ring
	blocks     []attBlock
	stripeMask int
	stripeLog  uint
	expired    atomic.Int64
	totals     *Totals // monotonic, never expire (totals.go)
}

// NewAttainment builds attainment buckets intervalNs wide retained for
// retentionNs (four demand windows, by the spec).
func NewAttainment(intervalNs, retentionNs int64) (*Attainment, error) {
	a := &Attainment{totals: newTotals()}
	if err := a.r.Init(intervalNs, retentionNs); err != nil {
		return nil, fmt.Errorf("buckets: new attainment: %w: %w", ErrInvalidConfig, err)
	}
	a.stripeLog, a.stripeMask = ring.StripeLayout()
	n := a.stripeMask + 1
	a.blocks = make([]attBlock, a.r.Slots()*n)
	return a, nil
}

func (a *Attainment) block(slot, stripe int) *attBlock {
	return &a.blocks[slot<<a.stripeLog+stripe]
}

// Record counts one request that ended with outcome o at tsNs. It returns
// false, changing nothing, for a negative timestamp, an unknown outcome, or
// a timestamp whose bucket has expired or lies too far ahead.
func (a *Attainment) Record(tsNs int64, o Outcome, ttftMet, tpotMet bool) bool {
	if tsNs < 0 || o >= NumOutcomes {
		return false
	}
	e, ok := a.r.AdmitTs(tsNs, a)
	if !ok || !a.r.Claim(e, a) {
		return false
	}
	tag := ring.TagOf(e)
	st := ring.Stripe(a.stripeMask)
	b := a.block(a.r.Slot(e), st)
	base := int(o) * cntPerOutcome
	exp, ok := ring.Add(&b.c[base+cntTotal], tag, 1)
	if !ok {
		return false
	}
	if exp != 0 { // lazy clear of an older bucket: its requests expire here
		a.expired.Add(int64(exp))
	}
	if ttftMet {
		ring.Add(&b.c[base+cntTTFT], tag, 1)
	}
	if tpotMet {
		ring.Add(&b.c[base+cntTPOT], tag, 1)
	}
	a.totals.add(st, o, ttftMet, tpotMet)
	a.r.AfterWrite(e, a)
	return true
}

// ExpireSlot implements ring.Expirer. Expired requests are counted by their
// totals.
func (a *Attainment) ExpireSlot(slot int, through int64) int64 {
	tag := ring.TagOf(through)
	var n uint64
	for st := 0; st <= a.stripeMask; st++ {
		b := a.block(slot, st)
		for i := range b.c {
			v := ring.Drain(&b.c[i], tag)
			if i%cntPerOutcome == cntTotal {
				n += v
			}
		}
	}
	a.expired.Add(int64(n))
	return int64(n)
}

// Prune expires buckets older than the newest recorded bucket minus the
// retention; it returns the requests this call expired.
func (a *Attainment) Prune() int64 { return a.r.Prune(a) }

// Advance moves the newest bucket to a trusted clock reading (see
// History.Advance).
func (a *Attainment) Advance(nowNs int64) int64 { return a.r.Advance(nowNs, a) }

// Expired counts every request expired since the structure was built (by
// Prune, by recording, or by a lazy clear).
func (a *Attainment) Expired() int64 { return a.expired.Load() }

// Window sums every retained bucket that intersects [fromNs, toNs] (both
// inclusive; the boundary bucket whole).
func (a *Attainment) Window(fromNs, toNs int64) AttainmentWindow {
	from, to, ok := a.r.Range(fromNs, toNs)
	if !ok {
		return AttainmentWindow{FromNs: fromNs, ToNs: toNs}
	}
	w := a.r.WidthNs()
	win := AttainmentWindow{FromNs: from * w, ToNs: (to + 1) * w, Buckets: int(to - from + 1)}
	for e := from; e <= to; e++ {
		if !a.r.Holds(e) {
			continue
		}
		tag := ring.TagOf(e)
		slot := a.r.Slot(e)
		for st := 0; st <= a.stripeMask; st++ {
			b := a.block(slot, st)
			for o := range win.ByOutcome {
				base := o * cntPerOutcome
				c := &win.ByOutcome[o]
				c.Total += int64(ring.Value(&b.c[base+cntTotal], tag))
				c.TTFTMet += int64(ring.Value(&b.c[base+cntTTFT], tag))
				c.TPOTMet += int64(ring.Value(&b.c[base+cntTPOT], tag))
			}
		}
	}
	return win
}

// CoveredS is covered_s: the age at nowNs of the oldest retained bucket's
// start, capped at the retention span (and 0 before the first record).
func (a *Attainment) CoveredS(nowNs int64) float64 {
	o := a.r.Oldest()
	if o == ring.None {
		return 0
	}
	age := nowNs - o*a.r.WidthNs()
	if lim := a.r.RetentionNs(); age > lim {
		age = lim
	}
	if age < 0 {
		age = 0
	}
	return float64(age) / 1e9
}
