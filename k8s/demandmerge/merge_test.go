package demandmerge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

const (
	t0       = int64(1_700_000_000) * 1e9
	widthNs  = int64(1e9)
	windowNs = int64(30e9)
	attW     = int64(5e9)
	attRet   = 4 * windowNs
)

var demandCfg = buckets.DemandConfig{BucketWidthNs: widthNs, DemandWindowNs: windowNs}

type core struct {
	d   *buckets.Demand
	att *buckets.Attainment
}

func newCore(t *testing.T) core {
	t.Helper()
	d, err := buckets.NewDemand(demandCfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := buckets.NewAttainment(attW, attRet)
	if err != nil {
		t.Fatal(err)
	}
	return core{d, a}
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(Config{Demand: demandCfg, AttainmentIntervalNs: attW, AttainmentRetentionNs: attRet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// op is one recorded event, replayed on the single core and on one of the
// split cores.
type op struct {
	at      int64 // when it happens (ops run in this order)
	kind    buckets.Kind
	ts      int64
	shape   buckets.Shape
	reprice *buckets.Shape // Reprice(ts, shape, *reprice) instead of Record
	unsized bool
	att     bool
	outcome buckets.Outcome
	ttft    bool
	tpot    bool
}

func (o op) apply(t *testing.T, c core) {
	t.Helper()
	var ok bool
	switch {
	case o.att:
		ok = c.att.Record(o.ts, o.outcome, o.ttft, o.tpot)
	case o.unsized:
		ok = c.d.History(o.kind).RecordUnsized(o.ts)
	case o.reprice != nil:
		ok = c.d.History(o.kind).Reprice(o.ts, o.shape, *o.reprice)
	default:
		ok = c.d.History(o.kind).Record(o.ts, o.shape)
	}
	if !ok {
		t.Fatalf("op %+v refused", o)
	}
}

// workload: 40 s of arrivals (with late repricing of some, after their
// bucket closed), unsized offers, residency, outputs and attainment, drawn
// from a pool of shapes small enough that no bucket overflows.
func workload(rng *rand.Rand, shapes int) []op {
	pool := make([]buckets.Shape, shapes)
	for i := range pool {
		pool[i] = buckets.Shape{Input: int64(64 * (i + 1)), Output: int64(16 * (1 + i%7))}
	}
	var ops []op
	for ms := int64(0); ms < 40_000; ms += 1 + rng.Int64N(40) {
		ts := t0 + ms*1e6
		s := pool[rng.IntN(len(pool))]
		switch r := rng.IntN(20); {
		case r < 9:
			ops = append(ops, op{at: ts, kind: buckets.KindArrivals, ts: ts, shape: s})
			if rng.IntN(5) == 0 { // tokenized later: repriced at its arrival time
				to := pool[rng.IntN(len(pool))]
				ops = append(ops, op{at: ts + 1500e6, kind: buckets.KindArrivals, ts: ts, shape: s, reprice: &to})
			}
		case r < 10:
			ops = append(ops, op{at: ts, kind: buckets.KindArrivals, ts: ts, unsized: true})
		case r < 14:
			ops = append(ops, op{at: ts, kind: buckets.KindResidency, ts: ts, shape: s})
		case r < 17:
			ops = append(ops, op{at: ts, kind: buckets.KindOutputs, ts: ts, shape: buckets.Shape{Input: s.Output, Output: rng.Int64N(s.Output + 1)}})
		default:
			ops = append(ops, op{at: ts, att: true, ts: ts, outcome: buckets.Outcome(rng.IntN(int(buckets.NumOutcomes))),
				ttft: rng.IntN(3) > 0, tpot: rng.IntN(4) > 0})
		}
	}
	// Run in time order (stable: a reprice follows its record).
	sortOps(ops)
	return ops
}

func sortOps(ops []op) {
	for i := 1; i < len(ops); i++ {
		for j := i; j > 0 && ops[j].at < ops[j-1].at; j-- {
			ops[j], ops[j-1] = ops[j-1], ops[j]
		}
	}
}

// split runs ops on one core and, each op on a random one of n cores, on
// the split cores; every exportEvery of virtual time each split core ships
// its closed buckets (acknowledged), and a final flush closes everything.
func split(t *testing.T, rng *rand.Rand, ops []op, n int, exportEvery int64) (core, []Delta) {
	t.Helper()
	single := newCore(t)
	cores := make([]core, n)
	exps := make([]*Exporter, n)
	for i := range cores {
		cores[i] = newCore(t)
		x, err := NewExporter(fmt.Sprintf("router-%d", i), 1, cores[i].d, cores[i].att, attW, attRet)
		if err != nil {
			t.Fatal(err)
		}
		exps[i] = x
	}
	// The core that recorded an arrival also reprices it.
	owner := map[int64]int{}
	var deltas []Delta
	ship := func(now int64) {
		for _, x := range exps {
			if d, ok := x.Next(now); ok {
				deltas = append(deltas, d)
				x.Ack(d.Seq)
			}
		}
	}
	next := t0 + exportEvery
	for _, o := range ops {
		for o.at >= next {
			ship(next)
			next += exportEvery
		}
		o.apply(t, single)
		i := rng.IntN(n)
		if o.kind == buckets.KindArrivals && !o.att && !o.unsized {
			if o.reprice != nil {
				i = owner[o.ts]
			} else {
				owner[o.ts] = i
			}
		}
		o.apply(t, cores[i])
	}
	last := ops[len(ops)-1].at
	ship(last + max(widthNs, attW) + 1) // every bucket is closed by then
	return single, deltas
}

func cellMap(cells []buckets.Cell) map[buckets.Shape]int64 {
	m := map[buckets.Shape]int64{}
	for _, c := range cells {
		if c.Count != 0 {
			m[c.Shape] += c.Count
		}
	}
	return m
}

// sameAnswers compares window, evidence and attainment answers of a single
// core and a merged store over many query ranges.
func sameAnswers(t *testing.T, single core, s *Store) {
	t.Helper()
	for k := range buckets.NumKinds {
		h, v := single.d.History(k), s.History(k)
		if got, want := v.Stats(), h.Stats(); got.Observations != want.Observations || got.OverflowObservations != want.OverflowObservations || got.CellLimit != want.CellLimit {
			t.Fatalf("%s stats: merged %+v; single %+v", k, got, want)
		}
		for from := t0 - 3e9; from <= t0+42e9; from += 700e6 {
			for _, to := range []int64{from, from + 1e9, from + 4300e6, from + 30e9} {
				wc, ww := h.Window(from, to, nil)
				gc, gw := v.Window(from, to, nil)
				if gw != ww {
					t.Fatalf("%s window [%d, %d]: merged %+v; single %+v", k, from-t0, to-t0, gw, ww)
				}
				if !reflect.DeepEqual(cellMap(gc), cellMap(wc)) {
					t.Fatalf("%s window [%d, %d] cells differ:\nmerged %v\nsingle %v", k, from-t0, to-t0, cellMap(gc), cellMap(wc))
				}
				if ge, we := v.Evidence(from, to), h.Evidence(from, to); ge != we {
					t.Fatalf("%s evidence (%d, %d]: merged %+v; single %+v", k, from-t0, to-t0, ge, we)
				}
			}
		}
	}
	av := s.Attainment()
	for from := t0 - 7e9; from <= t0+45e9; from += 1900e6 {
		for _, to := range []int64{from, from + 3e9, from + 20e9} {
			if got, want := av.Window(from, to), single.att.Window(from, to); got != want {
				t.Fatalf("attainment window [%d, %d]: merged %+v; single %+v", from-t0, to-t0, got, want)
			}
		}
	}
	for _, now := range []int64{t0, t0 + 41e9, t0 + 500e9} {
		if got, want := av.CoveredS(now), single.att.CoveredS(now); got != want {
			t.Fatalf("covered_s at %d: merged %v; single %v", now-t0, got, want)
		}
	}
}

func applyAll(t *testing.T, s *Store, ds []Delta) {
	t.Helper()
	for i := range ds {
		if err := s.Apply(&ds[i]); err != nil {
			t.Fatalf("Apply(delta %d of %s): %v", ds[i].Seq, ds[i].Router, err)
		}
	}
}

// shuffledWithDuplicates returns the deltas in a random order with about a
// third of them repeated.
func shuffledWithDuplicates(rng *rand.Rand, ds []Delta) []Delta {
	out := append([]Delta(nil), ds...)
	for _, d := range ds {
		if rng.IntN(3) == 0 {
			out = append(out, d)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestMergeEqualsSingleCore is acceptance 1 (no overflow): the same
// requests recorded by one core, or split at random across three cores
// whose deltas are merged (in order, shuffled, duplicated), give the same
// window, evidence and attainment answers.
func TestMergeEqualsSingleCore(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			single, deltas := split(t, rng, workload(rng, 40), 3, 3e9)
			for k := range buckets.NumKinds {
				if st := single.d.History(k).Stats(); st.OverflowObservations != 0 || st.Observations == 0 {
					t.Fatalf("workload precondition: %s stats %+v; want observations and no overflow", k, st)
				}
			}
			reshipped := 0
			seen := map[string]bool{}
			for _, d := range deltas {
				for _, b := range d.Demand {
					key := fmt.Sprint(d.Router, b.Kind, b.StartNs)
					if seen[key] {
						reshipped++
					}
					seen[key] = true
				}
			}
			if reshipped == 0 {
				t.Fatal("workload precondition: no closed bucket was repriced and shipped again")
			}

			inOrder := newStore(t)
			applyAll(t, inOrder, deltas)
			sameAnswers(t, single, inOrder)

			messy := newStore(t)
			applyAll(t, messy, shuffledWithDuplicates(rng, deltas))
			sameAnswers(t, single, messy)
			if st := messy.Stats(); st.Duplicate == 0 {
				t.Fatalf("shuffled, duplicated deltas were all applied: %+v", st)
			}
			// Duplicated and reordered deltas change nothing: the answers
			// are identical, cell for cell.
			for k := range buckets.NumKinds {
				a, wa := inOrder.History(k).Window(t0-5e9, t0+50e9, nil)
				b, wb := messy.History(k).Window(t0-5e9, t0+50e9, nil)
				if wa != wb || !reflect.DeepEqual(a, b) {
					t.Fatalf("%s: in-order and messy merges differ", k)
				}
			}
		})
	}
}

// TestMergeOverflowConservesCounts is acceptance 1 (overflow): one bucket
// gets 200 distinct shapes spread over three cores; each core keeps them
// exact, the merge spills the excess into the overflow cohort, keeping
// every count and pricing the cohort by the largest spilled input and
// output.
func TestMergeOverflowConservesCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	truth := map[buckets.Shape]int64{}
	var ops []op
	for i := range 200 {
		s := buckets.Shape{Input: int64(100 + 10*i), Output: int64(1 + i%50)}
		n := 1
		if i < 100 {
			n = 3 // frequent shapes stay exact
		}
		if i >= 190 {
			s.Output = 0 // rare zero-output shapes spill: decode incomplete
		}
		for j := range n {
			ts := t0 + int64(i*4+j)*1e6
			ops = append(ops, op{at: ts, kind: buckets.KindArrivals, ts: ts, shape: s})
			truth[s]++
		}
	}
	single, deltas := split(t, rng, ops, 3, 10e9)
	s := newStore(t)
	applyAll(t, s, shuffledWithDuplicates(rng, deltas))

	cells, w := s.History(buckets.KindArrivals).Window(t0, t0, nil)
	_, sw := single.d.History(buckets.KindArrivals).Window(t0, t0, nil)
	var total int64
	for _, n := range truth {
		total += n
	}
	if w.Count() != total || sw.Count() != total {
		t.Fatalf("counts not conserved: merged %d, single %d; want %d", w.Count(), sw.Count(), total)
	}
	if len(cells) != buckets.ExactCells {
		t.Fatalf("merged bucket holds %d exact cells; want %d", len(cells), buckets.ExactCells)
	}
	// Whatever is not in an exact cell (spilled by the merge, or by a
	// router whose probe window filled) is in the cohort, priced by its
	// largest input and output.
	residual := map[buckets.Shape]int64{}
	for sh, n := range truth {
		residual[sh] = n
	}
	var pricedIn, pricedOut, trueIn, trueOut int64
	for _, c := range cells {
		if c.Count <= 0 || c.Count > truth[c.Shape] {
			t.Fatalf("exact cell %+v; true count %d", c, truth[c.Shape])
		}
		residual[c.Shape] -= c.Count
		pricedIn += c.Count * c.Shape.Input
		pricedOut += c.Count * c.Shape.Output
	}
	var want buckets.Cohort
	for sh, n := range residual {
		if n > 0 {
			mergeCohort(&want, buckets.Cohort{Count: n, MaxInput: sh.Input, MaxOutput: sh.Output, ZeroOutput: sh.Output == 0})
		}
	}
	if w.Overflow != want || !w.DecodeIncomplete() {
		t.Fatalf("overflow cohort %+v; want %+v (decode incomplete)", w.Overflow, want)
	}
	spillCount := want.Count
	pricedIn += w.Overflow.Count * w.Overflow.MaxInput
	pricedOut += w.Overflow.Count * w.Overflow.MaxOutput
	for sh, n := range truth {
		trueIn += n * sh.Input
		trueOut += n * sh.Output
	}
	if pricedIn < trueIn || pricedOut < trueOut {
		t.Fatalf("pricing not conservative: input %d < %d or output %d < %d", pricedIn, trueIn, pricedOut, trueOut)
	}
	ev := s.History(buckets.KindArrivals).Evidence(t0, t0+1e9)
	if ev.Observations != total || ev.Overflow != spillCount {
		t.Fatalf("evidence %+v; want %d observations, %d overflow", ev, total, spillCount)
	}
}

func TestSequenceEpochAndStaleness(t *testing.T) {
	s := newStore(t)
	bucket := func(count int64) []DemandBucket {
		return []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0, Cells: [][3]int64{{100, 10, count}}}}
	}
	count := func() int64 {
		_, w := s.History(buckets.KindArrivals).Window(t0, t0, nil)
		return w.Count()
	}
	f := func(d Delta, want int64) {
		t.Helper()
		d.WidthNs = widthNs
		if err := s.Apply(&d); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != want {
			t.Fatalf("after %s epoch %d seq %d: count %d; want %d", d.Router, d.Epoch, d.Seq, got, want)
		}
	}
	f(Delta{Router: "r", Epoch: 1, Seq: 2, Demand: bucket(5)}, 5)
	f(Delta{Router: "r", Epoch: 1, Seq: 1, Demand: bucket(3)}, 5) // older snapshot arrives late
	f(Delta{Router: "r", Epoch: 1, Seq: 2, Demand: bucket(9)}, 5) // same seq: a duplicate
	f(Delta{Router: "r", Epoch: 1, Seq: 3, Demand: bucket(6)}, 6) // the bucket was repriced/grew
	f(Delta{Router: "r", Epoch: 2, Seq: 1, Demand: bucket(2)}, 8) // the restarted router adds
	f(Delta{Router: "q", Epoch: 1, Seq: 1, Demand: bucket(1)}, 9) // another router adds
	// A bucket a whole retention behind the newest is stale; one a day
	// ahead is refused as far.
	newer := []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0 + windowNs + widthNs, Cells: [][3]int64{{1, 1, 1}}}}
	f(Delta{Router: "q", Epoch: 1, Seq: 2, Demand: newer}, 0) // t0 expired
	f(Delta{Router: "r", Epoch: 1, Seq: 4, Demand: bucket(7)}, 0)
	far := []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0 + 25*3600e9, Cells: [][3]int64{{1, 1, 1}}}}
	f(Delta{Router: "q", Epoch: 1, Seq: 3, Demand: far}, 0)
	if st := s.Stats(); st != (ApplyStats{Deltas: 9, Applied: 5, Duplicate: 2, Stale: 1, Far: 1}) {
		t.Fatalf("unexpected stats %+v", st)
	}
}

