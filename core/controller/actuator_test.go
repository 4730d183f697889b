package controller

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type recordingActuator struct {
	moves []Move
	err   error
}

func (a *recordingActuator) Start(m Move) error {
	a.moves = append(a.moves, m)
	return a.err
}

// A moving engine takes no new work until MoveDone; MoveDone puts it in
// its new role, a failed move back in its old one.
func TestMoveLifecycle(t *testing.T) {
	act := &recordingActuator{}
	c := newTestController(t, testConfig(), 4, 4, WithActuator(act))
	d := c.Step(t0, d2pInputs())
	if d.Action != ActionMove || len(act.moves) != 1 || act.moves[0] != d.Moves[0] || act.moves[0].DecisionSeq != d.Seq || act.moves[0].AtNs != t0 {
		t.Fatalf("unexpected move handed to the actuator: %+v (decision %+v)", act.moves, d.Moves)
	}
	id := d.Moves[0].EngineID
	tb := c.Roles()
	if tb.RoleOf(id) != RoleNone || slices.Contains(tb.Prefill, id) || slices.Contains(tb.Decode, id) || !tb.Known(id) {
		t.Fatalf("a draining engine must take no new work: %v / %v", tb.Prefill, tb.Decode)
	}
	// The engine in flight is scored in its target role (the deficit it
	// answers is not answered twice), and an unconfirmed deficit never
	// moves another engine while one is in flight.
	if d2 := c.Step(t0+sec, d2pInputs()); d2.Action == ActionMove || len(act.moves) != 1 ||
		d2.Current.PrefillEngines != 5 || (d2.Blocked != "" && d2.Blocked != GateLiveAvailability) {
		t.Fatalf("a move in flight must not be repeated; got %s %q, current %d/%d, %d moves", d2.Action, d2.Blocked, d2.Current.PrefillEngines, d2.Current.DecodeEngines, len(act.moves))
	}
	c.MoveDone(id, t0+20*sec, nil)
	if c.Roles().RoleOf(id) != RolePrefill {
		t.Fatalf("after MoveDone the engine serves prefill; got %v", c.Roles().RoleOf(id))
	}
	for _, e := range c.Engines() {
		if e.ID == id && (e.State != StateServing || e.TargetRole != RoleNone || e.LastMoveNs != t0+20*sec) {
			t.Fatalf("unexpected engine row after the move %+v", e)
		}
	}
	// A failed move returns the engine to its old role.
	act2 := &recordingActuator{}
	c2 := newTestController(t, testConfig(), 4, 4, WithActuator(act2))
	d = c2.Step(t0, d2pInputs())
	c2.MoveDone(d.Moves[0].EngineID, t0+sec, errors.New("pod relabel failed"))
	if got := c2.Roles().RoleOf(d.Moves[0].EngineID); got != RoleDecode {
		t.Fatalf("failed move: role %v; want decode", got)
	}
	// An actuator that refuses to start gets the move undone at once.
	act3 := &recordingActuator{err: errors.New("no")}
	c3 := newTestController(t, testConfig(), 4, 4, WithActuator(act3))
	d = c3.Step(t0, d2pInputs())
	if got := c3.Roles().RoleOf(d.Moves[0].EngineID); got != RoleDecode || len(c3.Roles().Decode) != 4 {
		t.Fatalf("refused start: role %v; want decode", got)
	}
	// MoveDone for unknown or serving engines changes nothing.
	v := c3.Roles().Version
	c3.MoveDone("ghost", t0, nil)
	c3.MoveDone("e000", t0, nil)
	if c3.Roles().Version != v {
		t.Fatal("a stray MoveDone republished the role table")
	}
}

func TestEngineInputValidation(t *testing.T) {
	c := newTestController(t, testConfig(), 1, 1)
	v := c.Roles().Version
	for _, e := range []Engine{{ID: ""}, {ID: "x", KVCapacityTokens: -1}, {ID: "x", Role: 7}, {ID: "x", Resident: Resident{QueuedPrefillS: -1}},
		{ID: "x", Model: strings.Repeat("m", 257)}, {ID: "x", GPU: strings.Repeat("g", 257)}, {ID: "x", Node: strings.Repeat("n", 257)}} {
		if err := c.UpsertEngine(e); !errors.Is(err, ErrInvalidEngine) {
			t.Fatalf("engine %.200v: got %v; want ErrInvalidEngine", e, err)
		}
	}
	if err := c.UpdateEngine("ghost", t0, Resident{}, 0, true); !errors.Is(err, ErrUnknownEngine) {
		t.Fatalf("got %v; want ErrUnknownEngine", err)
	}
	if err := c.RemoveEngine("ghost"); !errors.Is(err, ErrUnknownEngine) {
		t.Fatalf("got %v; want ErrUnknownEngine", err)
	}
	if c.Roles().Version != v || len(c.Engines()) != 2 {
		t.Fatal("refused input changed the engine table")
	}
	// New engines without a role balance the roles.
	for _, id := range []string{"n1", "n2", "n3"} {
		if err := c.UpsertEngine(Engine{ID: id, Live: true}); err != nil {
			t.Fatal(err)
		}
	}
	if tb := c.Roles(); len(tb.Prefill) != 3 || len(tb.Decode) != 2 {
		t.Fatalf("unexpected balance %v / %v", tb.Prefill, tb.Decode)
	}
	if err := c.RemoveEngine("n1"); err != nil || c.Roles().Known("n1") {
		t.Fatalf("remove: %v", err)
	}
}

