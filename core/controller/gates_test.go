package controller

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// d2p is the baseline decode-to-prefill scenario: 4 prefill, 4 decode
// OPT-13B engines and 20 req/s of 1024-token prompts with 16 output
// tokens; prefill pressure ≈ 1.0, decode ≈ 0.2, so one decode engine
// moves to prefill.
func d2pInputs() Inputs {
	return Inputs{Arrivals: steady(1024, 16, 20), Outputs: &fakeHistory{}}
}

const t0 = 1000 * sec

func onlyFailing(t *testing.T, d Decision) []string {
	t.Helper()
	var f []string
	for _, g := range d.Gates {
		if !g.Pass {
			f = append(f, g.Gate)
		}
	}
	return f
}

func TestBaselineMoves(t *testing.T) {
	c := newTestController(t, closedFormConfig(), 4, 4)
	d := c.Step(t0, d2pInputs())
	if d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].From != RoleDecode || d.Moves[0].To != RolePrefill {
		t.Fatalf("unexpected decision; got %s %+v blocked %q; want one decode->prefill move", d.Action, d.Moves, d.Blocked)
	}
	if got := len(d.Gates); got != len(Gates) {
		t.Fatalf("unexpected gate count; got %d; want %d", got, len(Gates))
	}
	if f := onlyFailing(t, d); len(f) != 0 {
		t.Fatalf("unexpected failing gates %v", f)
	}
	tb := c.Roles()
	if len(tb.Prefill) != 5 || len(tb.Decode) != 3 || tb.RoleOf(d.Moves[0].EngineID) != RolePrefill {
		t.Fatalf("unexpected role table after dry-run move; got %v / %v", tb.Prefill, tb.Decode)
	}
	// Prefill-to-decode in the other mix.
	c2 := newTestController(t, closedFormConfig(), 4, 4)
	d = c2.Step(t0, Inputs{Arrivals: steady(256, 512, 15), Outputs: &fakeHistory{}})
	if d.Action != ActionMove || d.Moves[0].From != RolePrefill {
		t.Fatalf("unexpected decision; got %s %+v; want a prefill->decode move", d.Action, d.Moves)
	}
}

