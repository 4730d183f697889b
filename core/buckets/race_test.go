package buckets

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/narwhal-io/narwhal/core/ring"
)

// TestConcurrentWritersReaderAndExpiryConserveCounts: writers record,
// reprice and record unsized offers while the clock runs through many
// retentions, a reader takes window queries and a pruner prunes. Once they
// stop, every accepted observation is either retained or expired, exactly
// once.
func TestConcurrentWritersReaderAndExpiryConserveCounts(t *testing.T) {
	conserveCounts(t, false)
}

// TestConcurrentRecordsAroundTagZeroConserveCounts is the same with the
// clock jumping, about every 300 records, to 8 buckets before an epoch
// whose tag is 0, so that buckets of tag 0 fill and expire under the
// writers again and again: the one tag whose empty word (0) equals a live
// word of value 0, which Record's fast path must leave to the general
// path (its count would otherwise be written after the drain and never
// accounted).
func TestConcurrentRecordsAroundTagZeroConserveCounts(t *testing.T) {
	conserveCounts(t, true)
}

func conserveCounts(t *testing.T, tagZero bool) {
	const (
		width     = int64(1e6) // 1 ms buckets
		retention = 8 * width
		writers   = 4
	)
	ops := 20000
	if testing.Short() {
		ops = 5000
	}
	h := mustHistory(t, width, retention)
	var clock atomic.Int64
	clock.Store(t0)
	var sized, unsized atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < ops; i++ {
				step := r.Int64N(width / 8)
				if r.IntN(3000) == 0 { // a jump past half the tag space
					step = 20000*width + r.Int64N(width)
				}
				if tagZero && r.IntN(300) == 0 {
					const round = (1 << ring.TagBits) * width
					now := clock.Load()
					step = (now/round+1)*round - 8*width - now
				}
				now := clock.Add(step)
				ts := now - r.Int64N(retention+2*width) // some late, some too late
				if r.IntN(3) > 0 {
					ts = now
				}
				s := Shape{Input: int64(r.IntN(200)), Output: int64(r.IntN(3))}
				switch r.IntN(10) {
				case 0:
					if h.RecordUnsized(ts) {
						unsized.Add(1)
					}
				case 1, 2:
					if h.Record(ts, s) {
						sized.Add(1)
						h.Reprice(ts, s, Shape{Input: s.Input + 1, Output: s.Output})
					}
				default:
					if h.Record(ts, s) {
						sized.Add(1)
					}
				}
			}
		}(uint64(w + 1))
	}
	var aux sync.WaitGroup
	aux.Add(2)
	go func() { // reader
		defer aux.Done()
		buf := make([]Cell, 0, 1<<14)
		for !stop.Load() {
			now := clock.Load()
			cells, w := h.Window(now-retention, now, buf[:0])
			var n int64
			for _, c := range cells {
				if c.Count <= 0 {
					t.Errorf("cell with count %d", c.Count)
					return
				}
				n += c.Count
			}
			if n != w.Exact || w.Overflow.Count < 0 || w.Unsized < 0 {
				t.Errorf("window inconsistent: cells sum %d, exact %d, %+v", n, w.Exact, w)
				return
			}
		}
	}()
	go func() { // pruner
		defer aux.Done()
		for !stop.Load() {
			h.Prune()
		}
	}()
	wg.Wait()
	stop.Store(true)
	aux.Wait()
	h.Prune()
	_, w := h.Window(0, math.MaxInt64, nil)
	expSized, expUnsized := h.Expired()
	if got := w.Count() + expSized; got != sized.Load() {
		t.Fatalf("sized: retained %d + expired %d = %d; recorded %d", w.Count(), expSized, got, sized.Load())
	}
	if got := w.Unsized + expUnsized; got != unsized.Load() {
		t.Fatalf("unsized: retained %d + expired %d = %d; recorded %d", w.Unsized, expUnsized, got, unsized.Load())
	}
	if expSized == 0 || w.Count() == 0 {
		t.Fatalf("BUG: test did not exercise expiry (expired %d, retained %d)", expSized, w.Count())
	}
	// the retained data equals a scan of every word in the ring
	if st := h.Stats(); st.Observations != w.Count() {
		t.Fatalf("stats observations %d, window %d", st.Observations, w.Count())
	}
}

func TestConcurrentAttainmentConservesCounts(t *testing.T) {
	const width = int64(1e6)
	a := mustAttainment(t, width, 5*width)
	var clock atomic.Int64
	clock.Store(t0)
	var recorded atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 2))
			for i := 0; i < 5000; i++ {
				now := clock.Add(r.Int64N(width / 4))
				ts := now - r.Int64N(7*width)
				if a.Record(ts, Outcome(r.IntN(int(NumOutcomes))), true, false) {
					recorded.Add(1)
				}
				if i%64 == 0 {
					a.Prune()
					a.Window(now-5*width, now)
				}
			}
		}(uint64(w + 1))
	}
	wg.Wait()
	a.Prune()
	win := a.Window(0, math.MaxInt64)
	var retained int64
	for _, c := range win.ByOutcome {
		retained += c.Total
		if c.TTFTMet != c.Total || c.TPOTMet != 0 {
			t.Fatalf("counts mixed up: %+v", c)
		}
	}
	if retained+a.Expired() != recorded.Load() {
		t.Fatalf("retained %d + expired %d != recorded %d", retained, a.Expired(), recorded.Load())
	}
}
