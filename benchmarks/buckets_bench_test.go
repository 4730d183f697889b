package benchmarks

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// Shapes of the Azure LLM inference trace (conversation), loaded once,
// before any timer starts.
const bkTraceName = "AzureLLMInferenceTrace_conv.csv"

var (
	bkOnce   sync.Once
	bkShapes []buckets.Shape
	bkAtNs   []int64 // arrival time of each shape, from the trace's first row
	bkErr    string
)

// bkFindTrace walks up from the working directory looking for
// shared/traces/<name> (the repository lives beside shared/).
func bkFindTrace(name string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "shared", "traces", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func bkLoad() {
	p := bkFindTrace(bkTraceName)
	if p == "" {
		bkErr = "trace " + bkTraceName + " not found in any shared/traces above the working directory"
		return
	}
	f, err := os.Open(p)
	if err != nil {
		bkErr = "open trace: " + err.Error()
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	var first time.Time
	for sc.Scan() {
		parts := strings.Split(sc.Text(), ",")
		if len(parts) != 3 {
			continue
		}
		at, err0 := time.Parse("2006-01-02 15:04:05.0000000", parts[0])
		in, err1 := strconv.ParseInt(parts[1], 10, 64)
		out, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err0 != nil || err1 != nil || err2 != nil {
			continue
		}
		if first.IsZero() {
			first = at
		}
		bkShapes = append(bkShapes, buckets.Shape{Input: in, Output: out})
		bkAtNs = append(bkAtNs, at.Sub(first).Nanoseconds())
	}
	if len(bkShapes) == 0 {
		bkErr = "trace " + p + " holds no shapes"
	}
}

func bkTrace(b *testing.B) []buckets.Shape {
	b.Helper()
	bkOnce.Do(bkLoad)
	if bkErr != "" {
		b.Skip(bkErr)
	}
	return bkShapes
}

const (
	bkBase   = int64(1_795_000_000) * 1e9
	bkWidth  = int64(1e9)     // 1 s buckets
	bkWindow = int64(60e9)    // demand window: 60 buckets
	bkStep   = bkWidth / 4096 // time advance per record: 4096 records per bucket
)

func bkDemand(b *testing.B) *buckets.Demand {
	b.Helper()
	d, err := buckets.NewDemand(buckets.DemandConfig{BucketWidthNs: bkWidth, DemandWindowNs: bkWindow})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// bkSource feeds the parallel benchmarks: each goroutine takes a cursor
// at its own place in the trace (7919 shapes after the previous one's) with
// its own clock reading, which advances by bkStep per record and, every
// bkSyncEvery records, meets the shared clock (takes it when it is ahead,
// publishes its own when that is ahead). Goroutines of one router read one
// wall clock; without the meeting their readings drifted apart by more
// than a retention (with -cpu 2, 9.5 % of the records of a 2 s run were
// refused as too old), which measured the refusal path of a router whose
// goroutines disagree about the time by minutes, not sharing.
type bkSource struct {
	shapes []buckets.Shape
	shared atomic.Int64
	mu     sync.Mutex
	start  int
}

const bkSyncEvery = 256

func newBkSource(shapes []buckets.Shape) *bkSource {
	src := &bkSource{shapes: shapes}
	src.shared.Store(bkBase)
	return src
}

// bkCursor is one goroutine's place in the trace and clock reading (the
// single-goroutine benchmarks use one without a shared clock: next only).
type bkCursor struct {
	shapes []buckets.Shape
	shared *atomic.Int64
	j      int
	left   int // records until the next meeting
	ts     int64
}

// cursor returns a goroutine's cursor by value: it lives on that
// goroutine's stack (two cursors side by side on the heap shared a cache
// line, which cost the parallel benchmark 0.45 ns per record).
func (src *bkSource) cursor() bkCursor {
	src.mu.Lock()
	defer src.mu.Unlock()
	c := bkCursor{shapes: src.shapes, shared: &src.shared, j: src.start % len(src.shapes), left: bkSyncEvery, ts: bkBase}
	src.start += 7919
	return c
}

// next returns the next record's time and shape; tick, after the record,
// counts it and meets the shared clock every bkSyncEvery records. Both
// are inlined: with the record they are all the loop does.
func (c *bkCursor) next() (int64, buckets.Shape) {
	ts, s := c.ts, c.shapes[c.j]
	c.ts += bkStep
	if c.j++; c.j == len(c.shapes) {
		c.j = 0
	}
	return ts, s
}

func (c *bkCursor) tick() {
	if c.left--; c.left == 0 {
		c.meet()
	}
}

// meet brings the reading and the shared clock to the later of the two.
// Not inlined, so that tick, on every record, is.
//
//go:noinline
func (c *bkCursor) meet() {
	c.left = bkSyncEvery
	for {
		w := c.shared.Load()
		if w >= c.ts {
			c.ts = w
			return
		}
		if c.shared.CompareAndSwap(w, c.ts) {
			return
		}
	}
}

// BenchmarkArrivalRecord: one sized arrival per op, time advancing so that
// buckets fill (128 exact cells, the rest overflow) and expire.
func BenchmarkArrivalRecord(b *testing.B) {
	shapes := bkTrace(b)
	h := bkDemand(b).Arrivals
	b.ReportAllocs()
	b.ResetTimer()
	c := bkCursor{shapes: shapes, ts: bkBase}
	for i := 0; i < b.N; i++ {
		h.Record(c.next())
	}
}

// BenchmarkArrivalRecordParallel: the same from every P at once, one
// shared history (each goroutine from its own place in the trace, clocks
// kept together: see bkSource).
func BenchmarkArrivalRecordParallel(b *testing.B) {
	src := newBkSource(bkTrace(b))
	h := bkDemand(b).Arrivals
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := src.cursor()
		for pb.Next() {
			h.Record(c.next())
			c.tick()
		}
	})
}

// BenchmarkReprice: one estimate -> exact reprice per op, at the original
// arrival time, inside a bucket holding the trace's shapes.
func BenchmarkReprice(b *testing.B) {
	shapes := bkTrace(b)
	h := bkDemand(b).Arrivals
	n := 4096
	est := make([]buckets.Shape, n)
	exact := make([]buckets.Shape, n)
	for i := range est {
		s := shapes[i%len(shapes)]
		est[i] = buckets.Shape{Input: s.Input + s.Input/16 + 1, Output: s.Output} // bytes/4 overshoots
		exact[i] = s
		h.Record(bkBase, est[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % n
		if (i/n)%2 == 0 {
			h.Reprice(bkBase, est[k], exact[k])
		} else {
			h.Reprice(bkBase, exact[k], est[k])
		}
	}
}

// BenchmarkAttainmentRecord: one request outcome per op.
func BenchmarkAttainmentRecord(b *testing.B) {
	shapes := bkTrace(b)
	a, err := buckets.NewAttainment(10e9, 4*bkWindow)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	ts := bkBase
	for i := 0; i < b.N; i++ {
		s := shapes[i%len(shapes)]
		a.Record(ts, buckets.Outcome(i&3), s.Input < 2000, s.Output < 400)
		ts += bkStep
	}
}

// BenchmarkPressureRecord: one observed TTFT / SLO ratio per op (the
// trace's prompt length / 2000, so about one in seven (14 %) is past the SLO and
// takes the miss count's extra add), 1 s buckets retained for a minute.
func BenchmarkPressureRecord(b *testing.B) {
	shapes := bkTrace(b)
	p, err := buckets.NewPressure(bkWidth, bkWindow)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	ts := bkBase
	for i := 0; i < b.N; i++ {
		p.Record(ts, float64(shapes[i%len(shapes)].Input)/2000)
		ts += bkStep
	}
}

// bkFilled is an arrivals history whose 61 retained buckets each hold
// perBucket trace shapes.
func bkFilled(b *testing.B, perBucket int) (*buckets.History, int64) {
	shapes := bkTrace(b)
	h := bkDemand(b).Arrivals
	j := 0
	ts := bkBase
	for k := 0; k < 61; k++ {
		ts = bkBase + int64(k)*bkWidth
		for i := 0; i < perBucket; i++ {
			h.Record(ts+int64(i), shapes[j%len(shapes)])
			j++
		}
	}
	return h, ts
}

// BenchmarkPrune: the controller's per-step Prune on a full arrivals
// history (recording has already expired what fell out, as in steady state).
func BenchmarkPrune(b *testing.B) {
	h, _ := bkFilled(b, 400)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Prune()
	}
}

// BenchmarkWindowQuery: one full 60-bucket demand window (plus the
// boundary bucket) into a caller buffer, over the trace's busiest minute
// replayed at its own arrival times (531 requests in 61 s).
func BenchmarkWindowQuery(b *testing.B) {
	shapes := bkTrace(b)
	h := bkDemand(b).Arrivals
	// the busiest 61 s of the trace
	best, bi := 0, 0
	for i, j := 0, 0; i < len(bkAtNs); i++ {
		for j < len(bkAtNs) && bkAtNs[j] < bkAtNs[i]+61e9 {
			j++
		}
		if j-i > best {
			best, bi = j-i, i
		}
	}
	var last int64
	for k := bi; k < bi+best; k++ {
		last = bkBase + bkAtNs[k] - bkAtNs[bi]
		h.Record(last, shapes[k])
	}
	buf := make([]buckets.Cell, 0, 61*buckets.ExactCells)
	from := last - bkWindow
	cells, w := h.Window(from, last, buf[:0])
	if w.Buckets != 61 || w.Count() != int64(best) {
		b.Fatalf("BUG: window of %d buckets, %d observations, want 61 and %d", w.Buckets, w.Count(), best)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cells, _ = h.Window(from, last, buf[:0])
	}
	b.ReportMetric(float64(len(cells)), "cells/op")
}

// BenchmarkWindowQuerySaturated: the same query when every bucket holds 400
// trace shapes (a router at 400 req/s: every 128-cell table full, the rest
// in overflow), so the query returns about 61*128 cells.
func BenchmarkWindowQuerySaturated(b *testing.B) {
	h, last := bkFilled(b, 400)
	buf := make([]buckets.Cell, 0, 61*buckets.ExactCells)
	from := last - bkWindow + bkWidth/2 // mid-bucket: the boundary bucket counts whole
	cells, w := h.Window(from, last, buf[:0])
	if w.Buckets != 61 || len(cells) < 60*100 {
		b.Fatalf("BUG: window of %d buckets, %d cells", w.Buckets, len(cells))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cells, _ = h.Window(from, last, buf[:0])
	}
	b.ReportMetric(float64(len(cells)), "cells/op")
}

// BenchmarkArrivalRecordParallelPrivate is a control, not a target: each
// goroutine records into its own history, so nothing is shared. Its
// scaling from -cpu 1 to -cpu 2 is the most any shared structure can reach
// on the machine at hand.
func BenchmarkArrivalRecordParallelPrivate(b *testing.B) {
	src := newBkSource(bkTrace(b))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		h := bkDemand(b).Arrivals
		c := src.cursor()
		for pb.Next() {
			h.Record(c.next())
			c.tick()
		}
	})
}

func bkHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "narwhal_bench_input_tokens",
		Help:    "Baseline: input tokens.",
		Buckets: prometheus.ExponentialBuckets(16, 2, 12),
	})
}

// BenchmarkBaselinePrometheusHistogramObserve: what a router would pay to
// record the input length alone in a Prometheus histogram.
func BenchmarkBaselinePrometheusHistogramObserve(b *testing.B) {
	shapes := bkTrace(b)
	h := bkHistogram()
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		h.Observe(float64(shapes[j].Input))
		if j++; j == len(shapes) {
			j = 0
		}
	}
}

func BenchmarkBaselinePrometheusHistogramObserveParallel(b *testing.B) {
	shapes := bkTrace(b)
	h := bkHistogram()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		j := 0
		for pb.Next() {
			h.Observe(float64(shapes[j].Input))
			if j++; j == len(shapes) {
				j = 0
			}
		}
	})
}

// bkMutexMap is the plain alternative: a mutex and a map per bucket,
// expired buckets deleted as time advances.
type bkMutexMap struct {
	mu     sync.Mutex
	newest int64
	b      map[int64]map[buckets.Shape]int64
}

func (m *bkMutexMap) record(ts int64, s buckets.Shape) {
	e := ts / bkWidth
	m.mu.Lock()
	if e > m.newest {
		m.newest = e
		for k := range m.b {
			if k < e-bkWindow/bkWidth {
				delete(m.b, k)
			}
		}
	}
	c := m.b[e]
	if c == nil {
		c = map[buckets.Shape]int64{}
		m.b[e] = c
	}
	c[s]++
	m.mu.Unlock()
}