// TestEachGateBlocksAlone: acceptance 1.
func TestEachGateBlocksAlone(t *testing.T) {
	type setup struct {
		gate string
		mod  func(cfg *Config)
		prep func(t *testing.T, c *Controller, in *Inputs)
	}
	cases := []setup{
		{gate: GateRoleFloors, mod: func(cfg *Config) { cfg.MinDecodeEngines = 4 }},
		{gate: GateLiveAvailability, prep: func(t *testing.T, c *Controller, in *Inputs) {
			if err := c.UpsertEngine(Engine{ID: "x-draining", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill, State: StateDraining, TargetRole: RoleDecode, Live: true}); err != nil {
				t.Fatal(err)
			}
		}},
		{gate: GateSourcePressure, mod: func(cfg *Config) { cfg.SourceLimit = 0.2 }},
		{gate: GateKVLimit, mod: func(cfg *Config) { cfg.KVHeadroom = 0.03 }},
		{gate: GateDemandEvidence, prep: func(t *testing.T, c *Controller, in *Inputs) {
			in.Arrivals.(*fakeHistory).ev = buckets.Evidence{SpanNs: 30 * sec, Observations: 5, Buckets: 30}
		}},
		{gate: GateCooldown, mod: func(cfg *Config) { cfg.CooldownS = 30 }, prep: func(t *testing.T, c *Controller, in *Inputs) {
			if err := c.Restore(PersistedState{Version: stateVersion, LastMoveNs: t0 - 10*sec}); err != nil {
				t.Fatal(err)
			}
		}},
		{gate: GateDwell, mod: func(cfg *Config) { cfg.DwellS = 60 }, prep: func(t *testing.T, c *Controller, in *Inputs) {
			for _, e := range c.Engines() {
				if e.Role == RoleDecode {
					e.LastMoveNs = t0 - 10*sec
					if err := c.UpsertEngine(e); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{gate: GateProfileCoverage, prep: func(t *testing.T, c *Controller, in *Inputs) {
			// A profile whose prefill fit stops short of the prompts seen
			// (an engine without any profile moves on observed pressure:
			// TestUnprofiledMovesOnObservedPressure).
			short := c.profiles.Profiles[0]
			short.Model, short.Aliases = "short-profile-model", nil
			short.Prefill.MaxInput = 1
			c.profiles.Profiles = append(c.profiles.Profiles, short)
			for _, e := range c.Engines() {
				if e.Role == RoleDecode {
					e.Model = "short-profile-model"
					if err := c.UpsertEngine(e); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{gate: GateConfirmation, mod: func(cfg *Config) { cfg.ConfirmSteps = 2 }},
	}
	if len(cases) != len(Gates) {
		t.Fatalf("BUG: %d cases for %d gates", len(cases), len(Gates))
	}
	for _, tc := range cases {
		t.Run(tc.gate, func(t *testing.T) {
			cfg := testConfig()
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			c := newTestController(t, cfg, 4, 4)
			in := d2pInputs()
			if tc.prep != nil {
				tc.prep(t, c, &in)
			}
			d := c.Step(t0, in)
			if d.Action != ActionBlocked || d.Blocked != tc.gate {
				t.Fatalf("unexpected decision; got %s blocked %q (%s); want blocked by %s", d.Action, d.Blocked, d.Reason, tc.gate)
			}
			if f := onlyFailing(t, d); len(f) != 1 || f[0] != tc.gate {
				t.Fatalf("unexpected failing gates; got %v; want only %s", f, tc.gate)
			}
			if d.DemandEvidence == nil || d.DemandEvidence.BlockedGate != tc.gate {
				t.Fatalf("decode-to-prefill decision must carry demand_evidence naming %s; got %+v", tc.gate, d.DemandEvidence)
			}
			if len(c.Roles().Decode) != 4 {
				t.Fatalf("a blocked decision moved an engine: %v", c.Roles().Decode)
			}
			if tc.gate == GateConfirmation {
				d = c.Step(t0+sec, in)
				if d.Action != ActionMove {
					t.Fatalf("second consecutive step should move; got %s %q", d.Action, d.Blocked)
				}
			}
		})
	}
}

// TestReversalNeedsMoreConfirmations: a move that reverses the last
// move's direction is confirmed over reversal_confirm_steps steps, the
// same direction over confirm_steps; the last direction survives a
// restart.
func TestReversalNeedsMoreConfirmations(t *testing.T) {
	cfg := closedFormConfig()
	cfg.ConfirmSteps, cfg.ReversalConfirmSteps = 1, 4
	c := newTestController(t, cfg, 4, 4)
	if d := c.Step(t0, d2pInputs()); d.Action != ActionMove || d.Moves[0].To != RolePrefill {
		t.Fatalf("first move: got %s %q", d.Action, d.Blocked)
	}
	st := c.State()
	if st.LastMoveDir != 1 {
		t.Fatalf("saved last_move_dir %d; want 1", st.LastMoveDir)
	}
	decodeHeavy := Inputs{Arrivals: steady(256, 512, 15), Outputs: &fakeHistory{}}
	run := func(c *Controller, from int64) int {
		t.Helper()
		for i := 1; i <= 10; i++ {
			d := c.Step(from+int64(i)*sec, decodeHeavy)
			if d.Action == ActionMove {
				if d.Moves[0].To != RoleDecode {
					t.Fatalf("wrong direction %+v", d.Moves[0])
				}
				return i
			}
			if d.Action == ActionBlocked && d.Blocked != GateConfirmation {
				t.Fatalf("step %d blocked by %s; want only confirmation", i, d.Blocked)
			}
		}
		return 0
	}
	if got := run(c, t0); got != 4 {
		t.Fatalf("reversal moved on step %d; want 4", got)
	}
	// Restart from the saved state (taken after the first move).
	c2 := newTestController(t, cfg, 0, 0)
	if err := c2.Restore(st); err != nil {
		t.Fatal(err)
	}
	addEngines(t, c2, 5, 3)
	if got := run(c2, t0); got != 4 {
		t.Fatalf("after restart the reversal moved on step %d; want 4", got)
	}
	// Same direction again: confirm_steps (1) suffices.
	if got := run(c2, t0+100*sec); got != 1 {
		t.Fatalf("a repeated direction moved on step %d; want 1", got)
	}
}

// TestLiveAvailabilityConfirmedSameDirection: an engine already moving
// toward prefill does not block a measured prefill deficit (it is scored
// as prefill); an engine moving the other way still blocks. A measured
// prefill queue confirms in full, the engines in flight not counted: 4 ×
// 0.3 s queued over 4 engines × 0.25 s is 1.2 (0.96 over 5, yet the queue
// grows until the mover lands): it moves.
func TestLiveAvailabilityConfirmedSameDirection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target Role
		queued float64
		want   bool
	}{{"toward the destination", RolePrefill, 2, true}, {"away from it", RoleDecode, 2, false},
		{"toward it, a queue past the SLO without it", RolePrefill, 0.3, true}} {
		cfg := closedFormConfig()
		cfg.DrainCostWeight = 1 // moving the queued prefill engines away is no way out
		c := newTestController(t, cfg, 4, 4)
		from := RoleDecode
		if tc.target == RoleDecode {
			from = RolePrefill
		}
		if err := c.UpsertEngine(Engine{ID: "x-moving", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: from, State: StateDraining, TargetRole: tc.target, Live: true}); err != nil {
			t.Fatal(err)
		}
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: tc.queued}, 66144)
		d := c.Step(t0, Inputs{Arrivals: steady(1024, 16, 5), Outputs: &fakeHistory{}})
		if tc.target == RolePrefill && d.Best.PrefillEngines <= d.Current.PrefillEngines {
			t.Fatalf("%s: want a best split toward prefill; got current %+v best %+v", tc.name, d.Current, d.Best)
		}
		moved := d.Action == ActionMove && len(d.Moves) > 0 && d.Moves[0].To == RolePrefill
		if moved != tc.want || (!tc.want && d.Blocked != GateLiveAvailability) {
			t.Fatalf("%s: got %s %q (%s); want move=%v cur %+v best %+v", tc.name, d.Action, d.Blocked, d.Reason, tc.want, d.Current, d.Best)
		}
	}
}

// TestInFlightEnginesDiscountTheConfirmation: a decode latency measured
// while an engine is still moving to decode confirms only the deficit
// that engine leaves: the observed TPOT ratio is rescaled from the 2
// serving decode engines to the 3 there will be (×2/3). At 1.4 (0.93
// once the mover lands) the deficit is not confirmed, so live_availability
// holds every further move until the mover lands; at 1.6 (1.07) it is,
// and more engines follow. Without the mover, 1.4 confirms as before.
func TestInFlightEnginesDiscountTheConfirmation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mover  bool
		obs    float64
		moved  bool
		minMov int
	}{
		{"1.4 with one in flight: 0.93", true, 1.4, false, 0},
		{"1.6 with one in flight: 1.07", true, 1.6, true, 2},
		{"1.4 with none in flight", false, 1.4, true, 2},
	} {
		c := newTestController(t, testConfig(), 5, 2)
		if tc.mover {
			if err := c.UpsertEngine(Engine{ID: "x-moving", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill, State: StateDraining, TargetRole: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
		} else {
			addEngines(t, c, 0, 0)
			if err := c.UpsertEngine(Engine{ID: "x-serving", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill, Live: true, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
		}
		obs := PhaseObservation{Count: 100, Mean: tc.obs, Max: tc.obs}
		d := c.Step(t0, Inputs{Arrivals: steady(256, 512, 30), Outputs: &fakeHistory{}, ObservedDecode: obs})
		if d.Best.DecodeEngines-d.Current.DecodeEngines < 2 {
			t.Fatalf("%s: want a best split at least 2 engines toward decode; got current %+v best %+v", tc.name, d.Current, d.Best)
		}
		moved := d.Action == ActionMove && len(d.Moves) > 0 && d.Moves[0].To == RoleDecode
		if moved != tc.moved || len(d.Moves) < tc.minMov || (!tc.moved && d.Blocked != GateLiveAvailability) {
			t.Fatalf("%s: got %s %q (%s), %d moves; want moved=%v with at least %d (or blocked by live_availability)", tc.name, d.Action, d.Blocked, d.Reason, len(d.Moves), tc.moved, tc.minMov)
		}
	}
}

// TestMeasuredPrefillBacklogWaivesOpenEvidence: an open consolidation
// window (too few arrivals since the last risk) blocks a decode-to-prefill
// move predicted from demand alone, but not one backed by a prefill queue
// measured past the TTFT SLO: then one engine moves, and the decision still
// carries its demand_evidence (closed false, nothing blocked).
func TestMeasuredPrefillBacklogWaivesOpenEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued float64 // per prefill engine, seconds (TTFT SLO 0.25 s)
		move   bool
	}{{"no measured queue", 0, false}, {"queue under the SLO", 0.2, false}, {"queue past the SLO", 0.5, true}} {
		c := newTestController(t, testConfig(), 4, 4)
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: tc.queued}, 66144)
		in := d2pInputs()
		in.Arrivals.(*fakeHistory).ev = buckets.Evidence{SpanNs: 30 * sec, Observations: 5, Buckets: 30}
		d := c.Step(t0, in)
		if d.DemandEvidence == nil || d.DemandEvidence.Closed {
			t.Fatalf("%s: want open demand_evidence on the decision; got %+v", tc.name, d.DemandEvidence)
		}
		if tc.move {
			if d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].To != RolePrefill || d.DemandEvidence.BlockedGate != "" {
				t.Fatalf("%s: got %s %q %+v; want one decode->prefill move", tc.name, d.Action, d.Blocked, d.Moves)
			}
			continue
		}
		if d.Action != ActionBlocked || d.Blocked != GateDemandEvidence {
			t.Fatalf("%s: got %s %q (%s); want blocked by %s", tc.name, d.Action, d.Blocked, d.Reason, GateDemandEvidence)
		}
	}
}

// TestMeasuredDecodeKVConfirmsDeficit: a prefill-to-decode move may take
// several engines when the decode pool's resident KV is measured past the
// target pressure of its capacity, although no TPOT has been observed past
// the SLO; with the same demand and KV under the target it moves one.
func TestMeasuredDecodeKVConfirmsDeficit(t *testing.T) {
	moved := map[bool]int{}
	for _, full := range []bool{false, true} {
		c := newTestController(t, closedFormConfig(), 6, 2)
		kv := int64(33072) // 0.5 of 66144
		if full {
			kv = 56222 // 0.85 of 66144
		}
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 40, KVTokens: kv}, 66144)
		in := Inputs{Arrivals: steady(256, 512, 15), Outputs: &fakeHistory{}}
		d := c.Step(t0, in)
		if d.Action != ActionMove || d.Direction != "prefill_to_decode" {
			t.Fatalf("KV full %v: got %s %q (%s) best %+v; want a prefill->decode move", full, d.Action, d.Blocked, d.Reason, d.Best)
		}
		if d.Best.Moves > -2 {
			t.Fatalf("KV full %v: best split %d moves away; the scenario needs at least 2", full, d.Best.Moves)
		}
		moved[full] = len(d.Moves)
	}
	if moved[false] != 1 || moved[true] < 2 {
		t.Fatalf("engines moved: KV under the target %d (want 1), past it %d (want >= 2)", moved[false], moved[true])
	}
}

