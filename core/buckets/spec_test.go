package buckets

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// t0 is a realistic Unix time (2026) so that epochs are large and tags wrap.
const (
	t0  = int64(1_795_000_000) * 1e9
	sec = int64(1e9)
	ms  = int64(1e6)
)

func at(s float64) int64 { return t0 + int64(s*1e9) }

func mustHistory(t testing.TB, widthNs, retentionNs int64) *History {
	t.Helper()
	h, err := NewHistory(widthNs, retentionNs)
	if err != nil {
		t.Fatalf("NewHistory: %v", err)
	}
	return h
}

func mustAttainment(t testing.TB, intervalNs, retentionNs int64) *Attainment {
	t.Helper()
	a, err := NewAttainment(intervalNs, retentionNs)
	if err != nil {
		t.Fatalf("NewAttainment: %v", err)
	}
	return a
}

func record(t testing.TB, h *History, ts int64, in, out int64) {
	t.Helper()
	if !h.Record(ts, Shape{in, out}) {
		t.Fatalf("Record(%d, {%d %d}) refused", ts, in, out)
	}
}

func window(h *History, from, to int64) ([]Cell, Window) {
	return h.Window(from, to, nil)
}

func cellCount(cells []Cell, s Shape) int64 {
	var n int64
	for _, c := range cells {
		if c.Shape == s {
			n += c.Count
		}
	}
	return n
}

// ---- SLO attainment ----

func TestAttainmentBucketsByMonitorInterval(t *testing.T) {
	a := mustAttainment(t, 5*sec, 60*sec)
	a.Record(at(0), OutcomeCompleted, true, true)
	a.Record(at(4.999), OutcomeCompleted, true, true)
	a.Record(at(5), OutcomeCompleted, true, true) // exact boundary: next bucket
	w := a.Window(at(0), at(4.999))
	if got := w.ByOutcome[OutcomeCompleted].Total; got != 2 {
		t.Fatalf("first 5 s bucket total: got %d, want 2", got)
	}
	if w.Buckets != 1 || w.FromNs != at(0) || w.ToNs != at(5) {
		t.Fatalf("window bounds: got %d buckets [%d,%d), want 1 [%d,%d)", w.Buckets, w.FromNs, w.ToNs, at(0), at(5))
	}
	w = a.Window(at(5), at(5))
	if got := w.ByOutcome[OutcomeCompleted].Total; got != 1 {
		t.Fatalf("second bucket total: got %d, want 1", got)
	}
}

func TestAttainmentCountsTTFTMetTPOTMetAndTotalPerOutcome(t *testing.T) {
	a := mustAttainment(t, sec, 60*sec)
	a.Record(at(1), OutcomeCompleted, true, true)
	a.Record(at(1), OutcomeCompleted, true, false)
	a.Record(at(1), OutcomeCompleted, false, false)
	a.Record(at(1), OutcomeFailed, true, false)
	a.Record(at(1), OutcomeExpired, false, false)
	a.Record(at(1), OutcomeRefused, false, false)
	a.Record(at(1), OutcomeRefused, false, false)
	w := a.Window(at(0), at(2))
	want := [NumOutcomes]Counts{
		OutcomeCompleted: {TTFTMet: 2, TPOTMet: 1, Total: 3},
		OutcomeFailed:    {TTFTMet: 1, TPOTMet: 0, Total: 1},
		OutcomeExpired:   {Total: 1},
		OutcomeRefused:   {Total: 2},
	}
	if w.ByOutcome != want {
		t.Fatalf("unexpected counts; got %+v; want %+v", w.ByOutcome, want)
	}
	if a.Record(at(1), NumOutcomes, true, true) {
		t.Fatal("unknown outcome accepted")
	}
}

