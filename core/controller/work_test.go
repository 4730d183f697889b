package controller

import (
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// workRun steps a 4 prefill + 4 decode controller once a second over the
// long horizon (60 s) up to t0. Each step every prefill engine reports
// busyS seconds of prefill per 1-s interval and every decode engine 3 s
// (not in the prefill role: must not count); the steps before t0 see no
// demand and no queue, so nothing moves. At t0 the prefill pool holds a
// 6 s backlog (1.5 s per engine) and demand is incomplete: an arrivals
// overflow cohort of long prompts with zero requested output, priced at
// its largest input, makes the decode prediction an upper bound far past
// the SLO while decode measures 0.3 of it with little KV resident.
func workRun(t *testing.T, busyS float64) Decision {
	t.Helper()
	c := newTestController(t, testConfig(), 4, 4)
	idle := Inputs{Outputs: &fakeHistory{}}
	for ts := t0 - 60*sec; ts <= t0; ts += sec {
		for _, e := range c.Engines() {
			li := LatencyInterval{IntervalS: 1, PrefillSeconds: busyS}
			if e.Role == RoleDecode {
				li.PrefillSeconds = 3
			}
			if err := c.ObserveLatency(e.ID, ts, li); err != nil {
				t.Fatal(err)
			}
		}
		if ts == t0 {
			break
		}
		if d := c.Step(ts, idle); d.Action != ActionHold {
			t.Fatalf("unexpected %s at %d s: %s", d.Action, (ts-t0)/sec, d.Reason)
		}
	}
	setResident(t, c, RolePrefill, t0, Resident{QueuedPrefillS: 1.5}, 66144)
	setResident(t, c, RoleDecode, t0, Resident{DecodeSeqs: 4, KVTokens: 4000}, 66144)
	arr := steady(512, 64, 4)
	arr.overflow = buckets.Cohort{Count: 600, MaxInput: 2000, ZeroOutput: true}
	in := Inputs{Arrivals: arr, Outputs: &fakeHistory{}}
	in.ObservedPrefill = PhaseObservation{Count: 50, Mean: 2, Max: 4}
	in.ObservedDecode = PhaseObservation{Count: 50, Mean: 0.3, Max: 0.5}
	d := c.Step(t0, in)
	if d.Basis != BasisRecovery || d.Snapshot.IncompleteReason != "decode_overflow_zero_output" {
		t.Fatalf("unexpected basis %s (%s)", d.Basis, d.Snapshot.IncompleteReason)
	}
	return d
}

// TestMeasuredPrefillWorkSizesPrefill: on an incomplete-demand basis the
// prefill work the engines measure (busy time of the prefill role plus
// the queue's growth, over the long horizon) sizes the prefill pool, and
// an overflow-priced decode prediction does not veto the move while
// decode measures within target.
func TestMeasuredPrefillWorkSizesPrefill(t *testing.T) {
	// Busy 4 engines × 1 s/s over 60 s (240 s) plus the queue's growth
	// (0 → 6 s): W = (240 + 6)/60 = 4.1 engine-seconds per second, so
	// ceil(W) = 5 prefill engines. The decode engines' 3 s/s do not count.
	d := workRun(t, 1)
	if d.MeasuredPrefillWork != 4.1 || d.MeasuredPrefillEngines != 5 {
		t.Fatalf("unexpected measured work; got W=%v engines=%d; want 4.1 and 5", d.MeasuredPrefillWork, d.MeasuredPrefillEngines)
	}
	// P5/D3 is priced by measurement: the load its prefill pool delivers
	// is min(W, 5)/busy 4 = 1.025 times today's, so decode reads
	// 0.3 × 4/3 × 1.025 = 0.41 and KV 4 × 4000 × 1.025 = 16400 tokens.
	if d.Action != ActionMove || d.Direction != "decode_to_prefill" || d.Best.PrefillEngines != 5 {
		t.Fatalf("unexpected decision; got %s %s best P%d (%s); want a move to P5", d.Action, d.Direction, d.Best.PrefillEngines, d.Reason)
	}
	if d.Best.DecodePressure != 0.41 || d.Best.KVNeedTokens != 16400 {
		t.Fatalf("unexpected P5 decode pricing; got pressure %v KV %v; want 0.41 and 16400", d.Best.DecodePressure, d.Best.KVNeedTokens)
	}
	// Without the busy reports the engines measure only the queue's
	// growth (W = 0.1): the rule does not apply, and the overflow-priced
	// decode prediction (far past the SLO at every split) asks for an
	// engine out of the prefill pool that is behind.
	d = workRun(t, 0)
	if d.MeasuredPrefillWork != 0.1 || d.MeasuredPrefillEngines != 0 {
		t.Fatalf("unexpected measured work without busy time; got W=%v engines=%d; want 0.1 and 0", d.MeasuredPrefillWork, d.MeasuredPrefillEngines)
	}
	if d.Action == ActionMove || d.Best.PrefillEngines >= 4 || d.Current.DecodePressure < 100 {
		t.Fatalf("unexpected decision without measured work; got %s (%s) best P%d, current decode pressure %v; want best under P4, decode past 100",
			d.Action, d.Reason, d.Best.PrefillEngines, d.Current.DecodePressure)
	}
}

// TestMeasuredPrefillWorkCountsServingPrefillOnly: W counts the busy time
// of live serving engines in the prefill role only (an engine draining
// to decode, a prefill engine that is not live and a decode engine each
// report 7 s/s that must not count), is absent until half the long
// horizon is measured, and stays right as the window slides for ten
// minutes (a bounded ring of samples).
func TestMeasuredPrefillWorkCountsServingPrefillOnly(t *testing.T) {
	c := newTestController(t, testConfig(), 3, 1)
	if err := c.UpsertEngine(Engine{ID: "mover", Node: "n", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill,
		State: StateDraining, TargetRole: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
		t.Fatal(err)
	}
	idle := Inputs{Outputs: &fakeHistory{}}
	for ts := t0 - 60*sec; ts <= t0+600*sec; ts += sec {
		if err := c.UpdateEngine("e002", ts, Resident{}, 66144, false); err != nil { // a prefill engine, not live
			t.Fatal(err)
		}
		for _, e := range c.Engines() {
			li := LatencyInterval{IntervalS: 1, PrefillSeconds: 7}
			if e.ID == "e000" || e.ID == "e001" {
				li.PrefillSeconds = 0.5
			}
			if err := c.ObserveLatency(e.ID, ts, li); err != nil {
				t.Fatal(err)
			}
		}
		d := c.Step(ts, idle)
		// Two serving prefill engines × 0.5 s/s: W = 1 once 30 s are measured.
		want := 1.0
		if ts < t0-30*sec {
			want = 0
		}
		if d.MeasuredPrefillWork != want || d.MeasuredPrefillEngines != 0 {
			t.Fatalf("unexpected measured work at %d s; got %v (engines %d); want %v", (ts-t0)/sec, d.MeasuredPrefillWork, d.MeasuredPrefillEngines, want)
		}
	}
}