// TestKVExhaustionProjectedMovesDecode: with both phases within target
// pressure, a decode pool whose resident KV grew from 20 % to 55 % of its
// capacity in 5 s (projected past kv_headroom within kv_lead_s) gets
// engines from prefill at once, several of them; the same 55 % held flat,
// or with kv_lead_s 0, is left alone.
func TestKVExhaustionProjectedMovesDecode(t *testing.T) {
	const capTok = 66144
	run := func(t *testing.T, lead float64, first, second int64) Decision {
		t.Helper()
		return runKVRamp(t, lead, []int64{first, second}, 5*sec)
	}
	d := run(t, 15, capTok/5, capTok*55/100)
	if d.Action != ActionMove || d.Direction != "prefill_to_decode" || !d.KVExhaustion || len(d.Moves) < 2 {
		t.Fatalf("growing KV: got %s %q (%s) kv_exhaustion %v moves %d; want several prefill->decode moves (current %+v)",
			d.Action, d.Blocked, d.Reason, d.KVExhaustion, len(d.Moves), d.Current)
	}
	if max(d.Current.PrefillPressure, d.Current.DecodePressure) > closedFormConfig().TargetPressure {
		t.Fatalf("scenario: a phase is past target pressure (%+v); the move must come from the projection", d.Current)
	}
	for _, tc := range []struct {
		name          string
		lead          float64
		first, second int64
	}{{"flat KV", 15, capTok * 55 / 100, capTok * 55 / 100}, {"kv_lead_s 0", 0, capTok / 5, capTok * 55 / 100}} {
		if d := run(t, tc.lead, tc.first, tc.second); d.Action != ActionHold || d.KVExhaustion {
			t.Fatalf("%s: got %s %q (%s) kv_exhaustion %v; want a hold", tc.name, d.Action, d.Blocked, d.Reason, d.KVExhaustion)
		}
	}
}

// TestKVExhaustionProjectedAtSubSecondSteps: the same ramp seen by a
// controller stepping every 250 ms (21 steps over 5 s) is projected too:
// the KV history spans the 5 s slope whatever the step.
func TestKVExhaustionProjectedAtSubSecondSteps(t *testing.T) {
	const capTok = 66144
	var ramp []int64
	for i := 0; i <= 20; i++ {
		ramp = append(ramp, capTok/5+int64(i)*(capTok*35/100)/20)
	}
	d := runKVRamp(t, 15, ramp, sec/4)
	if d.Action != ActionMove || d.Direction != "prefill_to_decode" || !d.KVExhaustion {
		t.Fatalf("got %s %q (%s) kv_exhaustion %v; want a prefill->decode move from the projection", d.Action, d.Blocked, d.Reason, d.KVExhaustion)
	}
}

// runKVRamp steps a 6:2 controller with light decode-heavy demand once per
// stepNs, its decode engines reporting the given resident KV in turn
// (capacity 66144 each), and returns the last decision; every earlier one
// must hold.
func runKVRamp(t *testing.T, lead float64, kvs []int64, stepNs int64) Decision {
	t.Helper()
	cfg := closedFormConfig()
	cfg.KVLeadS = lead
	c := newTestController(t, cfg, 6, 2)
	in := Inputs{Arrivals: steady(256, 512, 2), Outputs: &fakeHistory{}}
	var d Decision
	for i, kv := range kvs {
		now := t0 + int64(i)*stepNs
		setResident(t, c, RoleDecode, now, Resident{DecodeSeqs: 20, KVTokens: kv}, 66144)
		d = c.Step(now, in)
		if i < len(kvs)-1 && d.Action != ActionHold {
			t.Fatalf("step %d: got %s %q (%s); want a hold (current %+v)", i, d.Action, d.Blocked, d.Reason, d.Current)
		}
	}
	return d
}

