package buckets

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/narwhal-io/narwhal/core/ring"
)

// MaxTokens is the largest input or output length a shape may carry;
// larger (or negative) lengths are refused.
const MaxTokens = 1<<24 - 1

// ProbeWindow is how many consecutive cells, from a shape's home cell, a
// shape may occupy: a shape that finds neither its own cell nor a free one
// within its window goes to the overflow cohort.
const ProbeWindow = 16

// ErrInvalidConfig is returned for a width, retention or interval the
// structures cannot use.
var ErrInvalidConfig = errors.New("buckets: invalid configuration")

// Key words: tag (15 bits) | present (1 bit) | input (24 bits) | output (24 bits).
const (
	presentBit = uint64(1) << 48
	shapeMask  = presentBit - 1
)

func shapeBits(s Shape) uint64 { return uint64(s.Input)<<24 | uint64(s.Output) }

func keyOf(tag uint64, s Shape) uint64 { return tag<<ring.ValueBits | presentBit | shapeBits(s) }

func keyShape(k uint64) Shape {
	return Shape{Input: int64(k>>24) & MaxTokens, Output: int64(k) & MaxTokens}
}

// ProbeStart is a shape's home cell in the 128-cell table of a bucket: the
// first cell of one of 16 groups of 8. Cells are probed from there for
// ProbeWindow cells (the home group, then the next, wrapping). Exported so
// that reference models can reproduce placement.
func ProbeStart(s Shape) int {
	return int(shapeHash(s)>>60) * groupCells
}

func shapeHash(s Shape) uint64 { return shapeBits(s) * 0x9E3779B97F4A7C15 }

// Each bucket keeps one control byte per cell (8 per word): 0 when the cell
// is free, else 0x80 | 7 bits of the shape's hash. Writers find a shape's
// cell by matching control bytes eight at a time (SWAR), and read keys only
// for the candidates; readers skip free cells eight at a time. The key words
// stay the authority: control bytes are maintained so that every live key
// has its byte once writers are done (see setCtrl and ExpireSlot).
const (
	groupCells = 8
	groups     = ExactCells / groupCells
	lsbBytes   = uint64(0x0101010101010101)
	msbBytes   = uint64(0x8080808080808080)
	lowBytes   = uint64(0x7F7F7F7F7F7F7F7F)
)

func fingerprint(h uint64) uint64 { return 0x80 | (h>>52)&0x7F }

// matchBytes has the top bit of every byte of c equal to b set (exact).
func matchBytes(c, b uint64) uint64 { return matchWord(c, lsbBytes*b) }

// matchWord is matchBytes with b already in every byte of bw (a record
// broadcasts its fingerprint once for both groups of its window).
func matchWord(c, bw uint64) uint64 {
	x := c ^ bw
	return ^((x&lowBytes + lowBytes) | x | lowBytes)
}

// matchFirst is matchWord in fewer steps, exact up to its lowest set
// byte: a byte above a matching one may be reported too (a borrow), never
// one below, and none when nothing matches. Record's fast path takes its
// lowest candidate from it and leaves two or more to the general path.
func matchFirst(c, bw uint64) uint64 {
	x := c ^ bw
	return (x - lsbBytes) &^ x & msbBytes
}

// findKey returns the cell of group g (control word c) whose byte
// matches the fingerprint broadcast in fpw and whose key is want, or -1.
func (sh *slotShared) findKey(c, fpw uint64, g uint, want uint64) int {
	for m := matchWord(c, fpw); m != 0; m &= m - 1 {
		// j < ExactCells (g < groups); the mask spares the bounds check
		if j := (g*groupCells + uint(bits.TrailingZeros64(m))/8) % ExactCells; sh.keys[j].Load() == want {
			return int(j)
		}
	}
	return -1
}