func BenchmarkBaselineMutexMapRecord(b *testing.B) {
	shapes := bkTrace(b)
	m := &bkMutexMap{b: map[int64]map[buckets.Shape]int64{}}
	b.ReportAllocs()
	b.ResetTimer()
	c := bkCursor{shapes: shapes, ts: bkBase}
	for i := 0; i < b.N; i++ {
		m.record(c.next())
	}
}

func BenchmarkBaselineMutexMapRecordParallel(b *testing.B) {
	src := newBkSource(bkTrace(b))
	m := &bkMutexMap{b: map[int64]map[buckets.Shape]int64{}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := src.cursor()
		for pb.Next() {
			m.record(c.next())
			c.tick()
		}
	})
}

// bkFloorWords: eight counters, as many as a shape's window has cells in
// one control word.
var bkFloorWords [8]atomic.Uint64

// BenchmarkFloorRecordCAS is a control, not a target: the one atomic
// read-modify-write every exact record needs (load, then compare-and-swap
// of a counter picked by the trace shape), and nothing else. Its ratio to
// BaselinePrometheusHistogramObserve in the same run is the least any
// record that counts with a locked instruction can reach on the machine.
func BenchmarkFloorRecordCAS(b *testing.B) {
	shapes := bkTrace(b)
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		w := &bkFloorWords[shapes[j].Input&7]
		old := w.Load()
		w.CompareAndSwap(old, old+1)
		if j++; j == len(shapes) {
			j = 0
		}
	}
}

// BenchmarkFloorRecordAdd is the same control with an atomic add (one
// locked instruction, no load before it).
func BenchmarkFloorRecordAdd(b *testing.B) {
	shapes := bkTrace(b)
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for i := 0; i < b.N; i++ {
		bkFloorWords[shapes[j].Input&7].Add(1)
		if j++; j == len(shapes) {
			j = 0
		}
	}
}