func TestAttainmentPruneAdvancesFromNewestBucket(t *testing.T) {
	a := mustAttainment(t, sec, 10*sec) // keeps 11 buckets
	a.Record(at(0), OutcomeCompleted, true, true)
	a.Record(at(10), OutcomeCompleted, true, true)
	// No clock: however late "now" is, pruning only looks at the newest bucket.
	if n := a.Prune(); n != 0 {
		t.Fatalf("prune with bucket 0 still within newest-retention: expired %d, want 0", n)
	}
	if got := a.Window(0, at(100)).ByOutcome[OutcomeCompleted].Total; got != 2 {
		t.Fatalf("total before advance: got %d, want 2", got)
	}
	a.Record(at(11), OutcomeFailed, false, false) // newest moves to 11: bucket 0 expires
	a.Prune()
	w := a.Window(0, at(100))
	if got := w.ByOutcome[OutcomeCompleted].Total; got != 1 {
		t.Fatalf("completed after advance: got %d, want 1", got)
	}
	if a.Expired() != 1 {
		t.Fatalf("expired: got %d, want 1", a.Expired())
	}
	if w.FromNs != at(1) {
		t.Fatalf("oldest retained bucket: got %d, want %d", w.FromNs, at(1))
	}
}

func TestAttainmentRetainsFourDemandWindows(t *testing.T) {
	window := 30 * sec
	a := mustAttainment(t, 10*sec, OutputsWindows*window)
	a.Record(at(0), OutcomeCompleted, true, true)
	a.Record(at(120), OutcomeCompleted, true, true) // exactly 4 windows later
	if got := a.Window(0, at(200)).ByOutcome[OutcomeCompleted].Total; got != 2 {
		t.Fatalf("at 4 windows: got %d, want 2 (bucket 0 still retained)", got)
	}
	a.Record(at(130), OutcomeCompleted, true, true)
	if got := a.Window(0, at(200)).ByOutcome[OutcomeCompleted].Total; got != 2 {
		t.Fatalf("past 4 windows: got %d, want 2 (bucket 0 expired)", got)
	}
}

func TestAttainmentWindowIncludesFullBoundaryBucket(t *testing.T) {
	a := mustAttainment(t, 10*sec, 120*sec)
	a.Record(at(10), OutcomeCompleted, true, true) // bucket [10,20)
	a.Record(at(19), OutcomeCompleted, true, true)
	a.Record(at(25), OutcomeCompleted, true, true)
	w := a.Window(at(18), at(29))
	if got := w.ByOutcome[OutcomeCompleted].Total; got != 3 {
		t.Fatalf("boundary bucket whole: got %d, want 3", got)
	}
	if w.FromNs != at(10) || w.Buckets != 2 {
		t.Fatalf("window: from %d buckets %d; want from %d, 2 buckets", w.FromNs, w.Buckets, at(10))
	}
}

func TestAttainmentCoveredSIsAgeOfOldestBucketCappedAtRetention(t *testing.T) {
	a := mustAttainment(t, 10*sec, 60*sec)
	if got := a.CoveredS(at(5)); got != 0 {
		t.Fatalf("empty: covered_s %v, want 0", got)
	}
	a.Record(at(12), OutcomeCompleted, true, true) // oldest bucket starts at 10
	if got := a.CoveredS(at(35)); got != 25 {
		t.Fatalf("covered_s: got %v, want 25", got)
	}
	if got := a.CoveredS(at(500)); got != 60 {
		t.Fatalf("covered_s capped: got %v, want 60", got)
	}
	a.Record(at(100), OutcomeCompleted, true, true) // oldest retained now 40
	if got := a.CoveredS(at(105)); got != 60 {
		t.Fatalf("covered_s after prune: got %v, want 60 (cap)", got)
	}
	if got := a.CoveredS(at(95)); got != 55 {
		t.Fatalf("covered_s: got %v, want 55", got)
	}
}

// ---- Demand accounting: unsized offers ----

func mustDemand(t testing.TB, width, window int64) *Demand {
	t.Helper()
	d, err := NewDemand(DemandConfig{BucketWidthNs: width, DemandWindowNs: window})
	if err != nil {
		t.Fatalf("NewDemand: %v", err)
	}
	return d
}

func TestUnsizedPendingCountsBodiesStillBeingRead(t *testing.T) {
	d := mustDemand(t, sec, 60*sec)
	d.OfferStarted()
	d.OfferStarted()
	d.OfferStarted()
	if d.Pending() != 3 {
		t.Fatalf("pending: got %d, want 3", d.Pending())
	}
	d.OfferSized(at(1), Shape{100, 10})
	d.OfferUnsizedEnd(at(1))
	if got := d.Snapshot().Unsized.Pending; got != 1 {
		t.Fatalf("pending after sized+unsized end: got %d, want 1", got)
	}
	d.OfferUnsizedEnd(at(2))
	d.OfferUnsizedEnd(at(2)) // more ends than starts: never below zero
	if d.Pending() != 0 {
		t.Fatalf("pending: got %d, want 0", d.Pending())
	}
}

