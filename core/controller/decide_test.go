package controller

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// TestRecoveryPrefillRatio: acceptance 2, the formula on exact numbers.
func TestRecoveryPrefillRatio(t *testing.T) {
	f := func(obs, res, queued float64, n int, want float64) {
		t.Helper()
		if got := RecoveryPrefillRatio(obs, res, queued, n, 0.25); got != want {
			t.Fatalf("unexpected ratio for obs=%v res=%v queued=%v n=%d; got %v; want %v", obs, res, queued, n, got, want)
		}
	}
	f(0.5, 0.25, 0.75, 2, 2)       // (0.25+0.75)/(2·0.25) = 2 > 0.5
	f(3, 0.25, 0.75, 2, 3)         // observed above the computed ratio
	f(0.5, 0.25, 0.75, 0, 0.5)     // no prefill engine: observed
	f(0.5, 4, 0, 2, 0.5)           // queued_prefill_s = 0: observed, however much is resident
	f(0, 0.125, 0.125, 1, 1)       // (0.125+0.125)/(1·0.25)
	f(1.25, 0.125, 0.125, 1, 1.25) // observed wins
}

// TestRecoveryDecisions: incomplete demand switches the basis and the
// decision exposes the ratio, queued_prefill_s and both observed ratios.
func TestRecoveryDecisions(t *testing.T) {
	run := func(np, nd int, queued, running float64, wantBasis string, wantRatio float64) Decision {
		t.Helper()
		c := newTestController(t, testConfig(), np, nd)
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: queued, RunningPrefillS: running}, 66144)
		in := Inputs{Arrivals: steady(1024, 16, 1), Outputs: &fakeHistory{}} // priced part: light
		in.PendingUnsized = 3
		in.ObservedPrefill = PhaseObservation{Count: 50, Mean: 0.75, Max: 2}
		in.ObservedDecode = PhaseObservation{Count: 50, Mean: 0.5, Max: 0.9}
		d := c.Step(t0, in)
		if d.Basis != wantBasis || d.RecoveryPrefillRatio != wantRatio {
			t.Fatalf("unexpected basis/ratio; got %s %v; want %s %v", d.Basis, d.RecoveryPrefillRatio, wantBasis, wantRatio)
		}
		if d.ObservedPrefillRatio != 0.75 || d.ObservedDecodeRatio != 0.5 || !d.Snapshot.Incomplete || d.Snapshot.IncompleteReason != "unsized_pending" {
			t.Fatalf("unexpected observed ratios or incompleteness: %+v", d)
		}
		return d
	}
	// 2 prefill engines, each 0.25 queued + 0.125 running: (0.25+0.75)/(2·0.25) = 2... per engine sums:
	// queued 0.5, running 0.25 → (0.25+0.5)/(2·0.25) = 1.5.
	d := run(2, 2, 0.25, 0.125, BasisRecovery, 1.5)
	if d.QueuedPrefillS != 0.5 {
		t.Fatalf("unexpected queued_prefill_s; got %v; want 0.5", d.QueuedPrefillS)
	}
	// Current prefill pressure is at least the ratio (the priced part of
	// the demand may predict more); one more prefill engine lowers it.
	if d.Current.PrefillPressure < 1.5 || d.Proposed == nil || d.Proposed.PrefillPressure >= d.Current.PrefillPressure || d.Proposed.PrefillPressure < 1 {
		t.Fatalf("unexpected recovery scoring; current %+v proposed %+v", d.Current, d.Proposed)
	}
	// queued = 0: observed pressure.
	d = run(2, 2, 0, 0.125, BasisObservedPressure, 0.75)
	if d.QueuedPrefillS != 0 {
		t.Fatalf("unexpected queued_prefill_s %v", d.QueuedPrefillS)
	}
	// Observed above the computed ratio: 0.25 queued, 0 running, 4 engines:
	// 0.25·4/(4·0.25)=1 ... use tiny queue: (0.01·4)/(4·0.25) = 0.04 < 0.75.
	run(4, 2, 0.01, 0, BasisRecovery, 0.75)
	// No prefill engine: observed pressure.
	run(0, 3, 0.5, 0, BasisObservedPressure, 0.75)
	// Decode overflow with zero requested output is incomplete too.
	c := newTestController(t, testConfig(), 2, 2)
	in := d2pInputs()
	in.Arrivals.(*fakeHistory).overflow = buckets.Cohort{Count: 5, MaxInput: 100, MaxOutput: 0, ZeroOutput: true}
	if d := c.Step(t0, in); d.Basis != BasisObservedPressure || d.Snapshot.IncompleteReason != "decode_overflow_zero_output" {
		t.Fatalf("unexpected basis %s (%s)", d.Basis, d.Snapshot.IncompleteReason)
	}
}