// Write-ahead on a full disk: a move whose journal record cannot be
// written does not reach the actuator, and its engine is in neither role
// of the table (nor in its new role) until a later write succeeds; then
// the held record is on disk first and the move is handed over. Found by
// service/diskfull: a real full tmpfs under the binary showed moves
// carried out (DryRun) with no record on disk.
func TestMoveWaitsForItsJournalRecord(t *testing.T) {
	fsys := &faultFS{}
	j, _ := openJ(t, t.TempDir(), JournalOptions{FS: fsys, RetryEvery: time.Hour})
	t.Cleanup(func() { j.Close() })
	act := &recordingActuator{}
	var logs bytes.Buffer
	c := newTestController(t, testConfig(), 4, 4, WithActuator(act), WithSink(j), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	fsys.setFull(true)
	d := c.Step(t0, d2pInputs())
	if d.Action != ActionMove || len(d.Moves) != 1 {
		t.Fatalf("want a move; got %s %q", d.Action, d.Blocked)
	}
	id := d.Moves[0].EngineID
	if len(act.moves) != 0 || j.Durable() >= d.Seq {
		t.Fatalf("record %d not written (durable %d), yet the actuator got %+v", d.Seq, j.Durable(), act.moves)
	}
	tb := c.Roles()
	if slices.Contains(tb.Prefill, id) || slices.Contains(tb.Decode, id) || !tb.Known(id) {
		t.Fatalf("held engine %s in the role table: %v / %v; want it draining", id, tb.Prefill, tb.Decode)
	}
	// Still full: the next steps hold too (and do not move it again),
	// and the unchanged error is logged once, not per step.
	c.Step(t0+sec, d2pInputs())
	c.Step(t0+sec+sec/2, d2pInputs())
	if len(act.moves) != 0 {
		t.Fatalf("actuator got %+v with the disk still full", act.moves)
	}
	if n := strings.Count(logs.String(), "journal sink"); n != 1 {
		t.Fatalf("the same sink error logged %d times over 3 steps; want once:\n%s", n, logs.String())
	}
	fsys.setFull(false)
	d3 := c.Step(t0+2*sec, d2pInputs())
	if len(act.moves) != 1+len(d3.Moves) || act.moves[0] != d.Moves[0] {
		t.Fatalf("after a write succeeded the actuator got %+v; want the held move %+v first", act.moves, d.Moves[0])
	}
	if n := strings.Count(logs.String(), "journal sink"); n != 1 {
		t.Fatalf("sink errors logged %d times after recovery; want 1", n)
	}
	if j.Durable() != d3.Seq || j.Healthy() != nil {
		t.Fatalf("durable %d, healthy %v; want %d, nil", j.Durable(), j.Healthy(), d3.Seq)
	}
	c.MoveDone(id, t0+3*sec, nil)
	if c.Roles().RoleOf(id) != RolePrefill {
		t.Fatalf("%s after MoveDone: %v; want prefill", id, c.Roles().RoleOf(id))
	}
}

// A step at a time that is not a Unix time (a broken clock) is refused
// and changes nothing: before, it clamped every held time to it, so the
// saved state carried negative times that Validate, and so every
// restart, refused (found by fuzz.FuzzCoreAPISequence).
func TestStepRefusesNonPositiveTime(t *testing.T) {
	act := &recordingActuator{}
	c := newTestController(t, testConfig(), 4, 4, WithActuator(act))
	if d := c.Step(t0, d2pInputs()); d.Action != ActionMove {
		t.Fatalf("setup: want a move, got %s %q", d.Action, d.Blocked)
	}
	st, ver, latest := c.State(), c.Roles().Version, c.Newest(0)
	for _, at := range []int64{0, -1, -t0} {
		d := c.Step(at, d2pInputs())
		if d.Seq != 0 || d.Action != ActionHold || d.Reason != ReasonStepTime || len(d.Moves) != 0 {
			t.Fatalf("step at %d: got %+v; want a refused hold", at, d)
		}
		got := c.State()
		if err := got.Validate(0); err != nil {
			t.Fatalf("step at %d: the saved state is refused: %v", at, err)
		}
		if !reflect.DeepEqual(got, st) || c.Roles().Version != ver || len(c.Newest(0)) != len(latest) || len(act.moves) != 1 {
			t.Fatalf("step at %d changed the controller: %+v -> %+v", at, st, got)
		}
	}
	if d := c.Step(t0+sec, d2pInputs()); d.Seq != st.Seq+1 {
		t.Fatalf("the next step's seq %d; want %d", d.Seq, st.Seq+1)
	}
}

// An engine registered with a negative last move is refused: it was
// kept, saved as is, and the saved state refused by every restart
// (found by fuzz.FuzzCoreAPISequence).
func TestUpsertRefusesNegativeLastMove(t *testing.T) {
	c := newTestController(t, testConfig(), 1, 1)
	st := c.State()
	for _, es := range [][]Engine{{{ID: "x", Live: true, LastMoveNs: -1}}, {{ID: "y", Live: true}, {ID: "x", LastMoveNs: math.MinInt64}}} {
		if err := c.UpsertEngines(es); !errors.Is(err, ErrInvalidEngine) {
			t.Fatalf("upsert %+v: got %v; want ErrInvalidEngine", es, err)
		}
	}
	if got := c.State(); !reflect.DeepEqual(got, st) || got.Validate(0) != nil {
		t.Fatalf("refused engines changed the saved state: %+v -> %+v", st, got)
	}
}

// failingSink fails every write while full is set.
type failingSink struct{ full bool }

func (s *failingSink) Write(*Decision) error {
	if s.full {
		return errors.New("disk full")
	}
	return nil
}

func (s *failingSink) Close() error { return nil }

// A move held for its journal record is dropped when its engine stops
// moving before the record is written (removed and registered again, or
// completed by MoveDone): handed over later it drained an engine serving
// in another role, or one the table no longer held, and the held list
// grew with engine churn while the disk stayed full (found by
// fuzz.FuzzCoreAPISequence). Registered in place in another role, the
// engine serves in that role at once (found by the same fuzzer in CI:
// the move from its old role was handed over after the disk recovered).
func TestHeldMoveDroppedWhenItsEngineStopsMoving(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, c *Controller, id string)
	}{
		{"removed and registered again", func(t *testing.T, c *Controller, id string) {
			if err := c.RemoveEngine(id); err != nil {
				t.Fatal(err)
			}
			if err := c.UpsertEngine(Engine{ID: id, Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, c *Controller, id string) {
			if err := c.RemoveEngine(id); err != nil {
				t.Fatal(err)
			}
		}},
		{"move done", func(_ *testing.T, c *Controller, id string) { c.MoveDone(id, t0+sec/2, errors.New("undone")) }},
		{"registered in place in another role", func(t *testing.T, c *Controller, id string) {
			// The held move takes the engine decode -> prefill; the
			// caller now says it is prefill (the move's target, as in the
			// fuzz input) and not live.
			if err := c.UpsertEngine(Engine{ID: id, Model: "facebook/opt-13b", GPU: "A100-80GB", Role: RolePrefill, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
			for _, e := range c.Engines() {
				if e.ID == id && (e.Role != RolePrefill || e.State != StateServing || e.TargetRole != RoleNone) {
					t.Fatalf("after the upsert: %+v; want it serving as prefill, no target", e)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act, sink := &recordingActuator{}, &failingSink{full: true}
			c := newTestController(t, testConfig(), 4, 4, WithActuator(act), WithSink(sink), WithLogger(slog.New(slog.DiscardHandler)))
			d := c.Step(t0, d2pInputs())
			if d.Action != ActionMove || len(d.Moves) != 1 || len(act.moves) != 0 {
				t.Fatalf("setup: want one held move; got %s %q, actuator %+v", d.Action, d.Blocked, act.moves)
			}
			stale := d.Moves[0]
			tc.after(t, c, stale.EngineID)
			sink.full = false
			c.Step(t0+sec, d2pInputs())
			for _, m := range act.moves {
				if m == stale {
					t.Fatalf("the held move %+v was handed over after its engine stopped moving", m)
				}
			}
		})
	}
	// The control: registered in place in the role it holds, the engine
	// keeps its held move, handed over once the record is written.
	act, sink := &recordingActuator{}, &failingSink{full: true}
	c := newTestController(t, testConfig(), 4, 4, WithActuator(act), WithSink(sink), WithLogger(slog.New(slog.DiscardHandler)))
	d := c.Step(t0, d2pInputs())
	if len(d.Moves) != 1 {
		t.Fatalf("setup: want one held move; got %s %q", d.Action, d.Blocked)
	}
	m := d.Moves[0]
	if err := c.UpsertEngine(Engine{ID: m.EngineID, Model: "facebook/opt-13b", GPU: "A100-80GB", Role: m.From, Live: true, KVCapacityTokens: 66144}); err != nil {
		t.Fatal(err)
	}
	sink.full = false
	c.Step(t0+sec, d2pInputs())
	if len(act.moves) == 0 || act.moves[0] != m {
		t.Fatalf("after the write succeeded the actuator got %+v; want the held move %+v first", act.moves, m)
	}
}