func TestApplyRefusesBadDeltasAndChangesNothing(t *testing.T) {
	s := newStore(t)
	good := func() Delta {
		return Delta{Router: "r", Epoch: 1, Seq: 1, WidthNs: widthNs, AttainmentWidthNs: attW,
			Demand:     []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0, Cells: [][3]int64{{1, 1, 1}, {1, 2, 1}}}},
			Attainment: []AttainmentBucket{{StartNs: t0}}}
	}
	f := func(name string, mut func(*Delta)) {
		t.Helper()
		d := good()
		mut(&d)
		if err := s.Apply(&d); !errors.Is(err, ErrInvalidDelta) {
			t.Fatalf("%s: got %v; want ErrInvalidDelta", name, err)
		}
	}
	f("no router", func(d *Delta) { d.Router = "" })
	f("seq 0", func(d *Delta) { d.Seq = 0 })
	f("width", func(d *Delta) { d.WidthNs = 2 * widthNs })
	f("attainment width", func(d *Delta) { d.AttainmentWidthNs = 1 })
	f("kind", func(d *Delta) { d.Demand[0].Kind = buckets.NumKinds })
	f("start not aligned", func(d *Delta) { d.Demand[0].StartNs = t0 + 1 })
	f("negative start", func(d *Delta) { d.Demand[0].StartNs = -widthNs })
	f("bucket twice", func(d *Delta) { d.Demand = append(d.Demand, d.Demand[0]) })
	f("zero count", func(d *Delta) { d.Demand[0].Cells[0][2] = 0 })
	f("negative tokens", func(d *Delta) { d.Demand[0].Cells[0][0] = -1 })
	f("too many tokens", func(d *Delta) { d.Demand[0].Cells[0][1] = buckets.MaxTokens + 1 })
	f("unsorted", func(d *Delta) {
		d.Demand[0].Cells[0], d.Demand[0].Cells[1] = d.Demand[0].Cells[1], d.Demand[0].Cells[0]
	})
	f("too many cells", func(d *Delta) {
		d.Demand[0].Cells = nil
		for i := range buckets.ExactCells + 1 {
			d.Demand[0].Cells = append(d.Demand[0].Cells, [3]int64{int64(i), 0, 1})
		}
	})
	f("empty cohort with maxima", func(d *Delta) { d.Demand[0].Overflow = buckets.Cohort{MaxInput: 5} })
	f("negative unsized", func(d *Delta) { d.Demand[0].Unsized = -1 })
	f("attainment met > total", func(d *Delta) { d.Attainment[0].ByOutcome[0] = buckets.Counts{TTFTMet: 2, Total: 1} })
	f("attainment twice", func(d *Delta) { d.Attainment = append(d.Attainment, d.Attainment[0]) })
	if st := s.Stats(); st != (ApplyStats{}) {
		t.Fatalf("refused deltas changed stats: %+v", st)
	}
	if _, w := s.History(buckets.KindArrivals).Window(0, 1<<62, nil); w.Count() != 0 {
		t.Fatalf("refused deltas changed the window: %+v", w)
	}
	d := good()
	if err := s.Apply(&d); err != nil {
		t.Fatalf("good delta: %v", err)
	}
	if _, err := New(Config{Demand: buckets.DemandConfig{BucketWidthNs: 0, DemandWindowNs: 1}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with zero width: got %v", err)
	}
	if _, err := NewExporter("", 1, nil, nil, 0, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewExporter without router: got %v", err)
	}
}