// TestMeasuredPrefillBacklogWaivesHysteresis: a move toward prefill whose
// score improvement is within the hysteresis margin is held, unless a
// prefill queue is measured past the TTFT SLO: then any improvement moves.
func TestMeasuredPrefillBacklogWaivesHysteresis(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued float64 // per prefill engine, seconds (TTFT SLO 0.25 s)
		move   bool
	}{{"no measured queue", 0, false}, {"queue past the SLO", 0.5, true}} {
		cfg := closedFormConfig()
		cfg.HysteresisMargin = 100 // every improvement is within it
		c := newTestController(t, cfg, 4, 4)
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: tc.queued}, 66144)
		d := c.Step(t0, d2pInputs())
		if !(d.Improvement > 0) {
			t.Fatalf("%s: scenario needs a positive improvement; got %v", tc.name, d.Improvement)
		}
		if tc.move && (d.Action != ActionMove || d.Direction != "decode_to_prefill") {
			t.Fatalf("%s: got %s %q (%s); want a decode->prefill move", tc.name, d.Action, d.Blocked, d.Reason)
		}
		if !tc.move && (d.Action != ActionHold || d.Reason != "improvement within hysteresis margin") {
			t.Fatalf("%s: got %s %q (%s); want a hold within the hysteresis margin", tc.name, d.Action, d.Blocked, d.Reason)
		}
	}
}

// TestOverflowedOutputsNeedMeasuredDecodeShortage: with overflow in the
// outputs history, decode is priced at requested outputs (an upper bound),
// so a move toward decode waits for a measurement: the same predicted
// deficit holds while observed TPOT and resident KV are within target, and
// moves once either is past it. With no outputs yet (nothing to learn
// from), the prediction alone still moves.
func TestOverflowedOutputsNeedMeasuredDecodeShortage(t *testing.T) {
	const capTok = 66144
	step := func(outputs *fakeHistory, kv int64, obs PhaseObservation) Decision {
		t.Helper()
		c := newTestController(t, testConfig(), 6, 2)
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 40, KVTokens: kv}, capTok)
		return c.Step(t0, Inputs{Arrivals: steady(256, 512, 15), Outputs: outputs, ObservedDecode: obs})
	}
	overflowed := func() *fakeHistory {
		return &fakeHistory{overflow: buckets.Cohort{Count: 3, MaxInput: 1024, MaxOutput: 900}}
	}
	d := step(overflowed(), capTok/2, PhaseObservation{})
	if d.Action != ActionHold || d.Reason != "decode deficit predicted from unlearned outputs, not measured" {
		t.Fatalf("unmeasured: got %s %q (%s) best %+v; want the unlearned-outputs hold", d.Action, d.Blocked, d.Reason, d.Best)
	}
	if d.Snapshot.Outputs.Reason != OutputsOverflow || d.Best.Moves >= 0 || d.Current.DecodePressure <= testConfig().TargetPressure {
		t.Fatalf("scenario: outputs %+v, best %+v, current %+v; want overflowed outputs and a predicted decode deficit", d.Snapshot.Outputs, d.Best, d.Current)
	}
	for _, tc := range []struct {
		name    string
		outputs *fakeHistory
		kv      int64
		obs     PhaseObservation
	}{
		{"observed TPOT past target", overflowed(), capTok / 2, PhaseObservation{Count: 50, Mean: 0.9, Max: 1.2}},
		{"resident KV past target", overflowed(), capTok * 85 / 100, PhaseObservation{}},
		{"no outputs yet", &fakeHistory{}, capTok / 2, PhaseObservation{}},
	} {
		if d := step(tc.outputs, tc.kv, tc.obs); d.Action != ActionMove || d.Direction != "prefill_to_decode" {
			t.Fatalf("%s: got %s %q (%s); want a prefill->decode move", tc.name, d.Action, d.Blocked, d.Reason)
		}
	}
}

// TestFewArrivalsPrefillPredictionNeedsMeasurement: a prefill deficit
// predicted from 40 arrivals in the short window (4 req/s of 1536-token
// prompts on 1 prefill engine, pressure ≈ 2) holds until prefill measures
// a shortage; a deficit predicted from 200 arrivals (d2p) moves at once,
// and so does the few-arrivals one with observed TTFT past target, with a
// queue past the SLO, or with prediction_arrivals 0.
func TestFewArrivalsPrefillPredictionNeedsMeasurement(t *testing.T) {
	few := func() Inputs { return Inputs{Arrivals: steady(1536, 16, 4), Outputs: &fakeHistory{}} }
	queued := few()
	queued.ObservedPrefill = PhaseObservation{Count: 50, Mean: 0.9, Max: 1.5}
	checkFewArrivalsRule(t, 1, 7, few, "prefill deficit predicted from few arrivals, not measured", 1, []measuredCase{
		{"many arrivals", d2pInputs(), 4, 4, nil},
		{"observed TTFT past target", queued, 1, 7, nil},
		{"queue past the SLO", few(), 1, 7, func(c *Controller) {
			setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: 2}, 66144)
		}},
	})
}

// TestFewArrivalsDecodePredictionNeedsMeasurement: the decode side of
// the rule above. A decode deficit predicted from 50 arrivals in the
// short window (5 req/s of 1536-token outputs on 1 decode engine) holds
// until decode measures a shortage; the same outputs from 70 arrivals
// move at once, and so does the few-arrivals one with observed TPOT past
// target, with resident KV past target, or with prediction_arrivals 0.
func TestFewArrivalsDecodePredictionNeedsMeasurement(t *testing.T) {
	const capTok = 66144
	few := func() Inputs { return Inputs{Arrivals: steady(256, 1536, 5), Outputs: &fakeHistory{}} }
	observed := few()
	observed.ObservedDecode = PhaseObservation{Count: 50, Mean: 0.9, Max: 1.2}
	checkFewArrivalsRule(t, 7, 1, few, "decode deficit predicted from few arrivals, not measured", -1, []measuredCase{
		{"many arrivals", Inputs{Arrivals: steady(256, 1536, 7), Outputs: &fakeHistory{}}, 7, 1, nil},
		{"observed TPOT past target", observed, 7, 1, nil},
		{"resident KV past target", few(), 7, 1, func(c *Controller) {
			setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 20, KVTokens: capTok * 85 / 100}, capTok)
		}},
	})
}

// measuredCase is a scenario in which the few-arrivals rule must not hold.
type measuredCase struct {
	name   string
	in     Inputs
	np, nd int
	prep   func(c *Controller)
}

