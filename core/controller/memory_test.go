package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// memoryRun drives a 4:4 controller through a move toward prefill
// followed by decode measured at 1.5× its TPOT SLO at 5:3 until the
// controller reverses after reversalSteps confirmations. The move is
// taken at t0, before anything is measured (decode within target). It
// returns the controller, back at 4:4, and the time of the reversal.
func memoryRun(t *testing.T, reversalSteps int) (*Controller, int64) {
	t.Helper()
	cfg := closedFormConfig()
	cfg.ReversalConfirmSteps = reversalSteps
	c := newTestController(t, cfg, 4, 4)
	if d := c.Step(t0, d2pInputs()); d.Action != ActionMove || d.Moves[0].To != RolePrefill {
		t.Fatalf("first move: got %s %q (%s); want decode to prefill", d.Action, d.Blocked, d.Reason)
	}
	starved := d2pInputs()
	starved.ObservedPrefill = PhaseObservation{Count: 100, Mean: 0.5}
	starved.ObservedDecode = PhaseObservation{Count: 100, Mean: 1.5, Over: 80}
	now := t0
	for i := 0; i < 200; i++ {
		now += sec
		d := c.Step(now, starved)
		if d.Action == ActionMove {
			if d.Moves[0].To != RoleDecode {
				t.Fatalf("step %d: moved %+v; want the reversal to decode", i, d.Moves[0])
			}
			return c, now
		}
	}
	t.Fatal("no reversal in 200 steps")
	return nil, 0
}

// prefillShort: d2pInputs' shape at rate requests/s and input tokens,
// with prefill measured past its TTFT SLO (a deficit measured, not only
// predicted) and decode within target.
func prefillShort(rate float64, input int64) Inputs {
	in := Inputs{Arrivals: steady(input, 16, rate), Outputs: &fakeHistory{}}
	in.ObservedPrefill = PhaseObservation{Count: 100, Mean: 1.2, Over: 60}
	in.ObservedDecode = PhaseObservation{Count: 100, Mean: 0.3}
	return in
}

// TestMoveMemoryHoldsAMoveThatStarvedItsSource: decode, within target
// when a decode engine moved to prefill (4:4 → 5:3), measured 1.5× its
// TPOT SLO once the move had landed (the short window past the switch
// time) for the audit's steps, and the controller reversed. Back at 4:4,
// with prefill now measured past its SLO under the same demand, the move
// to 5:3 is held by move memory, though the deficit is measured. It is
// released by demand outside the remembered rate or mean input ±25 %, by
// a fleet one engine larger, and after the memory's hold. A reversal before the move had settled (decode
// measured past its SLO only while it did) leaves no memory; one soon
// after ends the audit with what it measured.
func TestMoveMemoryHoldsAMoveThatStarvedItsSource(t *testing.T) {
	for _, tc := range []struct {
		name          string
		reversalSteps int
		after         int64 // seconds after the reversal
		in            Inputs
		held          bool
	}{
		{"same demand", 60, 1, prefillShort(20, 1024), true},
		{"rate within 25 %", 60, 1, prefillShort(24, 1024), true},
		{"input within 25 %", 60, 1, prefillShort(20, 1200), true},
		{"rate +30 %", 60, 1, prefillShort(26, 1024), false},
		{"input −30 %", 60, 1, prefillShort(20, 716), false},
		{"hold over", 60, int64(memoryHoldS) + 1, prefillShort(20, 1024), false},
		{"one engine more in the fleet", 60, 1, prefillShort(20, 1024), false},
		// Settling takes the short window (10 s) past the switch time
		// (30 s): a reversal at 35 s comes before the move has landed
		// in the measurements; one at 45 s, after five steps past the
		// SLO, ends the audit early.
		{"reversed before the move settled", 35, 1, prefillShort(20, 1024), false},
		{"reversed soon after it settled", 45, 1, prefillShort(20, 1024), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now := memoryRun(t, tc.reversalSteps)
			if strings.HasPrefix(tc.name, "one engine more") {
				// 5:4 after the move is another split than 5:3.
				if err := c.UpsertEngine(Engine{ID: "e-new", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
					t.Fatal(err)
				}
			}
			d := c.Step(now+tc.after*sec, tc.in)
			holds := memoryHoldsMetric(t, c)
			if tc.held {
				if d.Action != ActionHold || d.Reason != ReasonMoveMemory || holds != 1 {
					t.Fatalf("got %s %q (%s), narwhal_controller_move_memory_holds_total %v; want held by move memory, counted once", d.Action, d.Blocked, d.Reason, holds)
				}
				return
			}
			if holds != 0 {
				t.Fatalf("narwhal_controller_move_memory_holds_total %v; want 0", holds)
			}
			// Not held: the move toward prefill goes through the gates,
			// where the reversal's confirmation holds it on this step.
			if d.Action != ActionBlocked || d.Blocked != GateConfirmation || d.Proposed == nil || d.Proposed.PrefillEngines <= 4 {
				t.Fatalf("got %s %q (%s), proposed %+v; want a move toward prefill blocked only by confirmation", d.Action, d.Blocked, d.Reason, d.Proposed)
			}
		})
	}
}