func TestUnsizedObservationsCountRetainedOffersEndedBeforeSizing(t *testing.T) {
	d := mustDemand(t, sec, 10*sec)
	d.OfferUnsizedEnd(at(0))
	d.OfferUnsizedEnd(at(5))
	d.OfferUnsizedEnd(at(5))
	if got := d.Snapshot().Unsized.Observations; got != 3 {
		t.Fatalf("observations: got %d, want 3", got)
	}
	d.OfferSized(at(11), Shape{10, 10}) // bucket 0 expires (older than 11-10)
	if got := d.Snapshot().Unsized.Observations; got != 2 {
		t.Fatalf("observations after bucket 0 expired: got %d, want 2", got)
	}
}

func TestUnsizedOffersStoredAsOneShapePerBucket(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	for i := 0; i < 500; i++ {
		h.RecordUnsized(at(3.5))
	}
	cells, w := window(h, at(3), at(3))
	if len(cells) != 0 || w.Unsized != 500 || w.Count() != 0 {
		t.Fatalf("unsized: cells %d, unsized %d, sized %d; want 0, 500, 0", len(cells), w.Unsized, w.Count())
	}
	if st := h.Stats(); st.RetainedCells != 0 {
		t.Fatalf("unsized offers took exact cells: %d", st.RetainedCells)
	}
}

// ---- Demand accounting: input-size repricing ----

func TestRepriceReplacesEstimateAtOriginalArrival(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	est, exact := Shape{400, 64}, Shape{371, 64}
	record(t, h, at(2.2), est.Input, est.Output)
	record(t, h, at(7), 10, 10) // later traffic; newest is now bucket 7
	if !h.Reprice(at(2.2), est, exact) {
		t.Fatal("reprice refused")
	}
	cells, _ := window(h, at(2), at(2))
	if cellCount(cells, est) != 0 || cellCount(cells, exact) != 1 {
		t.Fatalf("bucket 2 after reprice: %+v; want only %v", cells, exact)
	}
	if cells, _ := window(h, at(7), at(7)); cellCount(cells, exact) != 0 {
		t.Fatalf("reprice landed in the newest bucket: %+v", cells)
	}
	if h.Reprice(at(2.2), est, exact) {
		t.Fatal("second reprice of the same estimate accepted")
	}
	record(t, h, at(70), 1, 1) // bucket 2 expires
	if h.Reprice(at(2.2), exact, est) {
		t.Fatal("reprice into an expired bucket accepted")
	}
}

// TestRejectedBeforeTokenizationKeepsEstimate lives in package core
// (spec_rules_test.go), where a rejection exists (Core.Refused).

// fillExact fills bucket ts with 128 distinct exact shapes (smaller than
// anything the tests overflow) so that later shapes overflow; it skips
// shapes that would overflow on their own (their probe window full).
func fillExact(t *testing.T, h *History, ts int64) {
	t.Helper()
	var used [ExactCells]bool
	n := 0
	for i := 0; n < ExactCells; i++ {
		s := Shape{Input: int64(1 + i), Output: 1}
		home := ProbeStart(s)
		for j := 0; j < ProbeWindow; j++ {
			if c := (home + j) % ExactCells; !used[c] {
				used[c] = true
				n++
				if !h.Record(ts, s) {
					t.Fatal("fill refused")
				}
				break
			}
		}
		if i > 100000 {
			t.Fatal("BUG: cannot fill exact cells")
		}
	}
	if cells, w := h.Window(ts, ts, nil); len(cells) != ExactCells || w.Overflow.Count != 0 {
		t.Fatalf("BUG: fill left %d cells, %d overflow", len(cells), w.Overflow.Count)
	}
}