func TestExporterResendsUntilAcked(t *testing.T) {
	c := newCore(t)
	x, err := NewExporter("r", 1, c.d, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := c.d.History(buckets.KindArrivals)
	h.Record(t0+100, buckets.Shape{Input: 10, Output: 5})
	h.Record(t0+1e9+100, buckets.Shape{Input: 20, Output: 5}) // open bucket
	if _, ok := x.Next(t0 + 1e9); !ok {
		t.Fatal("closed bucket not exported")
	}
	d, ok := x.Next(t0 + 1e9) // first delta was lost (no ack): sent again
	if !ok || d.Seq != 2 || len(d.Demand) != 1 || d.Demand[0].StartNs != t0 || !reflect.DeepEqual(d.Demand[0].Cells, [][3]int64{{10, 5, 1}}) {
		t.Fatalf("resend: ok=%v delta %+v", ok, d)
	}
	x.Ack(1) // stale ack: ignored
	if _, ok := x.Next(t0 + 1e9); !ok {
		t.Fatal("stale ack confirmed a later delta")
	}
	x.Ack(3)
	if d, ok := x.Next(t0 + 1e9); ok {
		t.Fatalf("nothing changed but got %+v", d)
	}
	// A repricing changes the closed bucket: it is sent again.
	if !h.Reprice(t0+100, buckets.Shape{Input: 10, Output: 5}, buckets.Shape{Input: 12, Output: 5}) {
		t.Fatal("reprice refused")
	}
	d, ok = x.Next(t0 + 1e9)
	if !ok || !reflect.DeepEqual(d.Demand[0].Cells, [][3]int64{{12, 5, 1}}) {
		t.Fatalf("repriced bucket: ok=%v delta %+v", ok, d)
	}
}

// One router whose clock runs ten minutes ahead of the leader's: with the
// leader's clock (NowNs) its buckets past the tolerance are refused and
// counted (Ahead), and the other routers' history stays. Without a clock
// the same delta moves the merged newest bucket ten minutes on and
// leaves the others' buckets stale: the leader reads no demand at its
// own time.
func TestARouterClockAheadCannotStaleTheOthers(t *testing.T) {
	now := t0 + 5*widthNs
	run := func(clock bool) (ApplyStats, int64) {
		cfg := Config{Demand: demandCfg, AttainmentIntervalNs: attW, AttainmentRetentionNs: attRet}
		if clock {
			cfg.NowNs, cfg.FutureToleranceNs = func() int64 { return now }, 30e9
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range []Delta{
			{Router: "a", Epoch: 1, Seq: 1, WidthNs: widthNs, Demand: []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0, Cells: [][3]int64{{100, 10, 4}}}}},
			{Router: "skewed", Epoch: 1, Seq: 1, WidthNs: widthNs, AttainmentWidthNs: attW,
				Demand:     []DemandBucket{{Kind: buckets.KindArrivals, StartNs: now + 600e9, Cells: [][3]int64{{100, 10, 3}}}},
				Attainment: []AttainmentBucket{{StartNs: now + 600e9}}},
			{Router: "b", Epoch: 1, Seq: 1, WidthNs: widthNs, Demand: []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0 + widthNs, Cells: [][3]int64{{100, 10, 2}}}}},
		} {
			if err := s.Apply(&d); err != nil {
				t.Fatalf("delta %d: %v", i, err)
			}
		}
		_, w := s.History(buckets.KindArrivals).Window(now-windowNs, now, nil)
		return s.Stats(), w.Count()
	}
	st, n := run(true)
	if n != 6 || st.Ahead != 2 || st.Applied != 2 || st.Stale != 0 {
		t.Fatalf("with the leader's clock: %d arrivals at now, stats %+v; want 6 (a's 4 and b's 2), 2 ahead, 2 applied", n, st)
	}
	st, n = run(false)
	if n != 0 || st.Stale == 0 {
		t.Fatalf("without a clock: %d arrivals at now, stats %+v; want 0 and b stale (the failure the clock prevents)", n, st)
	}
	if _, err := New(Config{Demand: demandCfg, FutureToleranceNs: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative tolerance: %v; want ErrInvalidConfig", err)
	}
}
