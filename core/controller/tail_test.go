package controller

import (
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// TestTTFTTailLetsDecodeGoToItsSLO: 8 prefill and 2 decode engines, 20
// req/s of 512-token prompts and an overflow cohort (observed_pressure
// basis: decode priced by its measurement, 0.4 on 2 engines, 0.4 × 2/1 =
// 0.8 on one, past source_limit 0.65), prefill measured at a mean of 0.3
// of its TTFT SLO (not a confirmed deficit). A share of first tokens past
// the SLO above the infeasible share by more than tailMargin (0.1) lets
// the one-engine move to prefill take decode up to its SLO (1), as long
// as decode's KV need at 9:1 stays within source_limit of its capacity.
//   - 1500-token overflow prompts are feasible: feasible share 1, the
//     tail threshold 0.1. 10 of 100 past (0.1) holds; 20 of 100 moves.
//   - The same 20 with the decode engines at 20,000 KV tokens: the KV
//     need at 9:1 (14,241 tokens, above 0.65 × 20,000 = 13,000, within
//     the 0.9 × 20,000 kv_limit) keeps the source_limit.
//   - Decode measured at 0.5 (1.0 on one engine, not under its SLO):
//     40 of 100 past still holds.
//   - 50 overflow prompts of 8000 tokens (infeasible at any pool size)
//     beside the 200 sized ones: feasible share 200/250 = 0.8, threshold
//     0.2 + 0.1. 25 of 100 past (0.25) holds; 35 of 100 passes.
func TestTTFTTailLetsDecodeGoToItsSLO(t *testing.T) {
	for _, tc := range []struct {
		name            string
		nOv, maxIn      int64
		obsD            float64
		capTok          int64
		over            int64
		feasible, value float64
		pass            bool
	}{
		{"share at the margin", 400, 1500, 0.4, 66144, 10, 1, 0.8, false},
		{"share past the margin", 400, 1500, 0.4, 66144, 20, 1, 0.8, true},
		{"decode KV past source_limit", 400, 1500, 0.4, 20000, 20, 1, 0.8, false},
		{"decode at its SLO after the move", 400, 1500, 0.5, 66144, 40, 1, 1, false},
		{"infeasible prompts explain the misses", 50, 8000, 0.4, 66144, 25, 0.8, 0.8, false},
		{"misses past the infeasible share", 50, 8000, 0.4, 66144, 35, 0.8, 0.8, true},
	} {
		cfg := testConfig()
		cfg.DefaultOutputTokens = 16
		c := newTestController(t, cfg, 8, 2)
		setResident(t, c, RoleDecode, t0, Resident{}, tc.capTok)
		in := overflowInputs(tc.nOv, tc.maxIn, 0.3, tc.obsD)
		in.ObservedPrefill.Over = tc.over
		in.Arrivals.(*fakeHistory).ev = buckets.Evidence{SpanNs: 30 * sec, Observations: 50, Buckets: 30}
		d := c.Step(t0, in)
		if d.Basis != BasisObservedPressure || d.Best.Moves != 1 || d.Snapshot.Short.FeasibleShare != tc.feasible {
			t.Fatalf("%s: want the observed_pressure basis, best one engine toward prefill, feasible share %v; got %s %+v %v", tc.name, tc.feasible, d.Basis, d.Best, d.Snapshot.Short.FeasibleShare)
		}
		if kv := d.Best.KVNeedTokens; tc.maxIn == 1500 && (kv <= 0.65*20000 || kv > 0.9*20000) {
			t.Fatalf("%s: scenario: KV need at 9:1 %v; want within (13000, 18000]", tc.name, kv)
		}
		if got := d.ObservedPrefillMissShare; got != float64(tc.over)/100 {
			t.Fatalf("%s: journal miss share %v; want %v", tc.name, got, float64(tc.over)/100)
		}
		g := sourceGate(t, d)
		if g.Pass != tc.pass || g.Value != tc.value || g.Limit != cfg.SourceLimit {
			t.Fatalf("%s: source_pressure %+v; want pass %v at %v (limit %v)", tc.name, g, tc.pass, tc.value, cfg.SourceLimit)
		}
		if !tc.pass {
			if d.Action != ActionBlocked || d.Blocked != GateSourcePressure {
				t.Fatalf("%s: got %s %q; want blocked by %s", tc.name, d.Action, d.Blocked, GateSourcePressure)
			}
			continue
		}
		if tc.maxIn == 1500 && (d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].To != RolePrefill) {
			t.Fatalf("%s: got %s %q %+v; want one decode->prefill move", tc.name, d.Action, d.Blocked, d.Moves)
		}
	}
}
