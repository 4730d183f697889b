package ring

import "sync/atomic"

// Every counter, key and maximum that lives in a slot is one 64-bit word
// whose top TagBits bits hold the tag of the epoch it belongs to and whose
// low ValueBits bits hold the value. Checking the epoch and changing the
// value is therefore a single compare-and-swap: a writer can never add to a
// word that another writer has just cleared for a newer epoch, and whoever
// replaces an older epoch's word owns (and accounts for) the value it held.

const (
	// TagBits is the width of the epoch tag carried by every slot word.
	TagBits = 15
	// ValueBits is the width of the value carried by every slot word.
	ValueBits = 64 - TagBits
	// ValueMask selects the value of a slot word.
	ValueMask = 1<<ValueBits - 1
	tagMask   = 1<<TagBits - 1
	halfTag   = 1 << (TagBits - 1)
)

// TagOf is the tag of an epoch.
func TagOf(epoch int64) uint64 { return uint64(epoch) & tagMask }

// WordTag is the tag held by a slot word.
func WordTag(w uint64) uint64 { return w >> ValueBits }

// WordValue is the value held by a slot word.
func WordValue(w uint64) uint64 { return w & ValueMask }

// Pack builds a slot word.
func Pack(tag, value uint64) uint64 { return tag<<ValueBits | value&ValueMask }

// Relation of a word's tag to the tag a caller works on.
const (
	Older = -1 // the word belongs to an older epoch: stale, free to replace
	Same  = 0
	Newer = 1 // the word belongs to a newer epoch: the caller is a straggler
)

// Compare tells how the epoch of tag t relates to the epoch of tag want.
// Tags are compared modulo 1<<TagBits; the ring guarantees that no word
// survives undrained for more than half that many epochs, so the answer is
// exact (see Ring: at most MaxSlots slots, and every expired slot is drained).
func Compare(t, want uint64) int {
	d := (want - t) & tagMask
	switch {
	case d == 0:
		return Same
	case d < halfTag:
		return Older
	}
	return Newer
}

// Rel tells how the slot word w relates to the epoch tagged want, like
// Compare, except that the zero word (never written, or drained) is always
// Older: free to take.
func Rel(w, want uint64) int {
	if w == 0 {
		if want == 0 {
			return Same
		}
		return Older
	}
	return Compare(WordTag(w), want)
}

// Add adds delta to the tagged counter w for the epoch tagged tag. When w
// still holds an older epoch it is replaced by (tag, delta) and the old value
// is returned as expired: the lazy clear on write. ok is false, and nothing
// changes, when w already belongs to a newer epoch.
func Add(w *atomic.Uint64, tag, delta uint64) (expired uint64, ok bool) {
	for {
		old := w.Load()
		switch Rel(old, tag) {
		case Same:
			if w.CompareAndSwap(old, old+delta) {
				return 0, true
			}
		case Older:
			if w.CompareAndSwap(old, Pack(tag, delta)) {
				return WordValue(old), true
			}
		default:
			return 0, false
		}
	}
}

// SubOne takes one from the tagged counter w if it belongs to the epoch
// tagged tag and is positive. It reports whether it did.
func SubOne(w *atomic.Uint64, tag uint64) bool {
	for {
		old := w.Load()
		if WordTag(old) != tag || WordValue(old) == 0 {
			return false
		}
		if w.CompareAndSwap(old, old-1) {
			return true
		}
	}
}

// Value is the value of w when it belongs to the epoch tagged tag, else 0.
func Value(w *atomic.Uint64, tag uint64) uint64 {
	v := w.Load()
	if WordTag(v) != tag {
		return 0
	}
	return WordValue(v)
}

// Drain zeroes w when it belongs to the epoch tagged tag and returns the
// value it held. Words of other epochs are left alone: drains name the exact
// epoch they expire, so they can never take a live word whose tag aliases.
func Drain(w *atomic.Uint64, tag uint64) uint64 {
	for {
		old := w.Load()
		if old == 0 || WordTag(old) != tag {
			return 0
		}
		if w.CompareAndSwap(old, 0) {
			return WordValue(old)
		}
	}
}