// checkFewArrivalsRule: on np:nd, few's inputs (fewer than
// prediction_arrivals arrivals predicting a deficit of the phase dir
// points to: 1 prefill, -1 decode) hold with reason; each case moves that
// way, and so do few's inputs with prediction_arrivals 0.
func checkFewArrivalsRule(t *testing.T, np, nd int, few func() Inputs, reason string, dir int, cases []measuredCase) {
	t.Helper()
	d := newTestController(t, testConfig(), np, nd).Step(t0, few())
	if d.Action != ActionHold || d.Reason != reason {
		t.Fatalf("few arrivals: got %s %q (%s) best %+v current %+v; want %q", d.Action, d.Blocked, d.Reason, d.Best, d.Current, reason)
	}
	dst, direction := d.Current.PrefillPressure, "decode_to_prefill"
	if dir < 0 {
		dst, direction = d.Current.DecodePressure, "prefill_to_decode"
	}
	if d.Snapshot.Short.Requests >= testConfig().PredictionArrivals || d.Best.Moves*dir <= 0 || dst <= testConfig().TargetPressure {
		t.Fatalf("scenario: %v arrivals, best %+v, current %+v; want fewer than %v arrivals predicting a deficit toward %s",
			d.Snapshot.Short.Requests, d.Best, d.Current, testConfig().PredictionArrivals, direction)
	}
	off := testConfig()
	off.PredictionArrivals = 0
	if d := newTestController(t, off, np, nd).Step(t0, few()); d.Action != ActionMove || d.Direction != direction {
		t.Fatalf("prediction_arrivals 0: got %s %q (%s); want a %s move", d.Action, d.Blocked, d.Reason, direction)
	}
	for _, tc := range cases {
		c := newTestController(t, testConfig(), tc.np, tc.nd)
		if tc.prep != nil {
			tc.prep(c)
		}
		if d := c.Step(t0, tc.in); d.Action != ActionMove || d.Direction != direction {
			t.Fatalf("%s: got %s %q (%s) best %+v; want a %s move", tc.name, d.Action, d.Blocked, d.Reason, d.Best, direction)
		}
	}
}

// TestReleasedPrefillBacklogMustFitDecodeKV: a move toward prefill
// releases the prefill backlog into decode, and the decode pool left
// after the move must hold it. With 8 s of queued prefill per engine
// (1024-token prompts at 40 req/s on 4 prefill engines), the 3 decode
// engines left after the move would hold their resident KV plus the
// released prompts past headroom × capacity, although their resident
// and predicted KV alone fit: kv_limit holds the move. Without the
// backlog the same move is made; and when the current split could not
// hold the release either, the surge does not decide.
func TestReleasedPrefillBacklogMustFitDecodeKV(t *testing.T) {
	const capTok = 66144
	step := func(queuedS float64, kv int64) Decision {
		t.Helper()
		c := newTestController(t, closedFormConfig(), 4, 4)
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: queuedS}, capTok)
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 20, KVTokens: kv}, capTok)
		return c.Step(t0, Inputs{Arrivals: steady(1024, 64, 40), Outputs: &fakeHistory{}})
	}
	kvGate := func(d Decision) GateResult {
		t.Helper()
		for _, g := range d.Gates {
			if g.Gate == GateKVLimit {
				return g
			}
		}
		t.Fatalf("no kv_limit gate in %+v", d.Gates)
		return GateResult{}
	}
	limit := closedFormConfig().KVHeadroom * 3 * capTok
	d := step(8, 25000)
	if d.Action != ActionBlocked || d.Blocked != GateKVLimit || d.Direction != "decode_to_prefill" {
		t.Fatalf("backlog past the decode pool left: got %s %q (%s); want blocked by kv_limit", d.Action, d.Blocked, d.Reason)
	}
	p, g := d.Proposed, kvGate(d)
	if p.KVSurgeTokens <= limit || p.KVNeedTokens > limit || g.Value != roundJ(p.KVSurgeTokens) || g.Limit != roundJ(limit) {
		t.Fatalf("proposal %+v, gate %+v; want the released backlog (surge) past %.0f and the predicted need within it", p, g, limit)
	}
	if d.Current.KVSurgeTokens > closedFormConfig().KVHeadroom*d.Current.KVCapacityTokens {
		t.Fatalf("scenario: the current split (%+v) cannot hold the release either", d.Current)
	}
	if d := step(0, 25000); d.Action != ActionMove || d.Direction != "decode_to_prefill" || d.Current.KVSurgeTokens != 0 {
		t.Fatalf("no backlog: got %s %q (%s), surge %v; want a decode->prefill move", d.Action, d.Blocked, d.Reason, d.Current.KVSurgeTokens)
	}
	d = step(8, 46000)
	if d.Current.KVSurgeTokens <= closedFormConfig().KVHeadroom*d.Current.KVCapacityTokens {
		t.Fatalf("scenario: the current split (%+v) holds the release", d.Current)
	}
	if d.Action != ActionMove || d.Direction != "decode_to_prefill" {
		t.Fatalf("release past every split: got %s %q (%s); want the move (the surge does not decide)", d.Action, d.Blocked, d.Reason)
	}
}

// TestOverflowedOutputsCalibratedToMeasuredTPOT: with overflowed outputs
// decode is priced at the requested outputs (an upper bound: pressure
// ~800 on 2 decode engines). With TPOT measured at 0.3 of its SLO, the
// mean output is scaled so that the model predicts the measurement at the
// current split, and the other splits keep the model's shape. Not with
// TPOT measured past target_pressure, nor while the prefill queue is past
// the TTFT SLO, nor without enough observations.
func TestOverflowedOutputsCalibratedToMeasuredTPOT(t *testing.T) {
	const capTok = 66144
	step := func(obs PhaseObservation, queuedS float64) Decision {
		t.Helper()
		c := newTestController(t, closedFormConfig(), 6, 2)
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 40, KVTokens: capTok / 4}, capTok)
		setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: queuedS}, capTok)
		out := &fakeHistory{overflow: buckets.Cohort{Count: 3, MaxInput: 1024, MaxOutput: 900}}
		return c.Step(t0, Inputs{Arrivals: steady(256, 512, 15), Outputs: out, ObservedDecode: obs})
	}
	low := PhaseObservation{Count: 50, Mean: 0.3, Max: 0.5}
	d := step(low, 0)
	if sc := d.Snapshot.OutputScale; d.Snapshot.Outputs.Reason != OutputsOverflow || sc <= 0 || sc >= 1 {
		t.Fatalf("output scale %v (outputs %+v); want a calibration in (0, 1)", sc, d.Snapshot.Outputs)
	}
	if math.Abs(d.Current.LongDecode-low.Mean) > 1e-3 {
		t.Fatalf("current split long-horizon decode %v; want the measured %v", d.Current.LongDecode, low.Mean)
	}
	if d.Action != ActionHold || d.Reason != "both phases within target pressure" {
		t.Fatalf("calibrated: got %s (%s); want a hold within target", d.Action, d.Reason)
	}
	// The shape stays the model's: fewer decode engines price higher,
	// more lower, and not in proportion to the engine count alone.
	if more := d.Best; more.DecodeEngines <= 2 || more.LongDecode >= low.Mean {
		t.Fatalf("best %+v; want a split with more decode engines priced below %v", more, low.Mean)
	}
	for _, tc := range []struct {
		name    string
		obs     PhaseObservation
		queuedS float64
	}{
		{"no measurement", PhaseObservation{}, 0},
		{"too few observations", PhaseObservation{Count: closedFormConfig().MinObservations - 1, Mean: 0.3}, 0},
		{"TPOT past target", PhaseObservation{Count: 50, Mean: 0.9, Max: 1.2}, 0},
		{"prefill queue past the SLO", low, 5},
	} {
		d := step(tc.obs, tc.queuedS)
		if d.Snapshot.OutputScale != 0 || d.Current.LongDecode < 10 {
			t.Fatalf("%s: output scale %v, long decode %v; want the upper bound (no calibration)", tc.name, d.Snapshot.OutputScale, d.Current.LongDecode)
		}
	}
}

