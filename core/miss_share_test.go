package core

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

// The journal shows, for both phases, the measured share of requests past
// their SLO over the short horizon (min_evidence_span_s, 10 s): first
// tokens past ttft_slo_s, completions whose TPOT is past tpot_slo_s. A
// ratio of exactly 1 meets the SLO; misses older than the short horizon do
// not count. Values computed by hand (TTFT SLO 0.25 s, TPOT SLO 0.1 s).
func TestJournalShowsTheObservedMissShareOfBothPhases(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal.jsonl")
	sink, err := controller.NewJSONLinesSink(journal)
	if err != nil {
		t.Fatal(err)
	}
	c := newCore(t, WithJournalSink(sink))
	ttft := func(arr int64, s float64) { must(t, c.FirstToken(arr+int64(s*1e9), arr)) }
	// 40 s: six misses (TTFT 0.75 s, ratio 3), outside the short horizon
	// at the step at 60 s.
	for range 6 {
		ttft(at(40), 0.75)
	}
	// 55-59 s: 20 first tokens, 4 past the SLO (0.5 s: ratio 2), one at
	// exactly the SLO (0.25 s: ratio 1, met), 15 at 0.125 s (ratio 0.5).
	// count 20, over 4, mean (4·2 + 1 + 15·0.5) / 20 = 0.825, share 0.2.
	for i := range 20 {
		a := at(55 + float64(i)*0.2)
		switch {
		case i < 4:
			ttft(a, 0.5)
		case i == 4:
			ttft(a, 0.25)
		default:
			ttft(a, 0.125)
		}
	}
	// 10 completions of 11 output tokens (TPOT over 10 intervals): 3 at
	// 0.15 s (ratio 1.5), 7 at 0.05 s (ratio 0.5). Over 3 of 10, share
	// 0.3, mean (3·1.5 + 7·0.5) / 10 = 0.8.
	for i := range 10 {
		a := at(56 + float64(i)*0.3)
		tpot := 0.05
		if i < 3 {
			tpot = 0.15
		}
		first := a + 0.1e9
		must(t, c.Completed(first+int64(10*tpot*1e9), a, first, 11, 11))
	}
	d := c.Step(at(60))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wantP := controller.PhaseObservation{Count: 20, Over: 4, Mean: 0.825, Max: 2}
	wantD := controller.PhaseObservation{Count: 10, Over: 3, Mean: 0.8, Max: 1.5}
	hist, err := controller.LoadJournal(journal, 10)
	if err != nil || len(hist) != 1 {
		t.Fatalf("journal: %d decisions, %v", len(hist), err)
	}
	for _, got := range []controller.Decision{d, hist[0]} {
		if !near(got.Snapshot.ObservedPrefill, wantP) || !near(got.Snapshot.ObservedDecode, wantD) {
			t.Fatalf("observed prefill %+v decode %+v; want %+v, %+v", got.Snapshot.ObservedPrefill, got.Snapshot.ObservedDecode, wantP, wantD)
		}
		if got.ObservedPrefillMissShare != 0.2 || got.ObservedDecodeMissShare != 0.3 {
			t.Fatalf("miss shares prefill %v decode %v; want 0.2, 0.3", got.ObservedPrefillMissShare, got.ObservedDecodeMissShare)
		}
	}
}

func near(a, b controller.PhaseObservation) bool {
	return a.Count == b.Count && a.Over == b.Over && math.Abs(a.Mean-b.Mean) < 1e-4 && math.Abs(a.Max-b.Max) < 1e-4
}

// A request whose client gave up before its first token (Expired with
// none) after waiting past the TTFT SLO counts in observed prefill
// pressure at its wait, a lower bound of its TTFT; one that expired
// within the SLO, one that had its first token, and a Failed one do
// not. Values by hand (TTFT SLO 0.25 s).
func TestExpiredWithoutFirstTokenCountsItsWait(t *testing.T) {
	c := newCore(t)
	defer c.Close()
	// Served: 2 first tokens at 0.125 s (ratio 0.5).
	for i := range 2 {
		a := at(55 + float64(i))
		must(t, c.FirstToken(a+0.125e9, a))
	}
	// Gone after waiting 1 s and 2 s with no first token: ratios 4 and 8.
	must(t, c.Expired(at(57)+1e9, at(57), 0))
	must(t, c.Expired(at(57.5)+2e9, at(57.5), 0))
	// Not prefill observations: gone within the SLO (0.2 s); expired in
	// decode (its first token, 0.125 s, was recorded by FirstToken: not
	// here); failed after 3 s with no first token.
	must(t, c.Expired(at(58)+0.2e9, at(58), 0))
	must(t, c.Expired(at(58.5)+1e9, at(58.5), at(58.5)+0.125e9))
	must(t, c.Failed(at(58.6)+3e9, at(58.6), 0))
	d := c.Step(at(62))
	// count 4, over 2, mean (0.5 + 0.5 + 4 + 8) / 4 = 3.25, max 8.
	want := controller.PhaseObservation{Count: 4, Over: 2, Mean: 3.25, Max: 8}
	if !near(d.Snapshot.ObservedPrefill, want) {
		t.Fatalf("observed prefill %+v; want %+v", d.Snapshot.ObservedPrefill, want)
	}
	if d.ObservedPrefillMissShare != 0.5 {
		t.Fatalf("prefill miss share %v; want 0.5", d.ObservedPrefillMissShare)
	}
	// Each still counts once in attainment: 4 expired and 1 failed ended,
	// none met its TTFT but the one with its first token in time.
	w := c.Attainment().Window(at(0), at(62))
	ex, fa := w.ByOutcome[buckets.OutcomeExpired], w.ByOutcome[buckets.OutcomeFailed]
	if ex.Total != 4 || ex.TTFTMet != 1 || fa.Total != 1 || fa.TTFTMet != 0 {
		t.Fatalf("attainment expired %+v failed %+v; want 4 with 1 TTFT met, 1 with none", ex, fa)
	}
}