// TestMoveMemoryYieldsToAMeasuredStarvation: back at 4:4 after the
// remembered move, prefill measured past its TTFT SLO (a tail more
// engines remove) and decode spare one engine smaller on every step:
// the move stays held while fewer than memoryReleaseShare of the recent
// steps (time constant starvation_s, 120 s) measured that, and goes to
// the gates once more did (Mooncake at 1.2× its row's scale held the
// move for the hour while prefill queued up to 577 s; HISTORY.md,
// session 28). With decode measured past target (not spare) it stays
// held.
func TestMoveMemoryYieldsToAMeasuredStarvation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		decode  float64 // decode's measured TPOT ratio at 4:4
		secs    int64
		release bool
	}{
		{"starving", 0.3, 100, true},
		{"decode not spare", 0.6, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now := memoryRun(t, 60)
			in := prefillShort(20, 1024)
			in.ObservedDecode.Mean = tc.decode
			// 1 − e^(−t/120) passes ½ at 83 s.
			var d Decision
			var at int64
			for i := int64(1); i <= tc.secs && at == 0; i++ {
				d = c.Step(now+i*sec, in)
				if d.Reason != ReasonMoveMemory {
					at = i
				}
			}
			if !tc.release {
				if at != 0 {
					t.Fatalf("step %d: got %s %q (%s); want held by move memory for %d s", at, d.Action, d.Blocked, d.Reason, tc.secs)
				}
				return
			}
			if at < 80 || at > 90 {
				t.Fatalf("released at %d s (share %.3f); want between 80 and 90 s", at, c.starveShare[starveIndex(1)])
			}
			if d.Proposed == nil || d.Proposed.PrefillEngines <= 4 {
				t.Fatalf("released at %d s: got %s (%s), proposed %+v; want a move toward prefill", at, d.Action, d.Reason, d.Proposed)
			}
		})
	}
}

// TestMoveMemoryNeedsTheSourceWithinTargetAtTheMove: a move taken while
// its source already measured past target_pressure (both phases short,
// the score deciding) is not remembered when the source then measures
// past its SLO; taken with the source at target, it is. The audit is
// driven directly: the gates keep a decode engine from leaving a decode
// pool measured past target on this demand (demand_evidence).
func TestMoveMemoryNeedsTheSourceWithinTargetAtTheMove(t *testing.T) {
	const settle = 40 * sec
	for _, tc := range []struct {
		atMove float64
		want   bool
	}{{0.8, true}, {0.85, false}} {
		var m moveMemory
		s := &Snapshot{Long: HorizonDemand{RatePerS: 20, MeanInput: 1024}}
		s.ObservedDecode = PhaseObservation{Count: 100, Mean: tc.atMove}
		m.moved(s, t0, 1, 5, 0.8)
		s.ObservedDecode.Mean = 1.5
		for now := t0; now <= t0+settle+20*sec; now += sec {
			m.observe(now, settle, s)
		}
		if got := m.holds(t0+settle+21*sec, s, 1, 5); got != tc.want {
			t.Fatalf("decode at %v at the move: holds %v; want %v", tc.atMove, got, tc.want)
		}
		if m.holds(t0+settle+21*sec, s, 1, 6) || m.holds(t0+settle+21*sec, s, -1, 5) {
			t.Fatalf("decode at %v at the move: another split or direction held", tc.atMove)
		}
	}
}

// memoryHoldsMetric reads narwhal_controller_move_memory_holds_total from
// the controller's collector.
func memoryHoldsMetric(t *testing.T, c *Controller) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "narwhal_controller_move_memory_holds_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("narwhal_controller_move_memory_holds_total not collected")
	return 0
}
