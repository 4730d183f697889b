package demandmerge

import (
	"github.com/narwhal-io/narwhal/core/buckets"
)

// KindView reads one merged demand kind. It answers Window and Evidence
// with the semantics of buckets.History, so it satisfies the controller's
// HistoryReader and the leader's controller can read merged demand in
// place of its local history.
type KindView struct {
	s *Store
	k buckets.Kind
}

// History returns the merged view of kind k; nil for an unknown kind.
func (s *Store) History(k buckets.Kind) *KindView {
	if k >= buckets.NumKinds {
		return nil
	}
	return &KindView{s: s, k: k}
}

// WidthNs is the bucket width.
func (v *KindView) WidthNs() int64 { return v.s.kinds[v.k].widthNs }

// Window appends the merged exact cells of every retained bucket that
// intersects [fromNs, toNs] (oldest bucket first; within a bucket sorted
// by shape) and summarizes them, the boundary bucket included whole.
func (v *KindView) Window(fromNs, toNs int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	v.s.mu.RLock()
	defer v.s.mu.RUnlock()
	k := &v.s.kinds[v.k]
	from, to, ok := k.span(fromNs, toNs)
	if !ok {
		return dst, buckets.Window{FromNs: fromNs, ToNs: toNs}
	}
	w := k.widthNs
	win := buckets.Window{FromNs: from * w, ToNs: (to + 1) * w, Buckets: int(to - from + 1)}
	for e := from; e <= to; e++ {
		mb := k.buckets[e]
		if mb == nil {
			continue
		}
		dst = append(dst, mb.cells...)
		win.Exact += mb.exact
		mergeCohort(&win.Overflow, mb.overflow)
		win.Unsized += mb.unsized
		if mb.invalid {
			win.InvalidBuckets++
		}
	}
	return dst, win
}

// Evidence counts, conservatively, the merged observations known to fall
// after cutoffNs: only buckets starting at or after the cutoff, ending by
// toNs's bucket, and with valid boundary evidence in every router.
func (v *KindView) Evidence(cutoffNs, toNs int64) buckets.Evidence {
	v.s.mu.RLock()
	defer v.s.mu.RUnlock()
	k := &v.s.kinds[v.k]
	var ev buckets.Evidence
	cutoffNs = max(cutoffNs, 0)
	from, to, ok := k.span(cutoffNs, toNs)
	if !ok {
		return ev
	}
	w := k.widthNs
	if from*w < cutoffNs {
		if mb := k.buckets[from]; mb != nil && mb.exact+mb.overflow.Count > 0 {
			ev.SkippedStraddling = 1
		}
		from++
	}
	first, last := int64(-1), int64(-1)
	for e := from; e <= to; e++ {
		mb := k.buckets[e]
		if mb != nil && mb.invalid {
			ev.SkippedInvalid++
			continue
		}
		if first < 0 {
			first = e
		}
		last = e
		ev.Buckets++
		if mb != nil {
			ev.Observations += mb.exact + mb.overflow.Count
			ev.Overflow += mb.overflow.Count
		}
	}
	if first >= 0 {
		ev.SpanNs = (last - first + 1) * w
	}
	return ev
}

// Stats is the merged kind's introspection.
func (v *KindView) Stats() buckets.KindStats {
	v.s.mu.RLock()
	defer v.s.mu.RUnlock()
	k := &v.s.kinds[v.k]
	st := buckets.KindStats{CellLimit: buckets.ExactCells * (k.keep + 1)}
	for _, mb := range k.buckets {
		st.RetainedCells += int64(len(mb.cells))
		st.Observations += mb.exact + mb.overflow.Count
		st.OverflowObservations += mb.overflow.Count
	}
	return st
}

// AttainmentView reads merged SLO attainment.
type AttainmentView struct{ s *Store }

// Attainment returns the merged attainment view; nil when the store was
// built without attainment.
func (s *Store) Attainment() *AttainmentView {
	if s.att.widthNs == 0 {
		return nil
	}
	return &AttainmentView{s: s}
}

// Window sums every retained merged bucket that intersects [fromNs, toNs],
// the boundary bucket whole, as buckets.Attainment.Window.
func (v *AttainmentView) Window(fromNs, toNs int64) buckets.AttainmentWindow {
	v.s.mu.RLock()
	defer v.s.mu.RUnlock()
	a := &v.s.att
	from, to, ok := a.span(fromNs, toNs)
	if !ok {
		return buckets.AttainmentWindow{FromNs: fromNs, ToNs: toNs}
	}
	w := a.widthNs
	win := buckets.AttainmentWindow{FromNs: from * w, ToNs: (to + 1) * w, Buckets: int(to - from + 1)}
	for e := from; e <= to; e++ {
		mb := a.buckets[e]
		if mb == nil {
			continue
		}
		for o := range win.ByOutcome {
			win.ByOutcome[o].Total += mb.by[o].Total
			win.ByOutcome[o].TTFTMet += mb.by[o].TTFTMet
			win.ByOutcome[o].TPOTMet += mb.by[o].TPOTMet
		}
	}
	return win
}

// CoveredS is covered_s of the merged attainment at nowNs.
func (v *AttainmentView) CoveredS(nowNs int64) float64 {
	v.s.mu.RLock()
	defer v.s.mu.RUnlock()
	a := &v.s.att
	if !a.has {
		return 0
	}
	age := nowNs - a.oldest()*a.widthNs
	age = min(age, a.retentionNs)
	return float64(max(age, 0)) / 1e9
}