func TestRepriceMovingLastBoundaryObservationInvalidatesEvidence(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(5))
	fillExact(t, h, at(6))
	// bucket 5: overflow cohort with max input 9000 held by one observation
	big, small := Shape{9000, 50}, Shape{5000, 50}
	for _, ts := range []int64{at(5), at(6)} {
		record(t, h, ts, big.Input, big.Output)
		record(t, h, ts, small.Input, small.Output)
	}
	record(t, h, at(6), big.Input, big.Output) // bucket 6: two at the max
	if ev := h.Evidence(at(5), at(6)); ev.Buckets != 2 || ev.SkippedInvalid != 0 {
		t.Fatalf("before: %+v; want 2 valid buckets", ev)
	}
	cells, _ := window(h, at(6), at(6))
	exact := cells[0].Shape // a shape with its own exact cell
	if !h.Reprice(at(6), big, exact) {
		t.Fatal("reprice in bucket 6 refused")
	}
	if _, w := window(h, at(6), at(6)); w.InvalidBuckets != 0 {
		t.Fatal("bucket 6 invalidated although another observation still holds the max")
	}
	if !h.Reprice(at(5), big, exact) {
		t.Fatal("reprice in bucket 5 refused")
	}
	_, w := window(h, at(5), at(5))
	if w.InvalidBuckets != 1 {
		t.Fatalf("bucket 5 invalid buckets: got %d, want 1", w.InvalidBuckets)
	}
	if w.Overflow.MaxInput != 9000 {
		t.Fatalf("price must stay conservative: max input %d, want 9000", w.Overflow.MaxInput)
	}
	ev := h.Evidence(at(5), at(6))
	if ev.Buckets != 1 || ev.SkippedInvalid != 1 || ev.Observations != ExactCells+3 {
		t.Fatalf("after: %+v; want bucket 6 only (131 observations), 1 skipped", ev)
	}
	// the invalid bucket stays invalid until it expires
	record(t, h, at(65), 1, 1)
	if ev := h.Evidence(at(0), at(65)); ev.SkippedInvalid != 1 {
		t.Fatalf("still retained: skipped %d, want 1", ev.SkippedInvalid)
	}
	record(t, h, at(65.5), 1, 1)
	record(t, h, at(66), 1, 1)
	if ev := h.Evidence(at(0), at(66)); ev.SkippedInvalid != 0 {
		t.Fatalf("after expiry: skipped %d, want 0", ev.SkippedInvalid)
	}
}

// TestRepriceInsideTheOverflowCohortKeepsBoundaryEvidence: the page
// invalidates boundary evidence only when repricing moves the last
// boundary observation "into another cohort"; a move that stays in the
// overflow cohort keeps the bucket valid, with every count.
func TestRepriceInsideTheOverflowCohortKeepsBoundaryEvidence(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(5))
	big, other := Shape{9000, 50}, Shape{4000, 50}
	record(t, h, at(5), big.Input, big.Output)
	record(t, h, at(5), 5000, 0) // the only zero-output one
	if !h.Reprice(at(5), big, other) {
		t.Fatal("reprice refused")
	}
	if !h.Reprice(at(5), Shape{5000, 0}, Shape{5001, 0}) {
		t.Fatal("reprice refused")
	}
	_, w := window(h, at(5), at(5))
	if w.InvalidBuckets != 0 || w.Overflow.Count != 2 || !w.Overflow.ZeroOutput {
		t.Fatalf("same-cohort reprices: %+v; want a valid bucket with 2 overflow, zero output kept", w)
	}
	if ev := h.Evidence(at(5), at(5)); ev.Buckets != 1 || ev.SkippedInvalid != 0 {
		t.Fatalf("evidence %+v; want the bucket counted", ev)
	}
	// the last zero-output observation leaving into an exact cell does
	// invalidate
	cells, _ := window(h, at(5), at(5))
	if !h.Reprice(at(5), Shape{5001, 0}, cells[0].Shape) {
		t.Fatal("reprice refused")
	}
	if _, w := window(h, at(5), at(5)); w.InvalidBuckets != 1 {
		t.Fatalf("moving the last zero-output observation into an exact cell: %+v; want invalid", w)
	}
}

// ---- Demand accounting: bucketing and retention ----