// TestBacklogSurgeArithmetic: the released backlog by hand. 4 prefill
// engines serving 2 req/s each hold 20 engine-seconds of queue, i.e. 40
// prompts, at a mean decode context of 1000 tokens; a sequence decodes
// for 100 tokens × 0.5 × 0.1 s = 5 s.
func TestBacklogSurgeArithmetic(t *testing.T) {
	s := &Snapshot{PrefillEngines: 4, Timing: Timing{TPOTSLOS: 0.1}}
	s.base[1].muP = 8
	s.Long.MeanOutput, s.Long.DecodeCtx = 100, 1000
	for _, tc := range []struct {
		name            string
		backlogS, resKV float64
		nP              int
		want            float64
	}{
		// 5 engines release it in 4 s, faster than a sequence decodes:
		// all 40 prompts are resident at once.
		{"released at once", 20, 5000, 5, 5000 + 40*1000},
		// 2 engines take 10 s: half of them are resident at once.
		{"released over twice a lifetime", 20, 5000, 2, 5000 + 40*1000*0.5},
		{"no backlog", 0, 5000, 5, 0},
		{"no prefill engine after the move", 20, 5000, 0, 0},
	} {
		if got := s.backlogSurge(tc.backlogS, tc.resKV, tc.nP, 0.5); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: surge %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLearnedOutputsCalibratedWhileTheMixHolds: a learned output estimate
// (completed outputs at half their requested length) is calibrated to
// measured TPOT like the upper bound, so the current split prices decode
// at the measurement; but not when the short window's mean output is
// above the long window's (the mix has turned heavier than what the
// resident sequences, and so TPOT, show): the learned price then stands.
func TestLearnedOutputsCalibratedWhileTheMixHolds(t *testing.T) {
	const capTok = 66144
	learned := &fakeHistory{cells: []buckets.Cell{{Shape: buckets.Shape{Input: 512, Output: 256}, Count: 100}}}
	step := func(arr HistoryReader, obs PhaseObservation) Decision {
		t.Helper()
		c := newTestController(t, testConfig(), 6, 2)
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 40, KVTokens: capTok / 4}, capTok)
		setResident(t, c, RolePrefill, t0, Resident{}, capTok)
		return c.Step(t0, Inputs{Arrivals: arr, Outputs: learned, ObservedDecode: obs})
	}
	held := steady(256, 512, 20)
	model := step(held, PhaseObservation{})
	if !model.Snapshot.Outputs.Learned || model.Snapshot.Outputs.Discount != 0.5 || model.Snapshot.OutputScale != 0 {
		t.Fatalf("scenario: outputs %+v, scale %v; want a learned discount of 0.5 and no calibration without TPOT", model.Snapshot.Outputs, model.Snapshot.OutputScale)
	}
	low := PhaseObservation{Count: 50, Mean: 0.3, Max: 0.5}
	if model.Current.LongDecode < 2*low.Mean || model.Current.LongDecode > 100 {
		t.Fatalf("scenario: the learned model prices decode at %v; want at least twice the measured %v, not saturated", model.Current.LongDecode, low.Mean)
	}
	d := step(held, low)
	if sc := d.Snapshot.OutputScale; sc <= 0 || sc >= 1 {
		t.Fatalf("steady mix: output scale %v; want a calibration in (0, 1)", sc)
	}
	if math.Abs(d.Current.LongDecode-low.Mean) > 1e-3 {
		t.Fatalf("steady mix: current long-horizon decode %v; want the measured %v (model %v)", d.Current.LongDecode, low.Mean, model.Current.LongDecode)
	}
	// The same rate, but the last 5 s request 1024 tokens instead of 512.
	shifted := steady(256, 512, 20)
	shifted.cells = append(shifted.cells, buckets.Cell{Shape: buckets.Shape{Input: 256, Output: 1024}})
	shifted.perS = append(shifted.perS, 20)
	shifted.since, shifted.until = []int64{0, t0 - 5*sec}, []int64{t0 - 5*sec, 0}
	d = step(shifted, low)
	if d.Snapshot.Short.MeanOutput <= d.Snapshot.Long.MeanOutput {
		t.Fatalf("scenario: short mean output %v, long %v; want the short window heavier", d.Snapshot.Short.MeanOutput, d.Snapshot.Long.MeanOutput)
	}
	if d.Snapshot.OutputScale != 0 || d.Current.LongDecode <= low.Mean {
		t.Fatalf("heavier mix: output scale %v, long decode %v; want the learned price (no calibration) above the measured %v", d.Snapshot.OutputScale, d.Current.LongDecode, low.Mean)
	}
}

// overflowInputs: 20 req/s of 512-token prompts with 16 output tokens
// (default_output_tokens 16 prices the zero-output cohort alike) and an
// overflow cohort of n requests per window at maxInput tokens, priced at
// that largest shape (the reference page's rule): decode demand is
// incomplete, the closed form scores the splits, and its prefill
// prediction is an upper bound.
func overflowInputs(n, maxInput int64, obsP, obsD float64) Inputs {
	in := Inputs{Arrivals: steady(512, 16, 20), Outputs: &fakeHistory{},
		ObservedPrefill: PhaseObservation{Count: 100, Mean: obsP, Max: obsP},
		ObservedDecode:  PhaseObservation{Count: 100, Mean: obsD, Max: obsD}}
	in.Arrivals.(*fakeHistory).overflow = buckets.Cohort{Count: n, MaxInput: maxInput, ZeroOutput: true}
	return in
}

