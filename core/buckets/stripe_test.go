package buckets

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// stripeCounts sums the sized counters of every retained bucket per stripe.
func stripeCounts(h *History) []int64 {
	n := make([]int64, h.stripeMask+1)
	for slot := range h.shared {
		for st := range n {
			b := h.block(slot, st)
			for i := range b.cells {
				n[st] += int64(b.cells[i].Load() & (1<<49 - 1))
			}
			n[st] += int64(b.overflow.Load() & (1<<49 - 1))
		}
	}
	return n
}

// TestOneWriterCountsInStripeZero: a history written by one goroutine at
// a time never pays for the per-P stripes, whatever GOMAXPROCS is: every
// count lands in stripe 0 and the history is not spread.
func TestOneWriterCountsInStripeZero(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	h := mustHistory(t, sec, 60*sec)
	if h.stripeMask == 0 {
		t.Fatal("BUG: GOMAXPROCS 4 gave one stripe")
	}
	var wg sync.WaitGroup
	const n = 20000
	for g := 0; g < 4; g++ { // four goroutines, one after the other
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if !h.Record(at(float64(g*n+i)/4096), Shape{Input: int64(i % 997), Output: int64(i % 13)}) {
					t.Errorf("record %d refused", i)
					return
				}
			}
		}()
		wg.Wait()
	}
	if h.spread.Load() != 0 {
		t.Fatal("one writer at a time spread the history over the stripes")
	}
	per := stripeCounts(h)
	for st, c := range per[1:] {
		if c != 0 {
			t.Fatalf("stripe %d holds %d counts, want 0 (all in stripe 0: %v)", st+1, c, per)
		}
	}
	_, w := h.Window(0, at(1e6), nil)
	if sized, _ := h.Expired(); w.Count()+sized != 4*n || per[0] != w.Count() {
		t.Fatalf("retained %d + expired %d, stripe 0 %d; want %d recorded", w.Count(), sized, per[0], 4*n)
	}
}

// TestContendedWritersSpreadOverStripes: writers racing on one counter
// switch the history to per-P stripes (once a compare-and-swap is lost),
// and the counts stay exact; with one stripe there is nothing to switch.
func TestContendedWritersSpreadOverStripes(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs for writers to race")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	h := mustHistory(t, sec, 60*sec)
	var wg sync.WaitGroup
	const writers = 4
	var recorded [writers]int64
	// until a swap is lost (a writer preempted between its load and its
	// swap while another counts is enough), then as long again
	deadline := time.Now().Add(10 * time.Second)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			for i := 0; after < 100000; i++ {
				if h.Record(at(1), Shape{Input: 100, Output: 10}) {
					recorded[g]++
				}
				if h.spread.Load() != 0 {
					after++
				} else if i%1024 == 0 && time.Now().After(deadline) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if h.spread.Load() == 0 {
		t.Fatalf("%d writers on one counter never lost a compare-and-swap", writers)
	}
	var want int64
	for _, r := range recorded {
		want += r
	}
	_, w := h.Window(at(0), at(2), nil)
	if w.Count() != want {
		t.Fatalf("window counts %d, recorded %d", w.Count(), want)
	}

	one := mustHistory(t, sec, 60*sec)
	one.stripeMask = 0
	one.contended()
	if one.spread.Load() != 0 {
		t.Fatal("a history with one stripe was spread")
	}
}

// TestRecordWithAStaleCurrentSlotCountsInItsBucket: Record's fast path
// reads the newest claimed bucket and its slot from two words written
// apart; paired with another bucket's slot (as a racing writer may leave
// them) a record still counts in its own bucket, exactly once, and the
// pair is mended.
func TestRecordWithAStaleCurrentSlotCountsInItsBucket(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	full := func(ts int64) { // a bucket whose shape windows are full
		for i := 0; i < 600; i++ {
			if !h.Record(ts, Shape{Input: int64(1000 + i), Output: 7}) {
				t.Fatalf("record %d refused", i)
			}
		}
	}
	full(at(10))
	full(at(11))
	right := h.cur.Load()
	if right != &h.shared[h.r.Slot(h.r.Claimed())] {
		t.Fatal("cur is not the newest claimed bucket's slot")
	}
	wrong := &h.shared[h.r.Slot(h.r.Claimed()-1)] // bucket 10's slot, full too
	_, before := h.Window(at(11), at(11), nil)
	_, beforeOld := h.Window(at(10), at(10), nil)
	h.cur.Store(wrong)
	const n = 50
	for i := 0; i < n; i++ {
		// overflow shapes, and one that has a cell in bucket 11
		s := Shape{Input: int64(5000 + i), Output: 3}
		if i%2 == 0 {
			s = Shape{Input: 1000, Output: 7}
		}
		if !h.Record(at(11.5), s) {
			t.Fatalf("record %d refused", i)
		}
	}
	_, after := h.Window(at(11), at(11), nil)
	_, afterOld := h.Window(at(10), at(10), nil)
	if after.Count()-before.Count() != n || afterOld.Count() != beforeOld.Count() {
		t.Fatalf("bucket 11 gained %d (want %d), bucket 10 %d (want 0)", after.Count()-before.Count(), n, afterOld.Count()-beforeOld.Count())
	}
	if h.cur.Load() != right {
		t.Fatal("the stale slot was not mended")
	}
}