// TestSnapshotIsFrozen: acceptance 3.
func TestSnapshotIsFrozen(t *testing.T) {
	ps := BuiltinProfiles()
	c, err := New(testConfig(), testTiming(), ps)
	if err != nil {
		t.Fatal(err)
	}
	addEngines(t, c, 4, 4)
	arr, err := buckets.NewHistory(sec, 60*sec)
	if err != nil {
		t.Fatal(err)
	}
	for ts := t0 - 59*sec; ts <= t0; ts += 50e6 { // 20/s
		arr.Record(ts, buckets.Shape{Input: 1024, Output: 16})
	}
	in := Inputs{Arrivals: arr}
	snap := c.Snapshot(t0, in)
	var before []SplitScore
	for j := snap.MinMoves(); j <= snap.MaxMoves(); j++ {
		before = append(before, snap.Split(j))
	}
	// Mutate everything live: buckets, engines, profiles.
	for ts := t0 - 59*sec; ts <= t0; ts += 50e6 {
		arr.Record(ts, buckets.Shape{Input: 2000, Output: 500})
	}
	for _, e := range c.Engines() {
		if err := c.UpdateEngine(e.ID, t0, Resident{QueuedPrefillS: 3, DecodeSeqs: 9, KVTokens: 5000}, 1000, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.UpsertEngine(Engine{ID: "new", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RoleDecode, Live: true}); err != nil {
		t.Fatal(err)
	}
	ps.Profiles[0].Prefill.A *= 10
	ps.Profiles[0].Decode.PerSeq *= 10
	for i, j := 0, snap.MinMoves(); j <= snap.MaxMoves(); i, j = i+1, j+1 {
		if got := snap.Split(j); got != before[i] {
			t.Fatalf("score of split %d changed after live mutation; got %+v; want %+v", j, got, before[i])
		}
	}
	fresh := c.Snapshot(t0, in)
	if fresh.Split(0) == before[-snap.MinMoves()] {
		t.Fatalf("a fresh snapshot should see the mutations")
	}
}

// TestFullPrecisionGates: acceptance 4. The source-pressure gate judges
// the full-precision pressure even where the journal's rounded form
// would decide the other way.
func TestFullPrecisionGates(t *testing.T) {
	foundUp, foundDown := false, false
	for k := 0; k < 200 && !(foundUp && foundDown); k++ {
		rate := 20 + float64(k)*0.013
		in := Inputs{Arrivals: steady(1024, 16, rate), Outputs: &fakeHistory{}}
		probe := newTestController(t, testConfig(), 4, 4)
		p := probe.Snapshot(t0, in).Split(1).DecodePressure
		r := roundJ(p)
		if r == p {
			continue
		}
		cfg := testConfig()
		cfg.SourceLimit = (p + r) / 2 // strictly between the two forms
		c := newTestController(t, cfg, 4, 4)
		d := c.Step(t0, in)
		g := d.Gates[2]
		if g.Gate != GateSourcePressure || g.Value != r {
			t.Fatalf("unexpected journal gate %+v; want value %v", g, r)
		}
		if r < p { // rounded passes (r < limit), full fails
			foundDown = true
			if d.Blocked != GateSourcePressure || g.Pass {
				t.Fatalf("full %v > limit %v must block though rounded %v passes; got %s %q", p, cfg.SourceLimit, r, d.Action, d.Blocked)
			}
		} else { // rounded fails (r ≥ limit), full passes
			foundUp = true
			if d.Action != ActionMove || !g.Pass {
				t.Fatalf("full %v < limit %v must pass though rounded %v fails; got %s %q", p, cfg.SourceLimit, r, d.Action, d.Blocked)
			}
		}
	}
	if !foundUp || !foundDown {
		t.Fatalf("did not find both rounding directions (up %v, down %v)", foundUp, foundDown)
	}
}

// TestOutputEstimateBuiltOncePerStep: acceptance 5.
func TestOutputEstimateBuiltOncePerStep(t *testing.T) {
	c := newTestController(t, testConfig(), 4, 4)
	outs := &fakeHistory{cells: []buckets.Cell{{Shape: buckets.Shape{Input: 512, Output: 128}, Count: 40}, {Shape: buckets.Shape{Input: 0, Output: 300}, Count: 10}}}
	arr := &fakeHistory{cells: []buckets.Cell{{Shape: buckets.Shape{Input: 100, Output: 400}}, {Shape: buckets.Shape{Input: 100, Output: 0}}}, perS: []float64{1, 1}}
	for i := 1; i <= 3; i++ {
		d := c.Step(t0+int64(i)*sec, Inputs{Arrivals: arr, Outputs: outs})
		if c.EstimateBuilds() != uint64(i) || outs.windows != i || d.Snapshot.EstimateBuild != uint64(i) {
			t.Fatalf("step %d: builds %d, outputs reads %d; want %d each", i, c.EstimateBuilds(), outs.windows, i)
		}
		// discount 128/512 = 0.25: requested 400 → 100; unbounded mean 300;
		// both horizons: (100 + 300) / 2 = 200.
		if d.Snapshot.Short.MeanOutput != 200 || d.Snapshot.Long.MeanOutput != 200 || !d.Snapshot.Outputs.Learned {
			t.Fatalf("unexpected horizon outputs %v / %v", d.Snapshot.Short.MeanOutput, d.Snapshot.Long.MeanOutput)
		}
	}
	// Overflow in the outputs history switches learning off for both
	// horizons, and keeps it off while the history retains it, even once
	// the window read no longer shows it; it comes back as soon as the
	// history no longer retains it (however long that took).
	outs.overflow = buckets.Cohort{Count: 1, MaxInput: 600, MaxOutput: 600}
	off := func(at int64, wantLearned bool) {
		t.Helper()
		d := c.Step(at, Inputs{Arrivals: arr, Outputs: outs})
		want := 328.0 // (400 + 256) / 2 without learning
		if wantLearned {
			want = 200
		}
		if d.Snapshot.Outputs.Learned != wantLearned || d.Snapshot.Short.MeanOutput != want || d.Snapshot.Long.MeanOutput != want {
			t.Fatalf("at %d s: unexpected outputs %+v short %v long %v; want learned %v, %v", (at-t0)/sec, d.Snapshot.Outputs, d.Snapshot.Short.MeanOutput, d.Snapshot.Long.MeanOutput, wantLearned, want)
		}
	}
	off(t0+10*sec, false)
	outs.overflow, outs.retainedOverflow = buckets.Cohort{}, true
	off(t0+100*sec, false)
	off(t0+10*sec+4*60*sec+1, false)
	outs.retainedOverflow = false
	off(t0+10*sec+4*60*sec+2, true)
}

func rateForDecode(t *testing.T, target float64) float64 {
	return rateForDecodeOn(newTestController(t, testConfig(), 4, 4), target)
}

// rateForDecodeOn does the same for c's current split.
func rateForDecodeOn(c *Controller, target float64) float64 {
	lo, hi := 0.1, 100.0
	for i := 0; i < 60; i++ {
		mid := (lo + hi) / 2
		if c.Snapshot(t0, Inputs{Arrivals: steady(256, 512, mid)}).Split(0).DecodePressure < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// TestNoOscillationNearThreshold: acceptance 6.
func TestNoOscillationNearThreshold(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scoring = ScoringClosedForm
	cfg.MinEvidenceArrivals = 10
	under, over := rateForDecode(t, 0.78), rateForDecode(t, 0.82)
	for seed := uint64(1); seed <= 5; seed++ {
		c := newTestController(t, cfg, 4, 4)
		rng := rand.New(rand.NewPCG(seed, 7))
		moves, proposals, lastMove := 0, 0, int64(0)
		now := t0
		for i := 0; i < 100; i++ {
			now += sec
			rate := under
			if rng.IntN(2) == 1 {
				rate = over
			}
			d := c.Step(now, Inputs{Arrivals: steady(256, 512, rate), Outputs: &fakeHistory{}})
			if d.Action != ActionHold {
				proposals++
			}
			if d.Action == ActionMove {
				moves++
				lastMove = now
			}
		}
		if proposals == 0 {
			t.Fatalf("seed %d: the load never made a move worth proposing; the test would prove nothing", seed)
		}
		if moves > 1 {
			t.Fatalf("seed %d: %d moves under constant load near the threshold; want at most 1", seed, moves)
		}
		// Step change in the mix: decode-heavy.
		heavy := rateForDecodeOn(c, 1.3)
		change := now + sec
		want := change + int64(cfg.ConfirmSteps-1)*sec
		if lastMove != 0 {
			want = max(want, lastMove+int64(cfg.CooldownS)*sec)
		}
		var got int64
		for i := 0; i < 120 && got == 0; i++ {
			now += sec
			d := c.Step(now, Inputs{Arrivals: steady(256, 512, heavy), Outputs: &fakeHistory{}})

			if d.Action == ActionMove {
				if d.Moves[0].To != RoleDecode {
					t.Fatalf("seed %d: wrong move direction %+v", seed, d.Moves[0])
				}
				got = now
			}
		}
		if got != want {
			t.Fatalf("seed %d: move after the mix change at %d s; want %d s (confirm %d steps)", seed, (got-change)/sec, (want-change)/sec, cfg.ConfirmSteps)
		}
	}
}

// TestRestartKeepsCooldownDwellAndRoles: acceptance 7.
func TestRestartKeepsCooldownDwellAndRoles(t *testing.T) {
	cfg := testConfig()
	cfg.CooldownS, cfg.DwellS = 30, 120
	a := newTestController(t, cfg, 3, 4)
	in := Inputs{Arrivals: steady(1024, 16, 30), Outputs: &fakeHistory{}}
	d := a.Step(t0, in)
	if d.Action != ActionMove {
		t.Fatalf("setup: expected a move; got %s %q", d.Action, d.Blocked)
	}
	// Every engine moved at t0 (the others by an earlier controller).
	for _, e := range a.Engines() {
		e.LastMoveNs = t0
		if err := a.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := SaveState(path, a.State()); err != nil {
		t.Fatal(err)
	}
	st, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	b := restoredPeer(t, cfg, a, st)
	ra, rb := a.Roles(), b.Roles()
	if !equalStrings(ra.Prefill, rb.Prefill) || !equalStrings(ra.Decode, rb.Decode) {
		t.Fatalf("roles flapped across restart; got %v/%v; want %v/%v", rb.Prefill, rb.Decode, ra.Prefill, ra.Decode)
	}
	if d := b.Step(t0+5*sec, in); d.Blocked != GateCooldown {
		t.Fatalf("cooldown lost across restart; got %s %q (%s)", d.Action, d.Blocked, d.Reason)
	}
	if d := b.Step(t0+40*sec, in); d.Blocked != GateDwell {
		t.Fatalf("dwell lost across restart; got %s %q", d.Action, d.Blocked)
	}
	if d := b.Step(t0+121*sec, in); d.Action != ActionMove {
		t.Fatalf("expected a move after dwell; got %s %q", d.Action, d.Blocked)
	}
	if b.seq <= st.Seq {
		t.Fatalf("journal sequence restarted: %d after %d", b.seq, st.Seq)
	}
}

// restoredPeer is a new controller with cfg restored from st, whose
// agents re-report a's engines without roles or move times (a restart,
// or a new leader).
func restoredPeer(t *testing.T, cfg Config, a *Controller, st PersistedState) *Controller {
	t.Helper()
	b, err := New(cfg, testTiming(), BuiltinProfiles())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	for _, e := range a.Engines() {
		e.Role, e.LastMoveNs = RoleNone, 0
		if err := b.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDemandEvidence: acceptance 8.
func TestDemandEvidence(t *testing.T) {
	cfg := testConfig()
	cfg.CooldownS = 30
	cfg.MinEvidenceArrivals = 10
	c := newTestController(t, cfg, 4, 4)
	arr, err := buckets.NewHistory(sec, 60*sec)
	if err != nil {
		t.Fatal(err)
	}
	// A decode-pressure risk at t0-20.5 s (restored), so the cutoff lies in
	// the middle of bucket [t0-21, t0-20).
	riskAt := t0 - 20*sec - sec/2
	if err := c.Restore(PersistedState{Version: stateVersion, LastMoveNs: t0 - 5*sec, Risks: []riskEvent{{AtNs: riskAt, Kind: "decode_pressure"}}}); err != nil {
		t.Fatal(err)
	}
	// 20 req/s for 59 s (one per 50 ms).
	for ts := t0 - 59*sec; ts < t0; ts += 50e6 {
		arr.Record(ts, buckets.Shape{Input: 1024, Output: 16})
	}
	// Invalidate bucket [t0-15, t0-14): fill its 128 cells, overflow one
	// observation and reprice it out of the cohort.
	inv := t0 - 15*sec
	for i := int64(0); i < 130; i++ {
		arr.Record(inv+1e6, buckets.Shape{Input: 2000 + i, Output: 1})
	}
	_, w := arr.Window(inv, inv+sec-1, nil)
	if w.Overflow.Count == 0 || !arr.Reprice(inv+1e6, buckets.Shape{Input: w.Overflow.MaxInput, Output: 1}, buckets.Shape{Input: 1024, Output: 16}) {
		t.Fatal("setup: reprice failed")
	}
	d := c.Step(t0, Inputs{Arrivals: arr, Outputs: &fakeHistory{}})
	if d.Blocked != GateCooldown || d.DemandEvidence == nil {
		t.Fatalf("expected a decode->prefill move blocked by cooldown with evidence; got %s %q %+v", d.Action, d.Blocked, d.DemandEvidence)
	}
	ev := d.DemandEvidence
	// Counted: buckets wholly after the cutoff: [t0-20, t0), minus the
	// invalid one = 19 buckets of 20 arrivals; the straddling bucket
	// [t0-21, t0-20) and the invalid bucket are not counted.
	if ev.Arrivals != 19*20 || ev.SpanS != 20 {
		t.Fatalf("unexpected evidence counts; got arrivals %d span %v; want 380, 20", ev.Arrivals, ev.SpanS)
	}
	if ev.BlockedGate != GateCooldown || ev.RiskKind != "decode_pressure" || ev.RiskAgeS != 20.5 || ev.RiskEvents != 1 ||
		ev.RequiredSpanS != 10 || ev.RequiredArrivals != 10 || ev.MaxSpanS != 60 || !ev.Closed || ev.TrendRatio == 0 ||
		ev.ShortDecodeEngines < 1 || ev.LongDecodeEngines < 1 || ev.EnvelopeDecodeEngines != max(ev.ShortDecodeEngines, ev.LongDecodeEngines) {
		t.Fatalf("unexpected evidence %+v", ev)
	}
	b, _ := json.Marshal(ev)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"span_s", "arrivals", "required_span_s", "required_arrivals", "max_span_s", "closed", "risk_kind", "risk_age_s", "risk_events", "short_decode_engines", "long_decode_engines", "trend_ratio", "envelope_decode_engines", "blocked_gate"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("demand_evidence lacks %s: %s", k, b)
		}
	}
	if len(m) != 14 {
		t.Fatalf("demand_evidence has %d fields; want 14: %s", len(m), b)
	}
	// Blocked before movement by the role floor: evidence still captured.
	cfg.MinDecodeEngines = 4
	c2 := newTestController(t, cfg, 4, 4)
	d = c2.Step(t0, Inputs{Arrivals: arr, Outputs: &fakeHistory{}})
	if d.Blocked != GateRoleFloors || d.DemandEvidence == nil || d.DemandEvidence.BlockedGate != GateRoleFloors {
		t.Fatalf("expected evidence on a floor-blocked decision; got %q %+v", d.Blocked, d.DemandEvidence)
	}
	_ = math.Inf
}

// TestFarOverPhaseStillRanksSplits: a phase far past its SLO in every
// split (a deep prefill backlog, or offered load beyond any split's
// capacity) still ranks the splits by how much of the deficit they
// remove: no tie at a cap, no tie at saturation, so the controller moves
// toward it while the donor keeps source_limit of headroom.
func TestFarOverPhaseStillRanksSplits(t *testing.T) {
	// 10 s of prefill queued on every prefill engine: TTFT stays past
	// 2× the SLO with any number of prefill engines.
	in := Inputs{Arrivals: steady(1024, 16, 5), Outputs: &fakeHistory{}}
	c := newTestController(t, closedFormConfig(), 4, 4)
	setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: 10}, 66144)
	s := c.Snapshot(t0, in)
	for j := 0; j < s.MaxMoves()-1; j++ { // the last split has no decode engine
		a, b := s.Split(j), s.Split(j+1)
		if !(a.PrefillPressure > 2) || math.IsInf(a.PrefillPressure, 1) || !(b.Score < a.Score) {
			t.Fatalf("split %d→%d: prefill %v→%v score %v→%v; want finite > 2 and a strictly better score with more prefill", j, j+1, a.PrefillPressure, b.PrefillPressure, a.Score, b.Score)
		}
	}
	// The queue is measured (10 s per engine against a 0.25 s SLO): it
	// confirms the deficit, so one decision moves several engines.
	if d := c.Step(t0, in); d.Action != ActionMove || len(d.Moves) < 2 || d.Moves[0].To != RolePrefill {
		t.Fatalf("past 2× the SLO with a measured queue: got %s %q (%s); want a multi-engine decode->prefill move", d.Action, d.Blocked, d.Reason)
	}
	// Offered prefill beyond every split's capacity: finite, ordered.
	sat := newTestController(t, closedFormConfig(), 4, 4).Snapshot(t0, Inputs{Arrivals: steady(2048, 16, 400), Outputs: &fakeHistory{}})
	for j := 0; j < sat.MaxMoves()-1; j++ {
		a, b := sat.Split(j), sat.Split(j+1)
		if math.IsInf(a.PrefillPressure, 1) || !(a.PrefillPressure > 2) || !(b.PrefillPressure < a.PrefillPressure) {
			t.Fatalf("saturated split %d→%d: prefill %v→%v; want finite past 2, strictly decreasing", j, j+1, a.PrefillPressure, b.PrefillPressure)
		}
	}
}

// TestLargeDeficitMovesSeveral: with measured latencies confirming the
// destination is past its SLO, one decision moves up to
// max_moves_per_step engines toward the best split; without that
// confirmation (a prediction alone, however far past the SLO and from
// however many arrivals) it moves one.
func TestLargeDeficitMovesSeveral(t *testing.T) {
	in := Inputs{Arrivals: steady(1024, 16, 60), Outputs: &fakeHistory{}} // prefill needs most engines; 600 arrivals in 10 s
	cfg := testConfig()
	cfg.MinEvidenceArrivals = 10
	c := newTestController(t, cfg, 2, 6)
	best, cur := c.Snapshot(t0, in).Best()
	if best.Moves < 3 || !(cur.PrefillPressure > 10) {
		t.Fatalf("setup: best split %d moves, prefill pressure %v; want >= 3 moves past 10", best.Moves, cur.PrefillPressure)
	}
	want := min(best.Moves, cfg.MaxMovesPerStep)
	if d := c.Step(t0, in); d.Action != ActionMove || len(d.Moves) != 1 {
		t.Fatalf("unconfirmed deficit: got %s %d moves (%s); want 1 move", d.Action, len(d.Moves), d.Reason)
	}
	// Measured latencies confirm the deficit.
	in.ObservedPrefill = PhaseObservation{Count: 100, Mean: 3, Max: 5}
	c = newTestController(t, cfg, 2, 6)
	d := c.Step(t0, in)
	if d.Action != ActionMove || len(d.Moves) != want || d.Proposed == nil || d.Proposed.Moves != want {
		t.Fatalf("confirmed deficit: got %s %d moves (%s); want %d", d.Action, len(d.Moves), d.Reason, want)
	}
	seen := map[string]bool{}
	for _, m := range d.Moves {
		if m.From != RoleDecode || m.To != RolePrefill || seen[m.EngineID] {
			t.Fatalf("bad move set %+v", d.Moves)
		}
		seen[m.EngineID] = true
	}
	if got := len(c.Roles().Decode); got != 6-want {
		t.Fatalf("decode engines serving after the move: %d; want %d", got, 6-want)
	}
	cfg.MaxMovesPerStep = 1
	c = newTestController(t, cfg, 2, 6)
	if d := c.Step(t0, in); len(d.Moves) != 1 {
		t.Fatalf("max_moves_per_step 1: got %d moves", len(d.Moves))
	}
}

// TestInfeasibleRequestsDoNotDriveTTFT: requests whose own prefill exceeds
// the TTFT SLO load the engines but do not set the predicted TTFT.
func TestInfeasibleRequestsDoNotDriveTTFT(t *testing.T) {
	c := newTestController(t, testConfig(), 4, 4)
	mixed := &fakeHistory{cells: []buckets.Cell{{Shape: buckets.Shape{Input: 512, Output: 16}}, {Shape: buckets.Shape{Input: 4000, Output: 16}}}, perS: []float64{4, 0.2}}
	s := c.Snapshot(t0, Inputs{Arrivals: mixed})
	if sh := s.Long.FeasibleShare; math.Abs(sh-4/4.2) > 1e-9 || s.Long.FeasibleMeanInput != 512 {
		t.Fatalf("unexpected feasible share %v / mean %v", sh, s.Long.FeasibleMeanInput)
	}
	p := &s.Profiles[s.refProfile]
	own := p.Prefill.Seconds(512) / 0.25
	got := s.Split(0).LongPrefill
	if got < own || got > 2*own {
		t.Fatalf("prefill pressure %v should be near the feasible requests' own %v, not the 4000-token prompts'", got, own)
	}
}

// TestDecodeLoadCorrection: with enough resident sequences per decode
// engine, observed TPOT calibrates the per-sequence part of the decode
// step (exact numbers), and the plain TPOT multiplier stays 1; with few
// sequences the multiplier applies as before.
func TestDecodeLoadCorrection(t *testing.T) {
	in := Inputs{Arrivals: steady(256, 512, 5), Outputs: &fakeHistory{}, ObservedDecode: PhaseObservation{Count: 50, Mean: 0.4, Max: 0.5}}
	setup := func(seqs int64) (*Controller, *Profile) {
		c := newTestController(t, testConfig(), 4, 4)
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: seqs, KVTokens: seqs * 600}, 66144)
		ps := BuiltinProfiles()
		i, ok := ps.Lookup("facebook/opt-13b", "A100-80GB")
		if !ok {
			t.Fatal("no opt-13b profile")
		}
		return c, &ps.Profiles[i]
	}
	c, p := setup(32)
	s := c.Snapshot(t0, in)
	step := p.Decode.StepSeconds(32, 32*600)
	want := max(0.5, min(2, (0.4*0.1-p.Decode.A)/(step-p.Decode.A)))
	if math.Abs(s.DecodeLoadCorrection-want) > 1e-12 || s.DecodeCorrection != 1 {
		t.Fatalf("load correction %v (multiplier %v); want %v (1)", s.DecodeLoadCorrection, s.DecodeCorrection, want)
	}
	if want == 0.5 || want == 2 {
		t.Fatalf("setup: correction %v sits on a clamp; the test would not check the formula", want)
	}
	c, p = setup(4)
	s = c.Snapshot(t0, in)
	want = max(0.5, min(2, 0.4*0.1/p.Decode.StepSeconds(4, 4*600)))
	if s.DecodeLoadCorrection != 1 || math.Abs(s.DecodeCorrection-want) > 1e-12 {
		t.Fatalf("few sequences: load correction %v, multiplier %v; want 1, %v", s.DecodeLoadCorrection, s.DecodeCorrection, want)
	}
}

// TestDeliveredRate: a decode pool receives the offered rate plus the
// resident prefill backlog drained over the horizon, capped at what the
// split's prefill pool serves; nothing without a prefill pool.
func TestDeliveredRate(t *testing.T) {
	h := &HorizonDemand{RatePerS: 30, SpanS: 10}
	cases := []struct {
		nP          int
		mu, backlog float64
		want        float64
	}{
		{4, 40, 0, 30},   // prefill keeps up: the offered rate
		{4, 20, 0, 20},   // prefill saturated: what it serves
		{4, 40, 10, 40},  // 30 + 10 s × (40/4)/s / 10 s = 40: at the cap
		{4, 100, 10, 55}, // 30 + 10 × 25 / 10
		{0, 40, 0, 0},
		{4, 0, 0, 0},
	}
	for _, c := range cases {
		if got := deliveredRate(h, c.nP, c.mu, c.backlog); got != c.want {
			t.Errorf("deliveredRate(n=%d, mu=%v, backlog=%v) = %v; want %v", c.nP, c.mu, c.backlog, got, c.want)
		}
	}
}

// TestKVCorrection: with at least 16 resident sequences per decode
// engine, predicted KV is scaled by resident / predicted at the current
// split, clamped to [0.5, 1]; below that residency it is 1. A pool whose
// resident KV is past target_pressure (0.8) of its capacity and above
// the prediction is scaled up to resident / predicted, at most 3, at any
// residency (kvBound cases: capacity = resident / 0.9).
func TestKVCorrection(t *testing.T) {
	in := Inputs{Arrivals: steady(1024, 256, 20), Outputs: &fakeHistory{}}
	c := newTestController(t, closedFormConfig(), 4, 4)
	raw := c.Snapshot(t0, in)
	pred := raw.Split(0).kvPred
	if raw.KVCorrection != 1 || !(pred > 0) {
		t.Fatalf("no residency: correction %v, prediction %v; want 1 and > 0", raw.KVCorrection, pred)
	}
	for _, tc := range []struct {
		seqs    int64
		share   float64 // resident KV as a share of the prediction
		kvBound bool    // resident KV at 90 % of capacity (else 1<<30 tokens each)
		want    float64
	}{
		{16, 0.7, false, 0.7}, {16, 0.1, false, 0.5}, {16, 3, false, 1}, {15, 0.7, false, 1},
		{4, 2, true, 2}, {16, 2.5, true, 2.5}, {16, 5, true, 3}, {16, 0.7, true, 0.7}, {4, 0.7, true, 1},
	} {
		c := newTestController(t, closedFormConfig(), 4, 4)
		for _, e := range c.Engines() {
			if e.Role == RoleDecode {
				kv := int64(math.Round(tc.share * pred / 4))
				capTok := int64(1 << 30)
				if tc.kvBound {
					capTok = int64(math.Round(float64(kv) / 0.9))
				}
				if err := c.UpdateEngine(e.ID, t0, Resident{DecodeSeqs: tc.seqs, KVTokens: kv}, capTok, true); err != nil {
					t.Fatal(err)
				}
			}
		}
		s := c.Snapshot(t0, in)
		if math.Abs(s.KVCorrection-tc.want) > 1e-3 {
			t.Errorf("%d seqs, resident %v × predicted (KV-bound %v): correction %v; want %v", tc.seqs, tc.share, tc.kvBound, s.KVCorrection, tc.want)
		}
		if got := s.Split(0).KVNeedTokens; tc.want < 1 && math.Abs(got-max(s.ResidentDecodeKV, tc.want*pred)) > 1 {
			t.Errorf("%d seqs: KV need %v; want %v", tc.seqs, got, max(s.ResidentDecodeKV, tc.want*pred))
		}
	}
}

// TestRestoredRoleWinsOverRegisteredRole: an engine re-registered after a
// restart with its configured (initial) role keeps the role the saved
// state gives it, whether it was registered before or after Restore.
func TestRestoredRoleWinsOverRegisteredRole(t *testing.T) {
	st := PersistedState{Version: 1, Engines: []PersistedEngine{
		{ID: "late", Role: RoleDecode, LastMoveNs: t0},
		{ID: "early", Role: RoleDecode, LastMoveNs: t0},
	}}
	c, err := New(testConfig(), testTiming(), BuiltinProfiles())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UpsertEngine(Engine{ID: "early", Role: RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := c.UpsertEngine(Engine{ID: "late", Role: RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"early", "late"} {
		if got := c.Roles().RoleOf(id); got != RoleDecode {
			t.Errorf("engine %s: role %s after restore and re-registration as prefill; want decode (the saved role)", id, got)
		}
	}
	for _, e := range c.Engines() {
		if e.LastMoveNs != t0 {
			t.Errorf("engine %s: last move %d; want the saved %d", e.ID, e.LastMoveNs, t0)
		}
	}
	// Once restored, a later registration with a role is an update as usual.
	if err := c.UpsertEngine(Engine{ID: "late", Role: RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	if got := c.Roles().RoleOf("late"); got != RolePrefill {
		t.Errorf("engine late: role %s after a second registration as prefill; want prefill", got)
	}
}

// TestRestoredRolesOfAbsentEnginesExpire: a saved role that no engine has
// claimed an hour after the first step that follows the Restore is
// dropped from the state (which would otherwise keep every pod that died
// around a restart or a failover, and outgrow its ConfigMap); one claimed
// in time is applied; a second Restore starts the hour again.
func TestRestoredRolesOfAbsentEnginesExpire(t *testing.T) {
	ids := func(st PersistedState) []string {
		var out []string
		for _, e := range st.Engines {
			out = append(out, e.ID)
		}
		return out
	}
	st := PersistedState{Version: 1, Engines: []PersistedEngine{
		{ID: "back", Role: RoleDecode, LastMoveNs: t0},
		{ID: "gone", Role: RoleDecode, LastMoveNs: t0},
	}}
	c := newTestController(t, testConfig(), 1, 1)
	if err := c.Restore(st); err != nil {
		t.Fatal(err)
	}
	c.Step(t0+sec, Inputs{})
	if err := c.UpsertEngine(Engine{ID: "back", Role: RolePrefill, Live: true}); err != nil {
		t.Fatal(err)
	}
	if got := c.Roles().RoleOf("back"); got != RoleDecode {
		t.Fatalf("engine back: role %s; want the saved decode", got)
	}
	c.Step(t0+sec+3599*sec, Inputs{})
	if got := ids(c.State()); !slices.Contains(got, "gone") {
		t.Fatalf("state 3599 s after the first step lacks the saved engine gone: %v", got)
	}
	c.Step(t0+sec+3600*sec, Inputs{})
	if got := ids(c.State()); slices.Contains(got, "gone") || !slices.Contains(got, "back") {
		t.Fatalf("state an hour after the first step: %v; want back and not gone", got)
	}
	// A new Restore (a new term) keeps its entries for an hour from its
	// own first step.
	if err := c.Restore(st); err != nil {
		t.Fatal(err)
	}
	c.Step(t0+2*3600*sec, Inputs{})
	c.Step(t0+3*3600*sec-sec, Inputs{})
	if got := ids(c.State()); !slices.Contains(got, "gone") {
		t.Fatalf("state within the hour of the second restore lacks gone: %v", got)
	}
	c.Step(t0+3*3600*sec, Inputs{})
	if got := ids(c.State()); slices.Contains(got, "gone") {
		t.Fatalf("state an hour after the second restore's first step still has gone: %v", got)
	}
}

// A state saved by a leader whose clock ran ten minutes ahead of this
// one (or a clock that stepped back ten minutes): cooldown and dwell run
// from this controller's first step, not from the saved times, so the
// next move comes 121 s after it as in TestRestartKeepsCooldownDwellAndRoles
// rather than ten minutes later (the evidence cutoff likewise: 40 s of
// arrivals close it).
func TestRestoreFromAClockAheadWaitsFromNowNotForTheSkew(t *testing.T) {
	cfg := testConfig()
	cfg.CooldownS, cfg.DwellS = 30, 120
	a := newTestController(t, cfg, 3, 4)
	in := Inputs{Arrivals: steady(1024, 16, 30), Outputs: &fakeHistory{}}
	if d := a.Step(t0, in); d.Action != ActionMove {
		t.Fatalf("setup: expected a move; got %s %q", d.Action, d.Blocked)
	}
	for _, e := range a.Engines() {
		e.LastMoveNs = t0
		if err := a.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
	b := restoredPeer(t, cfg, a, a.State())
	behind := t0 - 600*sec // b's clock
	// The saved move and risk event, ten minutes ahead, are read as now:
	// cooldown counts from 0 s, and consolidation evidence from this step.
	d := b.Step(behind, in)
	for _, g := range d.Gates {
		if (g.Gate == GateCooldown || g.Gate == GateDemandEvidence) && (g.Pass || g.Value != 0) {
			t.Fatalf("first step: %s pass %v value %v; want held at 0", g.Gate, g.Pass, g.Value)
		}
	}
	if d := b.Step(behind+40*sec, in); d.Blocked != GateDwell {
		t.Fatalf("at 40 s: %s %q; want held by dwell (cooldown over)", d.Action, d.Blocked)
	}
	if d := b.Step(behind+121*sec, in); d.Action != ActionMove {
		t.Fatalf("at 121 s: %s %q; want a move (dwell over), not a wait for the skew", d.Action, d.Blocked)
	}
	for _, e := range b.Engines() {
		if e.LastMoveNs > behind+121*sec {
			t.Fatalf("engine %s last move %d s after the step", e.ID, (e.LastMoveNs-behind-121*sec)/sec)
		}
	}
}

// Restore refuses a state that LoadState would refuse, whole: the error
// names the field and nothing is applied (sequence, roles, cooldown).
func TestRestoreRefusesAnInvalidStateAndChangesNothing(t *testing.T) {
	cfg := testConfig()
	c := newTestController(t, cfg, 3, 4)
	before := c.Roles()
	good := PersistedState{Version: stateVersion, Seq: 50, LastMoveNs: t0,
		Engines: []PersistedEngine{{ID: "e0", Role: RoleDecode, LastMoveNs: t0}}}
	for name, mod := range map[string]func(*PersistedState){
		"empty engine id":     func(s *PersistedState) { s.Engines = append(s.Engines, PersistedEngine{ID: "", Role: RolePrefill}) },
		"repeated engine":     func(s *PersistedState) { s.Engines = append(s.Engines, s.Engines[0]) },
		"negative last move":  func(s *PersistedState) { s.LastMoveNs = -1 },
		"confirm past seq":    func(s *PersistedState) { s.Confirm = PersistedConfirm{Dir: 1, Count: 2, Seq: 51} },
		"confirm direction 3": func(s *PersistedState) { s.Confirm = PersistedConfirm{Dir: 3, Count: 1, Seq: 50} },
		"negative risk time":  func(s *PersistedState) { s.Risks = []riskEvent{{AtNs: -5, Kind: "decode_pressure"}} },
	} {
		st := good
		st.Engines = append([]PersistedEngine(nil), good.Engines...)
		mod(&st)
		err := c.Restore(st)
		if !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%s: Restore gave %v; want ErrInvalidState", name, err)
		}
		if got := c.State(); got.Seq != 0 || got.LastMoveNs != 0 {
			t.Fatalf("%s: state changed to seq %d, last move %d; want nothing applied", name, got.Seq, got.LastMoveNs)
		}
		if r := c.Roles(); !equalStrings(r.Prefill, before.Prefill) || !equalStrings(r.Decode, before.Decode) {
			t.Fatalf("%s: roles changed to %v/%v", name, r.Prefill, r.Decode)
		}
	}
	if err := c.Restore(good); err != nil {
		t.Fatalf("the valid state: %v", err)
	}
	if got := c.State(); got.Seq != 50 || got.LastMoveNs != t0 {
		t.Fatalf("valid state applied as seq %d, last move %d; want 50, t0", got.Seq, got.LastMoveNs)
	}
}
