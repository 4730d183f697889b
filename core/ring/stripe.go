package ring

import (
	"runtime"
	_ "unsafe" // for go:linkname
)

// ProcPin and ProcUnpin are the runtime's own per-P pinning, exported to
// packages by name (see the comment at runtime.procPin and go.dev/issue/67401:
// "Do not remove or change the type signature"). We only read the P's id as
// a hint and unpin at once: correctness never depends on it, since every
// counter is updated with atomic operations. Stripe uses them; a hot path
// that inlines Stripe by hand (History.Record: a call fewer, since Stripe's
// pid cannot be inlined) reads ProcPin()&mask and calls ProcUnpin at once.
//
//go:linkname ProcPin runtime.procPin
func ProcPin() int

//go:linkname ProcUnpin runtime.procUnpin
func ProcUnpin()

// MaxStripes caps the number of stripes of a striped counter.
const MaxStripes = 8

// Stripes is the number of stripes worth using now: GOMAXPROCS rounded up to
// a power of two, at most MaxStripes.
func Stripes() int {
	p := runtime.GOMAXPROCS(0)
	s := 1
	for s < p && s < MaxStripes {
		s <<= 1
	}
	return s
}

// StripeLayout returns how a structure striped with Stripes() stripes
// indexes them: log2 of the stripe count (stripe k of slot i lives at
// i<<log + k) and the mask Stripe takes.
func StripeLayout() (log uint, mask int) {
	n := Stripes()
	for 1<<log < n {
		log++
	}
	return log, n - 1
}

// Stripe returns the stripe index (0..mask) for the calling goroutine: the
// id of the P it runs on, so that goroutines running at the same time on
// different Ps update different cache lines. With mask 0 it costs nothing.
func Stripe(mask int) int {
	if mask == 0 {
		return 0
	}
	return pid() & mask
}

func pid() int {
	id := ProcPin()
	ProcUnpin()
	return id
}

// Pad fills the rest of a cache line (two lines, against adjacent-line
// prefetch) after a hot word.
type Pad [120]byte
