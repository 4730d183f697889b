package fleet

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/wire"
)

// fakeSink is a mutex-and-map engine table.
type fakeSink struct {
	mu      sync.Mutex
	engines map[string]controller.Engine
	upserts int
	updates int
	refuse  string
}

func newFakeSink() *fakeSink { return &fakeSink{engines: map[string]controller.Engine{}} }

func (s *fakeSink) UpsertEngine(e controller.Engine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.ID == s.refuse {
		return errors.New("refused")
	}
	s.upserts++
	s.engines[e.ID] = e
	return nil
}

func (s *fakeSink) UpdateEngine(id string, nowNs int64, res controller.Resident, capTokens int64, live bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.engines[id]
	if !ok {
		return fmt.Errorf("unknown engine %q", id)
	}
	s.updates++
	e.Resident, e.KVCapacityTokens, e.Live = res, capTokens, live
	s.engines[id] = e
	return nil
}

func (s *fakeSink) get(id string) controller.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engines[id]
}

func snap(node string, epoch, seq uint64, engines ...wire.EngineReport) *wire.Report {
	return &wire.Report{Kind: wire.KindSnapshot, Node: node, Epoch: epoch, Seq: seq,
		Snapshot: &wire.Snapshot{Engines: engines}}
}

func eng(id string, live bool, kvTokens, capTokens int64) wire.EngineReport {
	return wire.EngineReport{ID: id, Model: "llama-3-8b", GPU: "H100", Role: controller.RoleDecode, Live: live,
		Resident: controller.Resident{DecodeSeqs: 3, KVTokens: kvTokens}, KVCapacityTokens: capTokens}
}

func TestApplyOrder(t *testing.T) {
	r := NewRegistry(newFakeSink(), 5e9, nil)
	f := func(epoch, seq uint64, want error) {
		t.Helper()
		err := r.Apply(1e9, &wire.Report{Kind: wire.KindHeartbeat, Node: "n1", Epoch: epoch, Seq: seq})
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("epoch %d seq %d: unexpected error; got %v; want %v", epoch, seq, err, want)
		}
	}
	f(100, 1, nil)
	f(100, 2, nil)
	f(100, 2, ErrReplay) // replayed
	f(100, 1, ErrReplay) // out of order
	f(100, 7, nil)       // gaps are fine
	f(99, 8, ErrStaleEpoch)
	f(101, 1, nil) // restarted agent: new epoch, sequence starts over
	f(100, 9, ErrStaleEpoch)
	f(101, 1, ErrReplay)
	f(101, 0, wire.ErrInvalid)
	f(0, 3, wire.ErrInvalid)
	if got := r.Nodes(); len(got) != 1 || got[0].Epoch != 101 || got[0].LastSeq != 1 {
		t.Fatalf("unexpected nodes; got %+v; want epoch 101 last_seq 1", got)
	}
}

func TestSnapshotUpsertsThenUpdates(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("e1", true, 100, 91056))); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(2e9, snap("n1", 10, 2, eng("e1", true, 250, 91056))); err != nil {
		t.Fatal(err)
	}
	e := s.get("e1")
	if e.Node != "n1" || e.Model != "llama-3-8b" || e.Role != controller.RoleDecode || !e.Live ||
		e.KVCapacityTokens != 91056 || e.Resident.KVTokens != 250 || e.Resident.DecodeSeqs != 3 {
		t.Fatalf("unexpected engine; got %+v", e)
	}
	if s.upserts != 1 || s.updates != 2 {
		t.Fatalf("unexpected sink calls; got %d upserts %d updates; want 1, 2", s.upserts, s.updates)
	}
	// a replayed old snapshot changes nothing
	if err := r.Apply(3e9, snap("n1", 10, 1, eng("e1", true, 100, 91056))); !errors.Is(err, ErrReplay) {
		t.Fatalf("unexpected error; got %v; want ErrReplay", err)
	}
	if got := s.get("e1").Resident.KVTokens; got != 250 {
		t.Fatalf("replay changed kv tokens; got %d; want 250", got)
	}
}