func TestBucketHoldsAtMost128ExactShapes(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	for i := 0; i < 1000; i++ {
		record(t, h, at(1), int64(100+i), 20)
	}
	cells, w := window(h, at(1), at(1))
	if len(cells) > ExactCells {
		t.Fatalf("exact cells: got %d, want <= %d", len(cells), ExactCells)
	}
	if len(cells) < ExactCells*3/4 {
		t.Fatalf("exact cells: got %d, want the table mostly filled (>= 96)", len(cells))
	}
	if w.Count() != 1000 || w.Exact != int64(len(cells)) || w.Overflow.Count != int64(1000-len(cells)) {
		t.Fatalf("counts: exact %d overflow %d; want %d and %d", w.Exact, w.Overflow.Count, len(cells), 1000-len(cells))
	}
	if st := h.Stats(); st.RetainedCells != int64(len(cells)) || st.CellLimit != 61*ExactCells {
		t.Fatalf("stats: %+v", st)
	}
}

func TestBucketHasOneOverflowCohort(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(1))
	record(t, h, at(1), 7000, 100)
	record(t, h, at(1), 6000, 900)
	_, w := window(h, at(1), at(1))
	want := Cohort{Count: 2, MaxInput: 7000, MaxOutput: 900}
	if w.Overflow != want {
		t.Fatalf("cohort: got %+v; want %+v", w.Overflow, want)
	}
}

func TestBucketWidthIsMinOfSecondStepAndEvidenceSpan(t *testing.T) {
	f := func(step, span, want int64) {
		t.Helper()
		if got := BucketWidth(step, span); got != want {
			t.Fatalf("unexpected width for step %d span %d; got %d; want %d", step, span, got, want)
		}
	}
	f(5*sec, 30*sec, sec)
	f(250*ms, 30*sec, 250*ms)
	f(5*sec, 100*ms, 100*ms)
	f(300*ms, 200*ms, 200*ms)
	f(0, 0, sec)
}

func TestSubSecondBucketsAgreeAtExactBoundaries(t *testing.T) {
	h := mustHistory(t, 250*ms, 10*sec)
	record(t, h, at(1.0), 1, 1)  // bucket [1.00, 1.25)
	record(t, h, at(1.25), 2, 2) // exact boundary: bucket [1.25, 1.50)
	record(t, h, at(1.2499), 3, 3)
	cells, w := window(h, at(1.0), at(1.2499))
	if w.Count() != 2 || cellCount(cells, Shape{2, 2}) != 0 || w.ToNs != at(1.25) {
		t.Fatalf("bucket [1,1.25): %+v %+v", cells, w)
	}
	cells, _ = window(h, at(1.25), at(1.25))
	if len(cells) != 1 || cells[0].Shape != (Shape{2, 2}) {
		t.Fatalf("bucket [1.25,1.5): %+v", cells)
	}
}

func TestArrivalsAndResidencyRetainOneDemandWindow(t *testing.T) {
	d := mustDemand(t, sec, 30*sec)
	for _, h := range []*History{d.Arrivals, d.Residency} {
		record(t, h, at(0), 10, 10)
		record(t, h, at(30), 10, 10)
		if _, w := window(h, 0, at(30)); w.Count() != 2 {
			t.Fatalf("one window later: %d, want 2", w.Count())
		}
		record(t, h, at(31), 10, 10)
		if _, w := window(h, 0, at(31)); w.Count() != 2 {
			t.Fatalf("past one window: %d, want 2 (bucket 0 gone)", w.Count())
		}
		if h.Record(at(0.5), Shape{1, 1}) {
			t.Fatal("record into an expired bucket accepted")
		}
	}
}

func TestOutputsRetainFourDemandWindows(t *testing.T) {
	d := mustDemand(t, sec, 30*sec)
	h := d.Outputs
	record(t, h, at(0), 100, 80)
	record(t, h, at(120), 100, 80)
	if _, w := window(h, 0, at(120)); w.Count() != 2 {
		t.Fatalf("four windows later: %d, want 2", w.Count())
	}
	record(t, h, at(121), 100, 80)
	if _, w := window(h, 0, at(121)); w.Count() != 2 {
		t.Fatalf("past four windows: %d, want 2", w.Count())
	}
}

func TestRecordingPrunesExpiredBucketsWithoutController(t *testing.T) {
	h := mustHistory(t, sec, 10*sec)
	for i := 0; i < 5; i++ {
		record(t, h, at(0), int64(i), 1)
	}
	record(t, h, at(30), 1, 1) // nobody calls Prune
	sized, _ := h.Expired()
	if sized != 5 {
		t.Fatalf("expired by recording: got %d, want 5", sized)
	}
	if st := h.Stats(); st.Observations != 1 || st.RetainedCells != 1 {
		t.Fatalf("stats after recording: %+v; want 1 observation in 1 cell", st)
	}
	if n := h.Prune(); n != 0 {
		t.Fatalf("prune found %d left behind, want 0", n)
	}
}

