package benchmarks

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/fleet"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/narwhal-io/narwhal/service"
)

// applier is the part of both registries the benchmarks call.
type applier interface {
	Apply(nowNs int64, rep *wire.Report) error
	Fresh(nowNs int64) bool
}

func fleetCore(b *testing.B) *core.Core {
	c, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchFleet: 512 nodes of 8 engines registered, then every goroutine
// sends reports of its own nodes (heartbeats, or snapshots of 8 engines)
// in parallel, as agents do.
func benchFleet(b *testing.B, r applier, kind wire.Kind) {
	const per = 8
	procs := runtime.GOMAXPROCS(0)
	nodes := 256 * procs
	reps := make([]*wire.Report, nodes)
	for n := range nodes {
		var es []wire.EngineReport
		for e := range per {
			es = append(es, wire.EngineReport{ID: fmt.Sprintf("n%d-e%d", n, e), Model: "facebook/opt-13b", GPU: "A100-80GB",
				Role: controller.RoleDecode, Live: true, KVCapacityTokens: 66144, RunningRequests: -1, QueuedRequests: -1})
		}
		reps[n] = &wire.Report{Kind: wire.KindSnapshot, Node: fmt.Sprintf("n%d", n), Epoch: 1, Seq: 1, Snapshot: &wire.Snapshot{Engines: es}}
		if err := r.Apply(benchNow, reps[n]); err != nil {
			b.Fatal(err)
		}
		if kind == wire.KindHeartbeat {
			reps[n] = &wire.Report{Kind: wire.KindHeartbeat, Node: reps[n].Node, Epoch: 1, Seq: 1}
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine owns the nodes n with n % procs == g (one agent
		// per node), so each node's sequence numbers only grow.
		g := int(next.Add(1)-1) % procs
		i := 0
		for pb.Next() {
			n := (g + procs*i) % nodes
			i++
			rep := *reps[n]
			rep.Seq = uint64(i) + 1
			if err := r.Apply(benchNow, &rep); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkFleetReportsHeartbeat: the xsync registry (a lock per node in
// an xsync.MapOf) vs the mutex baseline; heartbeats touch only the
// registry.
func BenchmarkFleetReportsHeartbeat(b *testing.B) {
	b.Run("xsync", func(b *testing.B) { benchFleet(b, fleet.NewRegistry(fleetCore(b), 15e9, nil), wire.KindHeartbeat) })
	b.Run("mutex-baseline", func(b *testing.B) { benchFleet(b, newMutexRegistry(fleetCore(b), 15e9, nil), wire.KindHeartbeat) })
}

// BenchmarkFleetReportsSnapshot: snapshots of 8 engines each (the core's
// engine table is updated for every engine).
func BenchmarkFleetReportsSnapshot(b *testing.B) {
	b.Run("xsync", func(b *testing.B) { benchFleet(b, fleet.NewRegistry(fleetCore(b), 15e9, nil), wire.KindSnapshot) })
	b.Run("mutex-baseline", func(b *testing.B) { benchFleet(b, newMutexRegistry(fleetCore(b), 15e9, nil), wire.KindSnapshot) })
}

// BenchmarkFleetFresh: /readyz's question at 4096 nodes.
func BenchmarkFleetFresh(b *testing.B) {
	for _, tc := range []struct {
		name string
		r    applier
	}{{"xsync", fleet.NewRegistry(fleetCore(b), 15e9, nil)}, {"mutex-baseline", newMutexRegistry(fleetCore(b), 15e9, nil)}} {
		for n := range 4096 {
			if err := tc.r.Apply(benchNow-int64(n), &wire.Report{Kind: wire.KindHeartbeat, Node: fmt.Sprintf("n%d", n), Epoch: 1, Seq: 1}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !tc.r.Fresh(benchNow) {
					b.Fatal("not fresh")
				}
			}
		})
	}
}

// BenchmarkFleetRegister256At30k: registering 256 new engines with 30,000
// already known to the core (issue 16: 4.8 s under the old lock).
func BenchmarkFleetRegister256At30k(b *testing.B) {
	run := func(b *testing.B, mk func(c *service.DurableCore) applier) {
		cfg := service.DefaultConfig()
		c, err := service.NewCore(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		var ks []controller.Engine
		for i := range 30000 {
			ks = append(ks, controller.Engine{ID: fmt.Sprintf("k%d", i), Node: "k", Role: controller.RoleDecode, Live: true})
		}
		if err := c.UpsertEngines(ks); err != nil {
			b.Fatal(err)
		}
		r := mk(c)
		round := 0
		for b.Loop() {
			round++
			var es []wire.EngineReport
			for e := range 256 {
				es = append(es, wire.EngineReport{ID: fmt.Sprintf("r%d-e%d", round, e), Model: "facebook/opt-13b", GPU: "A100-80GB",
					Live: true, KVCapacityTokens: 66144, RunningRequests: -1, QueuedRequests: -1})
			}
			if err := r.Apply(benchNow, &wire.Report{Kind: wire.KindSnapshot, Node: fmt.Sprintf("new%d", round), Epoch: 1, Seq: 1,
				Snapshot: &wire.Snapshot{Engines: es}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("xsync", func(b *testing.B) {
		run(b, func(c *service.DurableCore) applier {
			return fleet.NewRegistry(c, 15e9, nil, fleet.WithLimits(fleet.Limits{MaxEngines: 1 << 22}))
		})
	})
	b.Run("mutex-baseline", func(b *testing.B) {
		run(b, func(c *service.DurableCore) applier { return newMutexRegistry(c.Core, 15e9, nil) })
	})
}
