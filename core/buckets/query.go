package buckets

import (
	"math/bits"

	"github.com/narwhal-io/narwhal/core/ring"
)

// bucketSummary is what one bucket holds, read at query time.
type bucketSummary struct {
	exact    int64
	overflow Cohort
	unsized  int64
	invalid  bool
	claimed  int64 // exact cells claimed
}

// readBucket reads bucket epoch, appending its non-empty exact cells to dst
// when dst is not nil (appendCells).
func (h *History) readBucket(epoch int64, dst []Cell, appendCells bool) ([]Cell, bucketSummary) {
	var sum bucketSummary
	if !h.r.Holds(epoch) {
		return dst, sum
	}
	slot := h.r.Slot(epoch)
	tag := ring.TagOf(epoch)
	sh := &h.shared[slot]
	for g := range sh.ctrl {
		for m := sh.ctrl[g].Load() & msbBytes; m != 0; m &= m - 1 {
			i := g*groupCells + bits.TrailingZeros64(m)/8
			k := sh.keys[i].Load()
			if k&presentBit == 0 || k>>ring.ValueBits != tag {
				continue
			}
			sum.claimed++
			var c uint64
			for st := 0; st <= h.stripeMask; st++ {
				if v := sh.block(st).cells[i].Load(); v>>ring.ValueBits == tag {
					c += v & ring.ValueMask
				}
			}
			if c == 0 {
				continue
			}
			sum.exact += int64(c)
			if appendCells {
				dst = append(dst, Cell{Shape: keyShape(k), Count: int64(c)})
			}
		}
	}
	for st := 0; st <= h.stripeMask; st++ {
		b := sh.block(st)
		sum.overflow.Count += int64(ring.Value(&b.overflow, tag))
		sum.unsized += int64(ring.Value(&b.unsized, tag))
	}
	if sum.overflow.Count > 0 {
		sum.overflow.MaxInput = int64(ring.Value(&sh.maxIn, tag) >> atMaxBits)
		sum.overflow.MaxOutput = int64(ring.Value(&sh.maxOut, tag) >> atMaxBits)
	}
	m := ring.Value(&sh.meta, tag)
	sum.overflow.ZeroOutput = sum.overflow.Count > 0 && m&metaZeroSeen != 0
	sum.invalid = m&metaInvalid != 0
	return dst, sum
}

func mergeCohort(dst *Cohort, c Cohort) {
	dst.Count += c.Count
	dst.MaxInput = max(dst.MaxInput, c.MaxInput)
	dst.MaxOutput = max(dst.MaxOutput, c.MaxOutput)
	dst.ZeroOutput = dst.ZeroOutput || c.ZeroOutput
}

// Window appends to dst the exact cells (per bucket, not merged; oldest
// bucket first) of every retained bucket that intersects [fromNs, toNs]
// (both inclusive) and summarizes them. The bucket containing fromNs is
// included whole, so the window may start up to one bucket width before
// fromNs. With a dst of enough capacity it does not allocate.
func (h *History) Window(fromNs, toNs int64, dst []Cell) ([]Cell, Window) {
	from, to, ok := h.r.Range(fromNs, toNs)
	if !ok {
		return dst, Window{FromNs: fromNs, ToNs: toNs}
	}
	w := h.r.WidthNs()
	win := Window{FromNs: from * w, ToNs: (to + 1) * w, Buckets: int(to - from + 1)}
	for e := from; e <= to; e++ {
		var b bucketSummary
		dst, b = h.readBucket(e, dst, true)
		win.Exact += b.exact
		mergeCohort(&win.Overflow, b.overflow)
		win.Unsized += b.unsized
		if b.invalid {
			win.InvalidBuckets++
		}
	}
	return dst, win
}

// Evidence counts, conservatively, the observations known to fall after
// cutoffNs: only retained buckets that start at or after cutoffNs and end
// by toNs's bucket, and whose boundary evidence is valid. Buckets before the
// first record ever are not evidence of anything and are not counted.
func (h *History) Evidence(cutoffNs, toNs int64) Evidence {
	var ev Evidence
	if cutoffNs < 0 {
		cutoffNs = 0
	}
	from, to, ok := h.r.Range(cutoffNs, toNs)
	if !ok {
		return ev
	}
	w := h.r.WidthNs()
	if from*w < cutoffNs { // the bucket holding the cutoff straddles it
		if _, b := h.readBucket(from, nil, false); b.exact+b.overflow.Count > 0 {
			ev.SkippedStraddling = 1
		}
		from++
	}
	first, last := int64(-1), int64(-1)
	for e := from; e <= to; e++ {
		_, b := h.readBucket(e, nil, false)
		if b.invalid {
			ev.SkippedInvalid++
			continue
		}
		if first < 0 {
			first = e
		}
		last = e
		ev.Buckets++
		ev.Observations += b.exact + b.overflow.Count
		ev.Overflow += b.overflow.Count
	}
	if first >= 0 {
		ev.SpanNs = (last - first + 1) * w
	}
	return ev
}

// Stats reads the history's introspection (a scan of the retained buckets;
// nothing is counted on the record path).
func (h *History) Stats() KindStats {
	st := KindStats{CellLimit: ExactCells * h.RetentionBuckets()}
	o, n := h.r.Oldest(), h.r.Newest()
	if o == ring.None {
		return st
	}
	for e := o; e <= n; e++ {
		_, b := h.readBucket(e, nil, false)
		st.RetainedCells += b.claimed
		st.Observations += b.exact + b.overflow.Count
		st.OverflowObservations += b.overflow.Count
	}
	return st
}

// UnsizedObservations counts the retained offers that terminated before
// sizing.
func (h *History) UnsizedObservations() int64 {
	o, n := h.r.Oldest(), h.r.Newest()
	if o == ring.None {
		return 0
	}
	var u int64
	for e := o; e <= n; e++ {
		_, b := h.readBucket(e, nil, false)
		u += b.unsized
	}
	return u
}

// HasOverflow reports whether any retained bucket holds overflow
// observations. For the outputs history this is the signal that learned
// output discounts must stay disabled until those observations expire.
func (h *History) HasOverflow() bool {
	o, n := h.r.Oldest(), h.r.Newest()
	if o == ring.None {
		return false
	}
	for e := o; e <= n; e++ {
		if !h.r.Holds(e) {
			continue
		}
		slot, tag := h.r.Slot(e), ring.TagOf(e)
		sh := &h.shared[slot]
		for st := 0; st <= h.stripeMask; st++ {
			if ring.Value(&sh.block(st).overflow, tag) > 0 {
				return true
			}
		}
	}
	return false
}