// ---- Demand accounting: overflow ----

func TestOverflowKeepsEveryCountAndPricesFromLargestInputAndOutput(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(2))
	shapes := []Shape{{3000, 10}, {200, 4000}, {2500, 300}, {3000, 10}}
	for _, s := range shapes {
		record(t, h, at(2), s.Input, s.Output)
	}
	_, w := window(h, at(2), at(2))
	if w.Overflow.Count != 4 || w.Overflow.MaxInput != 3000 || w.Overflow.MaxOutput != 4000 || w.Overflow.ZeroOutput {
		t.Fatalf("cohort: %+v; want count 4, max input 3000, max output 4000", w.Overflow)
	}
	if w.Count() != ExactCells+4 {
		t.Fatalf("every count kept: %d, want %d", w.Count(), ExactCells+4)
	}
}

func TestOverflowZeroRequestedOutputMarksDecodeIncomplete(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(2))
	record(t, h, at(2), 3000, 100)
	if _, w := window(h, at(2), at(2)); w.DecodeIncomplete() {
		t.Fatal("decode incomplete without a zero requested output")
	}
	record(t, h, at(2), 3000, 0)
	_, w := window(h, at(2), at(2))
	if !w.DecodeIncomplete() || w.Overflow.MaxOutput != 100 {
		t.Fatalf("cohort %+v: want ZeroOutput and max output 100", w.Overflow)
	}
	// an exact cell with output 0 is priced exactly: not incomplete
	h2 := mustHistory(t, sec, 60*sec)
	record(t, h2, at(2), 3000, 0)
	if _, w := window(h2, at(2), at(2)); w.DecodeIncomplete() {
		t.Fatal("exact zero-output shape marked decode incomplete")
	}
}

func TestOutputOverflowDisablesLearnedDiscountsUntilExpiry(t *testing.T) {
	d := mustDemand(t, sec, 10*sec) // outputs retained 40 s
	h := d.Outputs
	fillExact(t, h, at(0))
	record(t, h, at(0), 8000, 7000) // overflowed output observation
	overflowRetained := func(now float64) bool {
		_, w := h.Window(0, at(now), nil)
		if h.HasOverflow() != (w.Overflow.Count > 0) {
			t.Fatalf("HasOverflow %v disagrees with the window %+v", h.HasOverflow(), w.Overflow)
		}
		return w.Overflow.Count > 0
	}
	record(t, h, at(40), 10, 10)
	if !overflowRetained(40) {
		t.Fatal("overflow forgotten before it expired")
	}
	record(t, h, at(41), 10, 10)
	if overflowRetained(41) {
		t.Fatal("overflow still reported after it expired")
	}
}

func TestCohortCrossingWindowBoundaryCountsWhole(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	fillExact(t, h, at(9))
	record(t, h, at(9.1), 5000, 10)
	record(t, h, at(9.9), 5000, 20)
	record(t, h, at(10.5), 7, 7)
	// window from 9.5: the whole bucket [9,10) counts, and only it extra
	cells, w := window(h, at(9.5), at(10.9))
	if w.Overflow.Count != 2 || w.FromNs != at(9) || w.Buckets != 2 || len(cells) != ExactCells+1 {
		t.Fatalf("window: %+v (%d cells); want the whole [9,10) cohort (2), from %d, 2 buckets", w, len(cells), at(9))
	}
}

// ---- Demand accounting: introspection ----

