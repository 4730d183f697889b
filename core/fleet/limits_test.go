package fleet

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/wire"
)

const now = int64(1_700_000_000e9) // a wall-clock-like core time

func hb(node string, epoch, seq uint64) *wire.Report {
	return &wire.Report{Kind: wire.KindHeartbeat, Node: node, Epoch: epoch, Seq: seq}
}

// Issue 16 defect 3: one report with epoch 2^64-1 made the node's real
// agent stale for good. It is refused (ErrFutureEpoch) and not adopted:
// the agent's next report is accepted and its engines stay live.
func TestAbsurdAgentEpochIsRefusedNotAdopted(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	epoch := uint64(now - 60e9) // started a minute ago
	if err := r.Apply(now, snap("n1", epoch, 1, eng("e1", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []uint64{math.MaxUint64, uint64(math.MaxInt64), uint64(now + 3600e9)} {
		if err := r.Apply(now+1e9, hb("n1", bad, 1)); !errors.Is(err, ErrFutureEpoch) {
			t.Fatalf("epoch %d: %v; want ErrFutureEpoch", bad, err)
		}
	}
	if n := r.Nodes(); n[0].Epoch != epoch {
		t.Fatalf("node epoch %d after absurd reports; want %d (not adopted)", n[0].Epoch, epoch)
	}
	if err := r.Apply(now+2e9, snap("n1", epoch, 2, eng("e1", true, 2, 10))); err != nil {
		t.Fatalf("the real agent's next report: %v; want accepted", err)
	}
	if e := s.get("e1"); !e.Live || e.Resident.KVTokens != 2 {
		t.Fatalf("engine %+v; want live with the new residency", e)
	}
	// An unknown node with an absurd epoch is not created either.
	if err := r.Apply(now, hb("n2", math.MaxUint64, 1)); !errors.Is(err, ErrFutureEpoch) || len(r.Nodes()) != 1 {
		t.Fatalf("new node with an absurd epoch: %v, %d nodes; want ErrFutureEpoch and 1 node", err, len(r.Nodes()))
	}
}

// Issue 16 (Build, agents): a node whose agent restarts with a lower
// epoch (its clock set back) is refused while the node is fresh and
// recovers once the node is stale.
func TestLowerEpochRecoversOnceNodeIsStale(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	if err := r.Apply(now, snap("n1", uint64(now), 1, eng("e1", true, 1, 10))); err != nil {
		t.Fatal(err)
	}
	lower := uint64(now - 100e9)
	if err := r.Apply(now+1e9, hb("n1", lower, 1)); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("lower epoch while fresh: %v; want ErrStaleEpoch", err)
	}
	r.Sweep(now + 7e9)
	if s.get("e1").Live {
		t.Fatal("engine live after its node went stale")
	}
	if err := r.Apply(now+8e9, snap("n1", lower, 1, eng("e1", true, 1, 10))); err != nil {
		t.Fatalf("lower epoch once stale: %v; want accepted", err)
	}
	if n := r.Nodes(); n[0].Epoch != lower || n[0].Stale || !s.get("e1").Live {
		t.Fatalf("node %+v engine %+v; want the lower epoch adopted and the engine live", n[0], s.get("e1"))
	}
}

// Issue 16 defect 10: heartbeats from invented node names are bounded
// (agents.max_nodes) and forgotten after a long silence, so memory comes
// back.
func TestInventedNodeHeartbeatsAreBounded(t *testing.T) {
	r := NewRegistry(newFakeSink(), 5e9, nil, WithLimits(Limits{MaxNodes: 100, MaxEngines: 3, ForgetAfterNs: 60e9}))
	var full int
	for i := range 1000 {
		if err := r.Apply(now, hb(fmt.Sprintf("invented-%d", i), 1, 1)); errors.Is(err, ErrFull) {
			full++
		}
	}
	if len(r.Nodes()) != 100 || full != 900 {
		t.Fatalf("%d nodes, %d refused as full; want 100 and 900", len(r.Nodes()), full)
	}
	r.Sweep(now + 10e9) // stale, not yet forgotten
	if len(r.Nodes()) != 100 {
		t.Fatalf("%d nodes after staleness; want 100 until forget_after", len(r.Nodes()))
	}
	r.Sweep(now + 61e9)
	if len(r.Nodes()) != 0 {
		t.Fatalf("%d nodes after a long silence; want 0 (forgotten)", len(r.Nodes()))
	}
	if err := r.Apply(now+62e9, snap("real", 1, 1, eng("a", true, 1, 1), eng("b", true, 1, 1), eng("c", true, 1, 1), eng("d", true, 1, 1))); err != nil {
		t.Fatalf("a real node after the invented ones were forgotten: %v", err)
	}
	if n := r.Nodes(); len(n) != 1 || n[0].Engines != 3 {
		t.Fatalf("nodes %+v; want one with 3 engines (agents.max_engines)", n)
	}
}

// Issue 16 defect 10: registering engines is O(1) per engine: at 30k
// known engines registering 256 took 4.8 s (a copy of the engine table per
// engine under the registry lock). With the core's role table it is one
// map lookup; the registry's own work must not grow with the fleet.
func TestRegistrationCostDoesNotGrowWithKnownEngines(t *testing.T) {
	cost := func(known int) time.Duration {
		c, err := controller.New(controller.DefaultConfig(), controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 0.25, TPOTSLOS: 0.1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ks []controller.Engine
		for i := range known {
			ks = append(ks, controller.Engine{ID: fmt.Sprintf("k%d", i), Node: "k", Role: controller.RoleDecode, Live: true})
		}
		if err := c.UpsertEngines(ks); err != nil {
			t.Fatal(err)
		}
		r := NewRegistry(&batchSink{c: c}, 5e9, nil, WithLimits(Limits{MaxEngines: 1 << 20}))
		var es []wire.EngineReport
		for i := range 256 {
			es = append(es, eng(fmt.Sprintf("new%d", i), true, 1, 10))
		}
		runtime.GC()
		start := time.Now()
		if err := r.Apply(now, snap("n1", 1, 1, es...)); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	small, large := cost(10), cost(30000)
	t.Logf("registering 256 engines: %v beside 10 known, %v beside 30000", small, large)
	if large > 20*small+50*time.Millisecond {
		t.Fatalf("registering 256 engines: %v beside 10 known, %v beside 30000; want no growth with the fleet", small, large)
	}
}

// batchSink is the real controller behind the sink interfaces
// service.DurableCore offers (role table, batch registration).
type batchSink struct{ c *controller.Controller }

func (s *batchSink) UpsertEngine(e controller.Engine) error     { return s.c.UpsertEngine(e) }
func (s *batchSink) UpsertEngines(es []controller.Engine) error { return s.c.UpsertEngines(es) }
func (s *batchSink) UpdateEngine(id string, nowNs int64, res controller.Resident, capTok int64, live bool) error {
	return s.c.UpdateEngine(id, nowNs, res, capTok, live)
}
func (s *batchSink) Roles() *controller.RoleTable { return s.c.Roles() }

// A node's hello is applied (its engine list drops unlisted engines) and
// not kept: the registry has no reader for it, and each node's could
// hold up to http.max_body_bytes (GPU names, versions) for the node's
// whole life, agents.max_nodes times over.
func TestHelloIsNotRetained(t *testing.T) {
	r := NewRegistry(newFakeSink(), 5e9, nil)
	freed := make(chan struct{})
	func() {
		h := &wire.Hello{AgentVersion: strings.Repeat("v", 1<<20), Engines: []string{"e1"}}
		runtime.SetFinalizer(h, func(*wire.Hello) { close(freed) })
		if err := r.Apply(now, &wire.Report{Kind: wire.KindHello, Node: "n1", Epoch: 1, Seq: 1, Hello: h}); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.After(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			if n := r.Nodes(); len(n) != 1 || n[0].LastSeq != 1 {
				t.Fatalf("nodes %+v; want n1 at seq 1", n)
			}
			return
		case <-deadline:
			t.Fatal("the registry still holds the node's hello after applying it")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