// setCtrl sets cell i's control byte to fp (0 clears it).
func setCtrl(sh *slotShared, i int, fp uint64) {
	w := &sh.ctrl[i/groupCells]
	shift := uint(i%groupCells) * 8
	for {
		old := w.Load()
		nw := old&^(0xFF<<shift) | fp<<shift
		if nw == old || w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// Max words (overflow maxima): tag | max (24 bits) | observations at the max (25 bits).
const (
	atMaxBits = 25
	atMaxMask = 1<<atMaxBits - 1
)

// Meta word: tag | zero-output seen (sticky) | invalid | zero-output count.
const (
	metaZeroSeen = uint64(1) << 47
	metaInvalid  = uint64(1) << 46
	metaCount    = metaInvalid - 1
)

type slotShared struct {
	ctrl   [groups]atomic.Uint64
	keys   [ExactCells]atomic.Uint64
	maxIn  atomic.Uint64
	maxOut atomic.Uint64
	meta   atomic.Uint64
	// more is this slot's stripes after the first (a window of
	// History.stripes, set once); the first, where every record counts
	// until writers contend, lives in the slot itself (b0), at a fixed
	// offset from the slot the fast path holds. See block.
	more []stripeBlock
	_    [10]uint64 // the shared words fill 1280 bytes: b0 starts a line
	b0   stripeBlock
}

// block is the slot's stripe st.
func (sh *slotShared) block(st int) *stripeBlock {
	if st == 0 {
		return &sh.b0
	}
	return &sh.more[st-1]
}

// stripeBlock holds one stripe's counters of one slot; stripes of a slot are
// separate blocks so that writers on different Ps touch different lines.
type stripeBlock struct {
	cells    [ExactCells]atomic.Uint64
	overflow atomic.Uint64
	unsized  atomic.Uint64
	_        [14]uint64
}

// History is the demand history of one kind: a ring of buckets, each with
// ExactCells exact shape cells, one overflow cohort and one unsized cell.
// See the package documentation for the concurrency and allocation contract.
type History struct {
	r          ring.Ring
	shared     []slotShared
	stripes    []stripeBlock // backing store of every slot's stripes after the first (slotShared.more)
	stripeMask int
	// spread is set (for good) once two writers have raced on one
	// counter: until then every writer counts in stripe 0 and pays no
	// per-P lookup (a router with one recording goroutine never does),
	// after it each counts in its P's stripe (LongAdder's rule).
	spread atomic.Uint32
	// cur is the slot of the newest claimed bucket (ring.Ring.Claimed),
	// kept beside it for Record's fast path, which reaches it with one
	// load instead of the slot arithmetic. The two are written apart, so
	// the fast path may pair a bucket with another bucket's slot: every
	// word there carries another tag (slots divide the tag space), so it
	// never counts there, and its ways out find the slot from the bucket.
	cur        atomic.Pointer[slotShared]
	expSized   atomic.Int64
	expUnsized atomic.Int64
}

// NewHistory builds a history of buckets widthNs wide retained for
// retentionNs (floor(retention/width)+1 buckets).
func NewHistory(widthNs, retentionNs int64) (*History, error) {
	h := &History{}
	if err := h.r.Init(widthNs, retentionNs); err != nil {
		return nil, fmt.Errorf("buckets: new history: %w: %w", ErrInvalidConfig, err)
	}
	_, h.stripeMask = ring.StripeLayout()
	n := h.stripeMask + 1
	h.shared = make([]slotShared, h.r.Slots())
	m := n - 1
	h.stripes = make([]stripeBlock, h.r.Slots()*m)
	for i := range h.shared {
		h.shared[i].more = h.stripes[i*m : (i+1)*m : (i+1)*m]
	}
	h.cur.Store(&h.shared[0])
	return h, nil
}

// WidthNs is the bucket width.
func (h *History) WidthNs() int64 { return h.r.WidthNs() }

// RetentionBuckets is how many buckets are retained (the newest included).
func (h *History) RetentionBuckets() int64 { return h.r.Keep() + 1 }

// NewestNs is the start of the newest recorded bucket (ok false when empty).
func (h *History) NewestNs() (int64, bool) {
	n := h.r.Newest()
	return n * h.r.WidthNs(), n != ring.None
}

// Expired returns every observation expired since the history was built:
// sized (exact and overflow) and unsized.
func (h *History) Expired() (sized, unsized int64) {
	return h.expSized.Load(), h.expUnsized.Load()
}

// Refusals counts records refused for time: too old (their bucket had
// expired) and too far ahead of the newest bucket; jumps counts advances of
// more than one retention (an idle gap, or two consistent far records).
func (h *History) Refusals() (tooOld, tooFar, jumps int64) {
	return h.r.RefusedOld(), h.r.RefusedFar(), h.r.Jumps()
}

func validShape(s Shape) bool {
	return uint64(s.Input) <= MaxTokens && uint64(s.Output) <= MaxTokens // negatives wrap high
}

func (h *History) block(slot, stripe int) *stripeBlock {
	return h.shared[slot].block(stripe)
}

// Record counts one sized observation at tsNs. It returns false, and
// changes nothing, for a negative timestamp, a shape outside
// [0, MaxTokens], a timestamp whose bucket has expired, or one too far
// ahead (see the package documentation).
//
// This is the router's per-request cost, so the common case (a timestamp
// in the newest claimed bucket; the shape in its cell, or a full window
// sending it to the overflow) is written out here with no calls before
// its one compare-and-swap: every other case leaves for the general path
// (record, or recordIn once the bucket is known), the fast path having
// changed nothing. What the swap waits on was measured to be the cost
// (benchmarks/README.md): the chain slot -> control word -> candidate key
// is kept short, the overflow's count is read before the decision, and
// nothing but the rare evidence write follows the swap.
func (h *History) Record(tsNs int64, s Shape) bool {
	r := &h.r
	// The newest claimed bucket, while retained, holds its slot (see
	// ring.Ring.Claimed): a timestamp in it needs neither the admission
	// nor the slot's check. A negative timestamp falls outside it (its
	// start is >= 0); before the first claim (None) the retention test
	// fails. a|b exceeds MaxTokens (all ones) when either does,
	// negatives included.
	st := 0 // the stripe: 0 until writers contend (see spread)
	if h.spread.Load() != 0 {
		st = ring.ProcPin() & h.stripeMask // ring.Stripe, by hand: two calls instead of three
		ring.ProcUnpin()
	}
	e := r.Claimed()
	w := r.WidthNs()
	if uint64(tsNs-e*w) >= uint64(w) || e < r.NewestFast()-r.Keep() {
		return h.record(tsNs, s)
	}
	if uint64(s.Input)|uint64(s.Output) > MaxTokens {
		return h.record(tsNs, s)
	}
	sh := h.cur.Load()
	hash := shapeHash(s)
	// From here on the key stands for the shape and the bucket for the
	// timestamp (fewer live values, no spills).
	want := keyOf(ring.TagOf(e), s)
	// The shape's window: two groups of eight cells, one control byte
	// each. Its cell, if it has one, is a cell of the window whose byte
	// matches its fingerprint and whose key is the shape's. The key of
	// the first candidate of each group is read without a branch (with
	// no candidate, that of the group's last cell: a key equal to the
	// shape's is its cell whatever the byte says); more candidates, or
	// no cell and a free byte in the window (a claim), go to the general
	// path; no cell in a full window (the steady state of a busy bucket)
	// is the overflow.
	fpw := lsbBytes * fingerprint(hash)
	g := uint(hash >> 60)
	g1 := (g + 1) % groups
	c0, c1 := sh.ctrl[g].Load(), sh.ctrl[g1].Load()
	m0, m1 := matchFirst(c0, fpw), matchFirst(c1, fpw)
	j0 := (g*groupCells + uint(bits.TrailingZeros64(m0|1<<63))/8) % ExactCells
	j1 := (g1*groupCells + uint(bits.TrailingZeros64(m1|1<<63))/8) % ExactCells
	k0, k1 := sh.keys[j0].Load(), sh.keys[j1].Load()
	tagHi := want &^ ring.ValueMask // the bucket's tag in place
	b := sh.block(st)
	// the overflow's count, read early: it is the common case's word
	ovf := b.overflow.Load()
	var c *atomic.Uint64
	var old uint64
	evidence := false
	if testHooks {
		fastPathHook()
	}
	switch {
	case k0 == want:
		c = &b.cells[j0]
		old = c.Load()
	case k1 == want:
		c = &b.cells[j1]
		old = c.Load()
	case m0&(m0-1)|m1&(m1-1) != 0 || (^c0|^c1)&msbBytes != 0:
		return h.recordIn(e, want, st)
	default:
		c, old = &b.overflow, ovf
		// The overflow cohort's price: its maxima and zero-output
		// mark, written (after the count) only when this observation
		// raises or meets them. Maxima never fall within a bucket, so
		// reading them before the count decides as well as after. A
		// maximum word of this bucket whose maximum exceeds v lies in
		// [tagHi + (v+1)<<atMaxBits, tagHi + 1<<ValueBits): one
		// unsigned range test each (it wraps at the last tag).
		in, out := want>>24&MaxTokens, want&MaxTokens
		end := tagHi + 1<<ring.ValueBits
		loIn, loOut := tagHi+(in+1)<<atMaxBits, tagHi+(out+1)<<atMaxBits
		evidence = sh.maxIn.Load()-loIn >= end-loIn || sh.maxOut.Load()-loOut >= end-loOut || out == 0
	}
	// One compare-and-swap on a live word of the bucket. No straggler
	// drain is needed after it (unlike ring.Ring.AfterWrite): a drain of
	// the bucket that ran before the load left the word 0 or newer, one
	// that ran between the load and the swap made the swap fail, and
	// one that runs after takes this count with the rest. Hence the
	// zero word (tag 0, value 0) goes to the general path too.
	if old&^ring.ValueMask != tagHi || old == 0 {
		return h.recordIn(e, want, st) // a stale or empty word: the lazy clear
	} else if !c.CompareAndSwap(old, old+1) {
		h.contended()
		return h.recordIn(e, want, st)
	}
	if evidence { // sh is e's slot: the swap found e's tag there
		return h.overflowEvidence(sh, e, want)
	}
	return true
}

// record is Record's general path: admitting a new bucket, claiming a
// slot, a free cell, a stale word, or several writers at once.
func (h *History) record(tsNs int64, s Shape) bool {
	if tsNs < 0 || !validShape(s) {
		return false
	}
	e, ok := h.r.AdmitTs(tsNs, h)
	if !ok || !h.r.Claim(e, h) {
		return false
	}
	sh := h.curSlot(e)
	if _, ok := h.addIn(sh, sh.block(h.stripe()), ring.TagOf(e), s); !ok {
		return false
	}
	h.r.AfterWrite(e, h)
	return true
}

// recordIn is Record's way out once the bucket e is known (retained and
// claimed at the fast path's check; if it expires meanwhile, AfterWrite
// drains what this record wrote, as for any writer in flight): the full
// lookup of the shape's key, claiming a cell, the lazy clear, in stripe st
// of the bucket's own slot (not the fast path's, which may be stale).
func (h *History) recordIn(e int64, key uint64, st int) bool {
	sh := h.curSlot(e)
	if _, ok := h.addIn(sh, sh.block(st), ring.TagOf(e), keyShape(key)); !ok {
		return false
	}
	h.r.AfterWrite(e, h)
	return true
}

// curSlot returns the slot of the claimed bucket e, and makes it cur when e
// is the newest claimed bucket.
func (h *History) curSlot(e int64) *slotShared {
	sh := &h.shared[h.r.Slot(e)]
	if e == h.r.Claimed() && h.cur.Load() != sh {
		h.cur.Store(sh)
	}
	return sh
}

// overflowEvidence finishes a fast-path overflow record (bucket e, key)
// whose shape raises or meets the cohort's maxima or has output 0.
func (h *History) overflowEvidence(sh *slotShared, e int64, key uint64) bool {
	tag, s := ring.TagOf(e), keyShape(key)
	raiseMax(&sh.maxIn, tag, uint64(s.Input))
	raiseMax(&sh.maxOut, tag, uint64(s.Output))
	if s.Output == 0 {
		addMeta(&sh.meta, tag, 1, metaZeroSeen)
	}
	h.r.AfterWrite(e, h)
	return true
}

// contended switches the history to striped counting (once, for good)
// when GOMAXPROCS allows more than one stripe.
func (h *History) contended() {
	if h.stripeMask != 0 && h.spread.Load() == 0 {
		h.spread.Store(1)
	}
}

// stripe is the stripe a writer counts in: 0 until writers have been seen
// to contend (spread), then the caller's P.
func (h *History) stripe() int {
	if h.spread.Load() == 0 {
		return 0
	}
	return ring.Stripe(h.stripeMask)
}

// add places one observation of s into the bucket at slot (tag), in its
// exact cell or the overflow cohort, and returns the cell (-1: overflow).
// ok false: the slot was reused by a newer epoch before anything was
// counted.
func (h *History) add(slot int, tag uint64, s Shape) (int, bool) {
	return h.addIn(&h.shared[slot], h.block(slot, h.stripe()), tag, s)
}

// addIn is add into slot sh, counting in its block b.
func (h *History) addIn(sh *slotShared, b *stripeBlock, tag uint64, s Shape) (int, bool) {
	i, ok := h.cell(sh, tag, s, true)
	if i >= 0 {
		return i, h.bump(&b.cells[i], tag)
	}
	if !ok || !h.bump(&b.overflow, tag) {
		return -1, false
	}
	raiseMax(&sh.maxIn, tag, uint64(s.Input))
	raiseMax(&sh.maxOut, tag, uint64(s.Output))
	if s.Output == 0 {
		addMeta(&sh.meta, tag, 1, metaZeroSeen)
	}
	return -1, true
}

// bump adds one to the sized counter w for tag: one CAS when w already
// belongs to tag, else the lazy clear of ring.Add.
func (h *History) bump(w *atomic.Uint64, tag uint64) bool {
	if old := w.Load(); old>>ring.ValueBits == tag {
		if w.CompareAndSwap(old, old+1) {
			return true
		}
		h.contended()
	}
	return h.bumpSlow(w, tag)
}

func (h *History) bumpSlow(w *atomic.Uint64, tag uint64) bool {
	exp, ok := ring.Add(w, tag, 1)
	if exp != 0 {
		h.expSized.Add(int64(exp))
	}
	return ok
}

// cell finds the exact cell of s in the bucket tagged tag, claiming the
// first free (empty or stale) one within the probe window when claim is set.
// It returns -1 for overflow; ok false when a newer epoch owns the slot.
func (h *History) cell(sh *slotShared, tag uint64, s Shape, claim bool) (int, bool) {
	want := keyOf(tag, s)
	hash := shapeHash(s)
	fp := fingerprint(hash)
	g := int(hash >> 60)
	for n := 0; n < ProbeWindow/groupCells; n++ {
		base := ((g + n) % groups) * groupCells
		c := sh.ctrl[(g+n)%groups].Load()
		if i := sh.findKey(c, lsbBytes*fp, uint((g+n)%groups), want); i >= 0 {
			return i, true
		}
		// Cells whose control byte says free, in probe order. The first one
		// that really is free ends the search: a shape takes the first free
		// cell of its window and cells are never freed within a bucket, so
		// the shape cannot lie beyond it.
		for m := ^c & msbBytes; m != 0; m &= m - 1 {
			i := base + bits.TrailingZeros64(m)/8
			k := &sh.keys[i]
			for {
				v := k.Load()
				if v == want { // its writer has not set the byte yet
					setCtrl(sh, i, fp)
					return i, true
				}
				if v&presentBit != 0 {
					rel := ring.Compare(ring.WordTag(v), tag)
					if rel == ring.Same { // another shape, byte not yet set
						setCtrl(sh, i, fingerprint(shapeHash(keyShape(v))))
						break
					}
					if rel == ring.Newer {
						return -1, false
					}
				}
				if !claim {
					return -1, true
				}
				if k.CompareAndSwap(v, want) {
					setCtrl(sh, i, fp)
					return i, true
				}
			}
		}
	}
	return -1, true
}

// raiseMax raises the overflow maximum word w to v, counting how many
// observations sit at the maximum.
func raiseMax(w *atomic.Uint64, tag, v uint64) {
	if old := w.Load(); old>>ring.ValueBits == tag && v < ring.WordValue(old)>>atMaxBits {
		return // the common case: below the maximum, nothing to write
	}
	raiseMaxSlow(w, tag, v)
}

func raiseMaxSlow(w *atomic.Uint64, tag, v uint64) {
	for {
		old := w.Load()
		var nw uint64
		switch ring.Rel(old, tag) {
		case ring.Newer:
			return
		case ring.Older:
			nw = ring.Pack(tag, v<<atMaxBits|1)
		default:
			val := ring.WordValue(old)
			m, c := val>>atMaxBits, val&atMaxMask
			switch {
			case v < m:
				return
			case v > m:
				nw = ring.Pack(tag, v<<atMaxBits|1)
			case c == atMaxMask:
				return // saturated: never counts down to zero again
			default:
				nw = old + 1
			}
		}
		if w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// lowerAtMax takes one observation at value v away from the maximum word w.
// It returns true when that was the last observation defining the maximum.
func lowerAtMax(w *atomic.Uint64, tag, v uint64) bool {
	for {
		old := w.Load()
		if ring.WordTag(old) != tag {
			return false
		}
		val := ring.WordValue(old)
		m, c := val>>atMaxBits, val&atMaxMask
		if m != v || c == 0 || c == atMaxMask {
			return false
		}
		if w.CompareAndSwap(old, old-1) {
			return c == 1
		}
	}
}

// addMeta adds delta (may be "negative" via subtraction by the caller) and
// sets flags in the meta word.
func addMeta(w *atomic.Uint64, tag, delta, flags uint64) {
	for {
		old := w.Load()
		var nw uint64
		switch ring.Rel(old, tag) {
		case ring.Newer:
			return
		case ring.Older:
			nw = ring.Pack(tag, flags|delta&metaCount)
		default:
			v := ring.WordValue(old)
			nw = ring.Pack(tag, v&^metaCount|flags|(v+delta)&metaCount)
		}
		if nw == old || w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// subZero takes one zero-output observation from the meta word; true when
// it was the last one.
func subZero(w *atomic.Uint64, tag uint64) bool {
	for {
		old := w.Load()
		if ring.WordTag(old) != tag || old&metaCount == 0 {
			return false
		}
		if w.CompareAndSwap(old, old-1) {
			return old&metaCount == 1
		}
	}
}

// RecordUnsized counts one offer that terminated before it was sized, at
// tsNs. Same refusals as Record.
func (h *History) RecordUnsized(tsNs int64) bool {
	if tsNs < 0 {
		return false
	}
	e, ok := h.r.AdmitTs(tsNs, h)
	if !ok || !h.r.Claim(e, h) {
		return false
	}
	slot := h.r.Slot(e)
	b := h.block(slot, ring.Stripe(h.stripeMask))
	exp, ok := ring.Add(&b.unsized, ring.TagOf(e), 1)
	if !ok {
		return false
	}
	if exp != 0 {
		h.expUnsized.Add(int64(exp))
	}
	h.r.AfterWrite(e, h)
	return true
}

// Reprice moves one observation recorded at arrivalNs from shape from to
// shape to, within the same bucket. It returns false, changing nothing, when
// the bucket is gone (expired or never recorded), a shape is invalid, or no
// observation of from is counted there. Moving the last observation that
// defined the overflow cohort's maximum input, maximum output, or its zero
// requested output out of the cohort (into an exact cell) invalidates the
// bucket's boundary evidence (the maxima stay, conservatively, until the
// bucket expires); a move that stays inside the overflow cohort does not.
func (h *History) Reprice(arrivalNs int64, from, to Shape) bool {
	if arrivalNs < 0 || !validShape(from) || !validShape(to) {
		return false
	}
	e := h.r.Epoch(arrivalNs)
	if !h.r.Retained(e) || !h.r.Holds(e) {
		return false
	}
	slot := h.r.Slot(e)
	tag := ring.TagOf(e)
	sh := &h.shared[slot]
	own := ring.Stripe(h.stripeMask)
	i, ok := h.cell(sh, tag, from, false)
	if !ok {
		return false
	}
	taken := false
	for j := 0; j <= h.stripeMask && !taken; j++ {
		b := h.block(slot, (own+j)&h.stripeMask)
		if i >= 0 {
			taken = ring.SubOne(&b.cells[i], tag)
		} else {
			taken = ring.SubOne(&b.overflow, tag)
		}
	}
	if !taken {
		return false
	}
	j, ok := h.add(slot, tag, to)
	if i < 0 && j < 0 && ok {
		// it stays in the overflow cohort: no boundary observation left
		// the cohort, so the boundary stands (its maxima only rise; a
		// maximum that lost its last observation stays, conservatively)
		if from.Output == 0 {
			subZero(&sh.meta, tag)
		}
		lowerAtMax(&sh.maxIn, tag, uint64(from.Input))
		lowerAtMax(&sh.maxOut, tag, uint64(from.Output))
	} else if i < 0 {
		// moved out of the cohort (or out with its bucket): losing the
		// last observation at a maximum or the last zero-output one
		// invalidates the bucket's boundary evidence
		invalid := lowerAtMax(&sh.maxIn, tag, uint64(from.Input))
		if lowerAtMax(&sh.maxOut, tag, uint64(from.Output)) {
			invalid = true
		}
		if from.Output == 0 && subZero(&sh.meta, tag) {
			invalid = true
		}
		if invalid {
			addMeta(&sh.meta, tag, 0, metaInvalid)
		}
	}
	if !ok {
		// the bucket was reused while we moved the observation: it
		// left with its bucket
		h.expSized.Add(1)
		return false
	}
	h.r.AfterWrite(e, h)
	return true
}

// ExpireSlot implements ring.Expirer: it drains every word of slot that
// belongs to epoch through and accounts what it held as expired.
func (h *History) ExpireSlot(slot int, through int64) int64 {
	tag := ring.TagOf(through)
	sh := &h.shared[slot]
	for i := range sh.keys {
		k := &sh.keys[i]
		v := k.Load()
		if v&presentBit == 0 || ring.WordTag(v) != tag {
			continue
		}
		// clear the byte first, then the key; if the key was taken for a
		// newer epoch meanwhile, give the byte back to it
		setCtrl(sh, i, 0)
		if !k.CompareAndSwap(v, 0) {
			if nv := k.Load(); nv&presentBit != 0 && ring.WordTag(nv) != tag {
				setCtrl(sh, i, fingerprint(shapeHash(keyShape(nv))))
			}
		}
	}
	ring.Drain(&sh.maxIn, tag)
	ring.Drain(&sh.maxOut, tag)
	ring.Drain(&sh.meta, tag)
	var sized, unsized uint64
	for st := 0; st <= h.stripeMask; st++ {
		b := h.block(slot, st)
		for i := range b.cells {
			sized += ring.Drain(&b.cells[i], tag)
		}
		sized += ring.Drain(&b.overflow, tag)
		unsized += ring.Drain(&b.unsized, tag)
	}
	h.expSized.Add(int64(sized))
	h.expUnsized.Add(int64(unsized))
	return int64(sized + unsized)
}

// Prune expires every bucket older than the newest recorded bucket minus
// the retention and returns the observations (sized and unsized) this call
// expired. Recording prunes on its own as the newest bucket advances, so
// Prune mostly finds nothing to do.
func (h *History) Prune() int64 { return h.r.Prune(h) }

// Advance moves the history's newest bucket to a trusted clock reading
// (never backwards; no far-ahead bound), expiring what falls out, and
// returns the observations expired.
func (h *History) Advance(nowNs int64) int64 { return h.r.Advance(nowNs, h) }