func TestSweepMarksNotLiveOnce(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("e1", true, 1, 10), eng("e2", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	r.Sweep(6e9) // exactly at the staleness: still fresh
	if !s.get("e1").Live || !r.Fresh(6e9) {
		t.Fatal("engine marked not live at exactly the staleness")
	}
	r.Sweep(6e9 + 1)
	if s.get("e1").Live || s.get("e2").Live || r.Fresh(6e9+1) {
		t.Fatal("engines still live after staleness")
	}
	updates := s.updates
	r.Sweep(7e9)
	if s.updates != updates {
		t.Fatalf("second sweep updated again; got %d updates; want %d", s.updates, updates)
	}
	if n := r.Nodes(); !n[0].Stale {
		t.Fatal("node not stale")
	}
	// the node comes back with a new epoch: accepted, engines live again
	if err := r.Apply(8e9, snap("n1", 11, 1, eng("e1", true, 1, 10), eng("e2", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	if !s.get("e1").Live || r.Nodes()[0].Stale {
		t.Fatal("engines not live after the node came back")
	}
}

func TestLivenessAndUnlisted(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("e1", true, 1, 10), eng("e2", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	err := r.Apply(1e9, &wire.Report{Kind: wire.KindLiveness, Node: "n1", Epoch: 10, Seq: 2,
		Liveness: &wire.Liveness{Engine: "e1", Live: false, Reason: "exit", PID: 42}})
	if err != nil {
		t.Fatal(err)
	}
	if e := s.get("e1"); e.Live || e.Resident.KVTokens != 1 {
		t.Fatalf("unexpected engine after exit event; got %+v; want not live, residency kept", e)
	}
	// a snapshot that no longer lists e2 marks it not live
	if err := r.Apply(2e9, snap("n1", 10, 3, eng("e1", false, 0, 10))); err != nil {
		t.Fatal(err)
	}
	if s.get("e2").Live {
		t.Fatal("unlisted engine still live")
	}
	// liveness for an unknown engine is accepted and ignored
	err = r.Apply(2e9, &wire.Report{Kind: wire.KindLiveness, Node: "n1", Epoch: 10, Seq: 4,
		Liveness: &wire.Liveness{Engine: "nope", Live: false}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEngineConflict(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("e1", true, 5, 10))); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(1e9, snap("n2", 10, 1, eng("e1", true, 7, 10))); err != nil {
		t.Fatal(err)
	}
	if e := s.get("e1"); e.Node != "n1" || e.Resident.KVTokens != 5 {
		t.Fatalf("second node overwrote a fresh node's engine; got %+v", e)
	}
	r.Sweep(20e9)
	// n1 is stale: n2 may take the id over
	if err := r.Apply(21e9, snap("n2", 10, 2, eng("e1", true, 7, 10))); err != nil {
		t.Fatal(err)
	}
	if e := s.get("e1"); e.Node != "n2" || e.Resident.KVTokens != 7 || !e.Live {
		t.Fatalf("takeover failed; got %+v", e)
	}
}

func TestSinkRefusalDoesNotStopBatch(t *testing.T) {
	s := newFakeSink()
	s.refuse = "bad"
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("bad", true, 1, 1), eng("e1", true, 1, 1))); err != nil {
		t.Fatal(err)
	}
	if !s.get("e1").Live {
		t.Fatal("good engine not applied after a refused one")
	}
}

// listingSink also lists its engines, like *core.Core.
type listingSink struct{ *fakeSink }

func (s listingSink) Engines() []controller.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []controller.Engine
	for _, e := range s.engines {
		out = append(out, e)
	}
	return out
}

func TestAgentRoleIsInitialOnly(t *testing.T) {
	s := listingSink{newFakeSink()}
	s.engines["e1"] = controller.Engine{ID: "e1", Role: controller.RolePrefill} // the controller moved it
	r := NewRegistry(s, 5e9, nil)
	// the agent still says decode (its configured initial role)
	if err := r.Apply(1e9, snap("n1", 10, 1, eng("e1", true, 1, 10), eng("e2", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	if got := s.get("e1").Role; got != controller.RoleNone {
		t.Fatalf("known engine upserted with role %v; want RoleNone (the controller keeps its role)", got)
	}
	if got := s.get("e2").Role; got != controller.RoleDecode {
		t.Fatalf("new engine upserted with role %v; want the agent's decode", got)
	}
}

func BenchmarkApplySnapshot8Engines(b *testing.B) {
	r := NewRegistry(newFakeSink(), 5e9, nil)
	var es []wire.EngineReport
	for i := 0; i < 8; i++ {
		es = append(es, eng(fmt.Sprintf("e%d", i), true, 100, 91056))
	}
	rep := snap("n1", 1, 1, es...)
	b.ReportAllocs()
	for b.Loop() {
		rep.Seq++
		if err := r.Apply(1e9, rep); err != nil {
			b.Fatal(err)
		}
	}
}