func sourceGate(t *testing.T, d Decision) GateResult {
	t.Helper()
	for _, g := range d.Gates {
		if g.Gate == GateSourcePressure {
			return g
		}
	}
	t.Fatalf("no %s gate in %+v", GateSourcePressure, d.Gates)
	return GateResult{}
}

// TestOverflowPricedSourceYieldsToMeasuredDeficit: decode measured 1.5×
// its TPOT SLO on 2 of 10 engines; the overflow-priced prefill
// prediction at 7 prefill engines reads 1.11 (past source_limit 0.65 and
// above decode's 1.0 there), which vetoed the move. Prefill measured at
// 0.2 of its TTFT SLO, carried to 7 engines by the prediction's own
// change (1.11 / 0.76 = 1.47 > 8/7), reads 0.29: one engine moves. With
// prefill measured at 0.7 (not well within source_limit), or a move made
// 39 s ago (the 10-s short window plus the 30-s switch time have not
// passed since: the measurements may predate its landing), the
// prediction stands and the move is blocked; 41 s after a move it
// passes.
func TestOverflowPricedSourceYieldsToMeasuredDeficit(t *testing.T) {
	for _, tc := range []struct {
		obsP  float64
		moveS int64 // seconds since the last move (0: none)
		move  bool
	}{{0.2, 0, true}, {0.7, 0, false}, {0.2, 39, false}, {0.2, 41, true}} {
		cfg := testConfig()
		cfg.DefaultOutputTokens = 16
		c := newTestController(t, cfg, 8, 2)
		if tc.moveS > 0 {
			if err := c.Restore(PersistedState{Version: stateVersion, LastMoveNs: t0 - tc.moveS*sec}); err != nil {
				t.Fatal(err)
			}
		}
		d := c.Step(t0, overflowInputs(300, 1000, tc.obsP, 1.5))
		if d.Basis != BasisObservedPressure || d.Best.Moves != -1 {
			t.Fatalf("obsP %v, last move %d s ago: want the observed_pressure basis and a best split one engine toward decode; got %s %+v", tc.obsP, tc.moveS, d.Basis, d.Best)
		}
		pred := d.Best.PrefillPressure
		if pred < cfg.SourceLimit || pred < d.Best.DecodePressure {
			t.Fatalf("obsP %v, last move %d s ago: the prediction must veto the move on its own: prefill %v decode %v", tc.obsP, tc.moveS, pred, d.Best.DecodePressure)
		}
		g := sourceGate(t, d)
		if !tc.move {
			if d.Action != ActionBlocked || d.Blocked != GateSourcePressure || g.Value != pred {
				t.Fatalf("obsP %v, last move %d s ago: got %s %q value %v; want blocked by %s at the prediction %v", tc.obsP, tc.moveS, d.Action, d.Blocked, g.Value, GateSourcePressure, pred)
			}
			continue
		}
		want := tc.obsP * max(8.0/7, pred/d.Current.PrefillPressure) // 0.2 × 1.107719/0.755783
		if math.Abs(g.Value-want) > 1e-5 || math.Abs(want-0.29313) > 1e-4 || !g.Pass {
			t.Fatalf("obsP %v, last move %d s ago: source_pressure %+v; want passing at %v (0.29313)", tc.obsP, tc.moveS, g, want)
		}
		if d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].To != RoleDecode {
			t.Fatalf("obsP %v, last move %d s ago: got %s %q %+v; want one prefill->decode move", tc.obsP, tc.moveS, d.Action, d.Blocked, d.Moves)
		}
	}
}

// TestOverflowPricedDestinationYieldsToMeasurement: the prefill pool is
// behind only by its running prompts (0.5 s each on 8 engines, queued
// 0.05 s each: 0.4 / (8 × 0.25 s) = 0.2 of the SLO; observed TTFT 0.3),
// the overflow-priced prefill prediction reads 43 at 9 engines, and
// decode measures 0.5 on 2 engines: the move to prefill would take decode
// to 1.0 measured. The destination is priced at its measurement (0.3 ×
// max(8/9, 43.2/48.4) = 0.27), so the move is blocked; with a queue past
// the SLO (0.4 s each: 1.6) the prediction stands and one engine moves.
func TestOverflowPricedDestinationYieldsToMeasurement(t *testing.T) {
	for _, tc := range []struct {
		queued float64
		move   bool
	}{{0.05, false}, {0.4, true}} {
		cfg := testConfig()
		cfg.DefaultOutputTokens = 16
		c := newTestController(t, cfg, 8, 2)
		setResident(t, c, RolePrefill, t0, Resident{RunningPrefillS: 0.5, QueuedPrefillS: tc.queued}, 66144)
		in := overflowInputs(400, 1500, 0.3, 0.5)
		in.Arrivals.(*fakeHistory).ev = buckets.Evidence{SpanNs: 30 * sec, Observations: 5, Buckets: 30}
		d := c.Step(t0, in)
		if d.Basis != BasisRecovery || d.Best.Moves != 1 || d.Best.PrefillPressure < 40 {
			t.Fatalf("queued %v: want the recovery basis, a best split one engine toward prefill predicted past 40; got %s %+v", tc.queued, d.Basis, d.Best)
		}
		g := sourceGate(t, d)
		if tc.move {
			if d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].To != RolePrefill || !g.Pass {
				t.Fatalf("queued %v: got %s %q %+v; want one decode->prefill move", tc.queued, d.Action, d.Blocked, d.Moves)
			}
			continue
		}
		if d.Action != ActionBlocked || d.Blocked != GateSourcePressure || g.Value != 1 {
			t.Fatalf("queued %v: got %s %q, source_pressure %+v; want blocked by %s at decode's measured 0.5 × 2/1 = 1", tc.queued, d.Action, d.Blocked, g, GateSourcePressure)
		}
	}
}

