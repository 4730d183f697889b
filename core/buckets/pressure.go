package buckets

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/narwhal-io/narwhal/core/ring"
)

// PressureWindow summarizes a latency/SLO ratio over a window. Over counts
// the observations whose ratio was above 1 (the requests that missed that
// SLO), so Over/Count is the window's measured miss share: a tail the mean
// and max do not show.
type PressureWindow struct {
	FromNs  int64   `json:"from_ns"`
	ToNs    int64   `json:"to_ns"`
	Buckets int     `json:"buckets"`
	Count   int64   `json:"count"`
	Over    int64   `json:"over"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
}

// MissShare is Over / Count, 0 for an empty window.
func (w PressureWindow) MissShare() float64 { return MissShare(w.Over, w.Count) }

// MissShare is the share over / count of observations past their SLO: 0
// when count is not positive, over clamped to [0, count] (a caller's
// figures, or a record read between the two counters).
func MissShare(over, count int64) float64 {
	if count <= 0 {
		return 0
	}
	return float64(min(max(over, 0), count)) / float64(count)
}

// Ratios are kept as fixed point with PressureResolution steps, and clamped
// at MaxPressureRatio, so that sum and max are tagged words like every other
// counter (exact under concurrency, no float CAS loops).
const (
	pressureScale = 1 << 16
	// PressureResolution is the smallest ratio step kept.
	PressureResolution = 1.0 / pressureScale
	// MaxPressureRatio is the largest ratio kept; larger ones are clamped.
	MaxPressureRatio = 1e4
)

type pressureBlock struct {
	count atomic.Uint64
	sum   atomic.Uint64
	max   atomic.Uint64
	over  atomic.Uint64 // ratios above 1
	_     [12]uint64
}

// Pressure accumulates observed latency pressure: per bucket the count, sum
// and maximum of a latency/SLO ratio (e.g. observed TTFT / TTFT SLO), and
// the count of ratios above 1 (SLO misses).
type Pressure struct {
	r          ring.Ring
	blocks     []pressureBlock
	stripeMask int
	stripeLog  uint
	expired    atomic.Int64
}

// NewPressure builds pressure buckets widthNs wide retained for retentionNs.
func NewPressure(widthNs, retentionNs int64) (*Pressure, error) {
	p := &Pressure{}
	if err := p.r.Init(widthNs, retentionNs); err != nil {
		return nil, fmt.Errorf("buckets: new pressure: %w: %w", ErrInvalidConfig, err)
	}
	p.stripeLog, p.stripeMask = ring.StripeLayout()
	n := p.stripeMask + 1
	p.blocks = make([]pressureBlock, p.r.Slots()*n)
	return p, nil
}

func (p *Pressure) block(slot, stripe int) *pressureBlock {
	return &p.blocks[slot<<p.stripeLog+stripe]
}

// Record adds one ratio observed at tsNs. NaN, infinities and negative
// ratios are refused (false, nothing changes), as are timestamps whose
// bucket expired or lies too far ahead; ratios above MaxPressureRatio are
// clamped. A ratio above 1 (the SLO missed; exactly 1 meets it) is also
// counted in Over.
func (p *Pressure) Record(tsNs int64, ratio float64) bool {
	if tsNs < 0 || math.IsNaN(ratio) || math.IsInf(ratio, 0) || ratio < 0 {
		return false
	}
	ratio = min(ratio, MaxPressureRatio)
	fixed := uint64(math.Round(ratio * pressureScale))
	e, ok := p.r.AdmitTs(tsNs, p)
	if !ok || !p.r.Claim(e, p) {
		return false
	}
	tag := ring.TagOf(e)
	b := p.block(p.r.Slot(e), ring.Stripe(p.stripeMask))
	if _, ok := ring.Add(&b.count, tag, 1); !ok {
		return false
	}
	if ratio > 1 {
		ring.Add(&b.over, tag, 1)
	}
	addSaturating(&b.sum, tag, fixed)
	for {
		old := b.max.Load()
		var nw uint64
		switch ring.Rel(old, tag) {
		case ring.Newer:
			nw = old
		case ring.Older:
			nw = ring.Pack(tag, fixed)
		default:
			if ring.WordValue(old) >= fixed {
				nw = old
			} else {
				nw = ring.Pack(tag, fixed)
			}
		}
		if nw == old || b.max.CompareAndSwap(old, nw) {
			break
		}
	}
	p.r.AfterWrite(e, p)
	return true
}

// ExpireSlot implements ring.Expirer.
func (p *Pressure) ExpireSlot(slot int, through int64) int64 {
	tag := ring.TagOf(through)
	var n uint64
	for st := 0; st <= p.stripeMask; st++ {
		b := p.block(slot, st)
		n += ring.Drain(&b.count, tag)
		ring.Drain(&b.sum, tag)
		ring.Drain(&b.max, tag)
		ring.Drain(&b.over, tag)
	}
	p.expired.Add(int64(n))
	return int64(n)
}

// Expired counts the observations expired since the structure was built.
func (p *Pressure) Expired() int64 { return p.expired.Load() }

// Prune expires buckets older than the newest minus the retention.
func (p *Pressure) Prune() int64 { return p.r.Prune(p) }

// Advance moves the newest bucket to a trusted clock reading.
func (p *Pressure) Advance(nowNs int64) int64 { return p.r.Advance(nowNs, p) }

// Window summarizes every retained bucket that intersects [fromNs, toNs]
// (both inclusive; the boundary bucket whole).
func (p *Pressure) Window(fromNs, toNs int64) PressureWindow {
	from, to, ok := p.r.Range(fromNs, toNs)
	if !ok {
		return PressureWindow{FromNs: fromNs, ToNs: toNs}
	}
	w := p.r.WidthNs()
	win := PressureWindow{FromNs: from * w, ToNs: (to + 1) * w, Buckets: int(to - from + 1)}
	var sum, mx, over uint64
	for e := from; e <= to; e++ {
		if !p.r.Holds(e) {
			continue
		}
		tag := ring.TagOf(e)
		slot := p.r.Slot(e)
		for st := 0; st <= p.stripeMask; st++ {
			b := p.block(slot, st)
			win.Count += int64(ring.Value(&b.count, tag))
			sum += ring.Value(&b.sum, tag)
			mx = max(mx, ring.Value(&b.max, tag))
			over += ring.Value(&b.over, tag)
		}
	}
	// A record that lands between the count and over reads may show in
	// over only: over never exceeds the count it is a share of.
	win.Over = min(int64(over), win.Count)
	if win.Count > 0 {
		win.Mean = float64(sum) / pressureScale / float64(win.Count)
		win.Max = float64(mx) / pressureScale
	}
	return win
}

// addSaturating adds v to the tagged sum w, stopping at the largest value a
// word holds instead of spilling into the tag (a bucket would need about
// 8.6e9 / ratio observations for that).
func addSaturating(w *atomic.Uint64, tag, v uint64) {
	for {
		old := w.Load()
		var nw uint64
		switch ring.Rel(old, tag) {
		case ring.Newer:
			return
		case ring.Older:
			nw = ring.Pack(tag, v)
		default:
			nv := ring.WordValue(old) + v
			if nv > ring.ValueMask {
				nv = ring.ValueMask
			}
			nw = ring.Pack(tag, nv)
		}
		if nw == old || w.CompareAndSwap(old, nw) {
			return
		}
	}
}