func TestDemandHistoryExposesRetainedCellsLimitObservationsAndOverflow(t *testing.T) {
	d := mustDemand(t, sec, 10*sec)
	fillExact(t, d.Arrivals, at(1))
	record(t, d.Arrivals, at(1), 9000, 9)
	record(t, d.Arrivals, at(1), 9001, 9)
	record(t, d.Residency, at(1), 50, 5)
	record(t, d.Outputs, at(1), 50, 40)
	record(t, d.Outputs, at(1), 50, 40)
	d.OfferStarted()
	d.OfferStarted()
	d.OfferUnsizedEnd(at(1))
	got := d.Snapshot()
	want := DemandHistory{
		Arrivals:  KindStats{RetainedCells: ExactCells, CellLimit: 11 * ExactCells, Observations: ExactCells + 2, OverflowObservations: 2},
		Residency: KindStats{RetainedCells: 1, CellLimit: 11 * ExactCells, Observations: 1},
		Outputs:   KindStats{RetainedCells: 1, CellLimit: 41 * ExactCells, Observations: 2},
		Unsized:   UnsizedStats{Pending: 1, Observations: 1},
	}
	if got != want {
		t.Fatalf("unexpected demand_history; got %+v; want %+v", got, want)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(d)); err != nil {
		t.Fatalf("register: %v", err)
	}
	gotMetrics := gather(t, reg)
	for name, v := range map[string]float64{
		`narwhal_demand_history_cell_limit{kind="arrivals"}`:             1408,
		`narwhal_demand_history_cell_limit{kind="outputs"}`:              5248,
		`narwhal_demand_history_retained_cells{kind="arrivals"}`:         128,
		`narwhal_demand_history_retained_cells{kind="residency"}`:        1,
		`narwhal_demand_history_observations{kind="arrivals"}`:           130,
		`narwhal_demand_history_observations{kind="outputs"}`:            2,
		`narwhal_demand_history_overflow_observations{kind="arrivals"}`:  2,
		`narwhal_demand_history_overflow_observations{kind="residency"}`: 0,
		`narwhal_demand_history_unsized_pending`:                         1,
		`narwhal_demand_history_unsized_observations`:                    1,
	} {
		g, ok := gotMetrics[name]
		if !ok || g != v {
			t.Errorf("unexpected %s; got %v (present %v); want %v", name, g, ok, v)
		}
	}
}

// gather scrapes reg into "name{label=\"value\"}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteString(mf.GetName())
			if len(m.GetLabel()) > 0 {
				b.WriteString("{")
				for i, l := range m.GetLabel() {
					if i > 0 {
						b.WriteString(",")
					}
					b.WriteString(l.GetName() + `="` + l.GetValue() + `"`)
				}
				b.WriteString("}")
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[b.String()] = v
		}
	}
	return out
}

// ---- Consolidation evidence ----

func TestEvidenceCountsOnlyBucketsWhollyAfterCutoff(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	record(t, h, at(3.2), 10, 10)
	record(t, h, at(4.1), 10, 10)
	record(t, h, at(5.7), 10, 10)
	ev := h.Evidence(at(3.5), at(5.9)) // bucket [3,4) straddles the cutoff
	want := Evidence{SpanNs: 2 * sec, Observations: 2, Buckets: 2, SkippedStraddling: 1}
	if ev != want {
		t.Fatalf("unexpected evidence; got %+v; want %+v", ev, want)
	}
	ev = h.Evidence(at(3), at(5.9)) // cutoff on a boundary: bucket 3 is wholly after
	if ev.Observations != 3 || ev.Buckets != 3 || ev.SkippedStraddling != 0 {
		t.Fatalf("boundary cutoff: %+v", ev)
	}
	if ev := h.Evidence(at(0), at(5.9)); ev.Buckets != 3 || ev.SpanNs != 3*sec {
		t.Fatalf("before the first record nothing is evidence: %+v", ev)
	}
}

func TestAttainmentCollectorExportsWindowAndCoveredS(t *testing.T) {
	a := mustAttainment(t, 10*sec, 120*sec)
	a.Record(at(5), OutcomeCompleted, true, false)
	a.Record(at(15), OutcomeCompleted, true, true)
	a.Record(at(15), OutcomeRefused, false, false)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewAttainmentCollector(a, func() int64 { return at(40) })); err != nil {
		t.Fatalf("register: %v", err)
	}
	got := gather(t, reg)
	for name, v := range map[string]float64{
		`narwhal_attainment_requests{outcome="completed"}`: 2,
		`narwhal_attainment_ttft_met{outcome="completed"}`: 2,
		`narwhal_attainment_tpot_met{outcome="completed"}`: 1,
		`narwhal_attainment_requests{outcome="refused"}`:   1,
		`narwhal_attainment_requests{outcome="failed"}`:    0,
		`narwhal_attainment_covered_seconds`:               40,
	} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("unexpected %s; got %v (present %v); want %v", name, g, ok, v)
		}
	}
}