// TestOverflowPricedDestinationQueueOverTheShortWindow: the measured
// prefill queue that keeps the destination priced at its prediction
// must hold over the short window (its minimum over the window's
// steps), not one reading (e16c: a one-second spike of 29 s queued on
// 14 engines, 1.04 of 14 × 2 s, let decode's last engine go). As
// TestOverflowPricedDestinationYieldsToMeasurement: 8 prefill engines
// at 0.5 s running each, TTFT SLO 0.25 s. A queue of 0.4 s per engine
// (1.6 of the SLO) now, after 0.05 s per engine (0.2) 8 s ago: the
// window's minimum is 0.2, within the SLO, so the destination is priced
// at its measurement and the move is blocked (decode measured 0.5 × 2/1
// = 1). The same reading 12 s ago (outside the 10-s short window), or
// 0.4 s held at both steps, leaves the queue past the SLO and one engine
// moves (two confirmation steps, so the earlier step never moves).
func TestOverflowPricedDestinationQueueOverTheShortWindow(t *testing.T) {
	for _, tc := range []struct {
		earlierS int64
		earlierQ float64
		move     bool
	}{{8, 0.05, false}, {12, 0.05, true}, {8, 0.4, true}} {
		cfg := testConfig()
		cfg.DefaultOutputTokens = 16
		cfg.ConfirmSteps = 2 // the earlier step holds the move in every case
		c := newTestController(t, cfg, 8, 2)
		in := overflowInputs(400, 1500, 0.3, 0.5)
		in.Arrivals.(*fakeHistory).ev = buckets.Evidence{SpanNs: 30 * sec, Observations: 5, Buckets: 30}
		at := t0 - tc.earlierS*sec
		setResident(t, c, RolePrefill, at, Resident{RunningPrefillS: 0.5, QueuedPrefillS: tc.earlierQ}, 66144)
		if d := c.Step(at, in); d.Action == ActionMove {
			t.Fatalf("earlier step (queue %v): moved %+v; the scenario needs it held", tc.earlierQ, d.Moves)
		}
		setResident(t, c, RolePrefill, t0, Resident{RunningPrefillS: 0.5, QueuedPrefillS: 0.4}, 66144)
		d := c.Step(t0, in)
		if d.Basis != BasisRecovery || d.Best.Moves != 1 || d.Best.PrefillPressure < 40 {
			t.Fatalf("%+v: want the recovery basis, a best split one engine toward prefill predicted past 40; got %s %+v", tc, d.Basis, d.Best)
		}
		g := sourceGate(t, d)
		if tc.move {
			if d.Action != ActionMove || len(d.Moves) != 1 || d.Moves[0].To != RolePrefill || !g.Pass {
				t.Fatalf("%+v: got %s %q %+v; want one decode->prefill move", tc, d.Action, d.Blocked, d.Moves)
			}
			continue
		}
		if d.Action != ActionBlocked || d.Blocked != GateSourcePressure || g.Value != 1 {
			t.Fatalf("%+v: got %s %q, source_pressure %+v; want blocked by %s at decode's measured 0.5 × 2/1 = 1", tc, d.Action, d.Blocked, g, GateSourcePressure)
		}
	}
}

// TestMeasuredPrefillWorkBoundsMovesToDecode: on overflow-priced demand a
// move toward decode keeps more prefill engines than the work they
// measure (busy share × engines, from the busy seconds of their latency
// intervals) while the prefill pool keeps up; once the pool is measured
// short, engines below that work move one at a time and none while
// another is in transition. Demand priced without an overflow cohort, or
// no busy figures, leave the moves as they were.
func TestMeasuredPrefillWorkBoundsMovesToDecode(t *testing.T) {
	short := PhaseObservation{Count: 100, Mean: 1.5, Max: 1.5}
	// 6 serving prefill engines and 2 decode ones, decode measured at 3×
	// its SLO and 85 % of its KV; mover: a 7th prefill engine already
	// draining toward decode.
	run := func(t *testing.T, share float64, report, overflow, mover bool, obsP PhaseObservation) Decision {
		t.Helper()
		c := newTestController(t, closedFormConfig(), 6, 2)
		for ns := t0 - 12*sec; ns < t0; ns += sec {
			for _, e := range c.Engines() {
				busy := share
				li := LatencyInterval{IntervalS: 1}
				if report {
					li.BusyS = &busy
				}
				if err := c.ObserveLatency(e.ID, ns, li); err != nil {
					t.Fatal(err)
				}
			}
		}
		if mover {
			if err := c.UpsertEngine(Engine{ID: "x-moving", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill,
				State: StateDraining, TargetRole: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
		}
		setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 40, KVTokens: 56222}, 66144)
		in := Inputs{Arrivals: steady(256, 512, 15), Outputs: &fakeHistory{}, ObservedPrefill: obsP,
			ObservedDecode: PhaseObservation{Count: 100, Mean: 3, Max: 3}}
		if overflow {
			in.Arrivals.(*fakeHistory).overflow = buckets.Cohort{Count: 3, MaxInput: 256, MaxOutput: 512}
		}
		return c.Step(t0, in)
	}
	for _, overflow := range []bool{false, true} {
		for _, tc := range []struct {
			share float64
			obsP  PhaseObservation
			mover bool
			work  float64
			moves int // on overflow-priced demand; -1: blocked by the measured work
		}{
			{share: 0.3, work: 1.8, moves: -2}, // as without busy figures
			{share: 0.75, work: 4.5, moves: 1},
			{share: 0.9, work: 5.4, moves: -1},
			{share: 0.9, obsP: short, work: 5.4, moves: 1},
			{share: 0.9, obsP: short, mover: true, work: 5.4, moves: -1},
		} {
			without := run(t, 0, false, overflow, tc.mover, tc.obsP)
			if without.Action != ActionMove || without.MeasuredPrefillWork != nil || (tc.obsP.Count == 0 && len(without.Moves) < 2) {
				t.Fatalf("overflow %v, obsP %v, mover %v, no busy figures: %s %d moves (%s), work %v; want a move (of at least 2 engines when prefill keeps up) and no measured work",
					overflow, tc.obsP.Mean, tc.mover, without.Action, len(without.Moves), without.Reason, without.MeasuredPrefillWork)
			}
			want := tc.moves
			if !overflow || want == -2 {
				want = len(without.Moves)
			}
			d := run(t, tc.share, true, overflow, tc.mover, tc.obsP)
			if d.MeasuredPrefillWork == nil || math.Abs(*d.MeasuredPrefillWork-tc.work) > 1e-6 {
				t.Fatalf("share %v: measured_prefill_work %v; want %v", tc.share, d.MeasuredPrefillWork, tc.work)
			}
			what := fmt.Sprintf("overflow %v, share %v, obsP %v, mover %v", overflow, tc.share, tc.obsP.Mean, tc.mover)
			switch {
			case want >= 0 && (d.Action != ActionMove || len(d.Moves) != want):
				t.Errorf("%s: %s %d moves (%s); want %d (%d without busy figures)", what, d.Action, len(d.Moves), d.Reason, want, len(without.Moves))
			case want < 0 && (d.Action != ActionBlocked || d.Blocked != GateSourcePressure || !strings.Contains(sourceGate(t, d).Detail, "measured work")):
				t.Errorf("%s: %s blocked %q (%s); want blocked by the measured work", what, d.Action, d.Blocked, sourceGate(t, d).Detail)
			}
		}
	}
}
