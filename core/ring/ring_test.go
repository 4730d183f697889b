package ring

import (
	"errors"
	"sync/atomic"
	"testing"
)

type countingExpirer struct{ calls int64 }

func (c *countingExpirer) ExpireSlot(slot int, through int64) int64 { c.calls++; return 0 }

func TestCompareTagsModulo(t *testing.T) {
	f := func(t0, want uint64, rel int) {
		t.Helper()
		if got := Compare(t0, want); got != rel {
			t.Fatalf("unexpected Compare(%d, %d); got %d; want %d", t0, want, got, rel)
		}
	}
	f(5, 5, Same)
	f(4, 5, Older)
	f(6, 5, Newer)
	f(tagMask, 0, Older) // wraps
	f(0, tagMask, Newer)
	if Rel(0, 7) != Older || Rel(0, 0) != Same {
		t.Fatal("the zero word must be free")
	}
}

func TestAddLazilyClearsOlderEpochAndRefusesNewer(t *testing.T) {
	var w atomic.Uint64
	if exp, ok := Add(&w, TagOf(10), 3); !ok || exp != 0 || Value(&w, TagOf(10)) != 3 {
		t.Fatalf("first add: exp %d ok %v value %d", exp, ok, Value(&w, TagOf(10)))
	}
	if exp, ok := Add(&w, TagOf(12), 1); !ok || exp != 3 || Value(&w, TagOf(12)) != 1 {
		t.Fatalf("lazy clear: expired %d ok %v value %d; want 3, true, 1", exp, ok, Value(&w, TagOf(12)))
	}
	if _, ok := Add(&w, TagOf(11), 1); ok {
		t.Fatal("a straggler added to a newer epoch")
	}
	if Value(&w, TagOf(11)) != 0 {
		t.Fatal("value of another epoch must read 0")
	}
	if !SubOne(&w, TagOf(12)) || SubOne(&w, TagOf(12)) {
		t.Fatal("SubOne must take exactly the one count")
	}
	Add(&w, TagOf(12), 5)
	if got := Drain(&w, TagOf(11)); got != 0 {
		t.Fatalf("drain of another epoch took %d", got)
	}
	if got := Drain(&w, TagOf(12)); got != 5 || w.Load() != 0 {
		t.Fatalf("drain took %d, left %x; want 5, 0", got, w.Load())
	}
}

func TestRingGeometryAndExactBoundaries(t *testing.T) {
	var r Ring
	if err := r.Init(250e6, 10e9); err != nil {
		t.Fatal(err)
	}
	if r.Keep() != 40 || r.Slots() != 64 {
		t.Fatalf("keep %d slots %d; want 40, 64", r.Keep(), r.Slots())
	}
	for _, c := range [][2]int64{{0, 0}, {249_999_999, 0}, {250_000_000, 1}, {1e9, 4}} {
		if got := r.Epoch(c[0]); got != c[1] {
			t.Fatalf("Epoch(%d) = %d, want %d", c[0], got, c[1])
		}
	}
	var x countingExpirer
	if !r.Admit(100, &x) || !r.Admit(140, &x) || !r.Admit(100, &x) || r.Admit(99, &x) {
		t.Fatal("admission at the retention edge is wrong")
	}
	if from, to, ok := r.Range(100*250e6+1, 141*250e6); !ok || from != 100 || to != 140 {
		t.Fatalf("range: %d..%d %v; want 100..140", from, to, ok)
	}
	for _, bad := range [][2]int64{{0, 1}, {5, 4}, {1, MaxSlots + 5}} {
		if err := r.Init(bad[0], bad[1]); !errors.Is(err, ErrInvalidGeometry) {
			t.Fatalf("Init(%d, %d): %v", bad[0], bad[1], err)
		}
	}
}

func TestStripesArePowerOfTwo(t *testing.T) {
	s := Stripes()
	if s < 1 || s > MaxStripes || s&(s-1) != 0 {
		t.Fatalf("Stripes() = %d", s)
	}
	if id := Stripe(s - 1); id < 0 || id >= s {
		t.Fatalf("Stripe = %d out of [0,%d)", id, s)
	}
}

// TestClaimedIsTheNewestClaimedEpoch: Claimed follows the newest epoch
// whose slot was claimed, not the newest admitted one (an Advance claims
// nothing), never moves back, and is None before the first claim.
func TestClaimedIsTheNewestClaimedEpoch(t *testing.T) {
	var r Ring
	if err := r.Init(10, 40); err != nil {
		t.Fatal(err)
	}
	x := &countingExpirer{}
	if r.Claimed() != None {
		t.Fatalf("claimed %d before any claim, want None", r.Claimed())
	}
	claim := func(ts int64) {
		t.Helper()
		e, ok := r.AdmitTs(ts, x)
		if !ok || !r.Claim(e, x) {
			t.Fatalf("record at %d refused", ts)
		}
	}
	claim(100)
	if r.Claimed() != 10 {
		t.Fatalf("claimed %d, want 10", r.Claimed())
	}
	claim(125)
	claim(111) // an older retained bucket: claimed stays at the newest
	if r.Claimed() != 12 || !r.Holds(11) {
		t.Fatalf("claimed %d (holds 11: %v), want 12", r.Claimed(), r.Holds(11))
	}
	r.Advance(300, x) // trusted clock: newest moves, nothing is claimed
	if r.Newest() != 30 || r.Claimed() != 12 {
		t.Fatalf("after Advance: newest %d claimed %d, want 30 and 12", r.Newest(), r.Claimed())
	}
	if r.Claimed() >= r.Newest()-r.Keep() {
		t.Fatal("an expired claimed epoch passes the retention test")
	}
	claim(301)
	if r.Claimed() != 30 {
		t.Fatalf("claimed %d, want 30", r.Claimed())
	}
}
