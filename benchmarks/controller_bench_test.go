package benchmarks

import (
	"fmt"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

const ctrlNow = int64(1_800_000_000e9)

// fullDemand returns arrivals and outputs histories whose every bucket of
// the demand window (60 × 1 s) holds 128 distinct exact shapes plus an
// overflow cohort: the most a step ever reads.
func fullDemand(b *testing.B) (arr, outs *buckets.History) {
	b.Helper()
	d, err := buckets.NewDemand(buckets.DemandConfig{BucketWidthNs: 1e9, DemandWindowNs: 60e9})
	if err != nil {
		b.Fatal(err)
	}
	arr, outs = d.History(buckets.KindArrivals), d.History(buckets.KindOutputs)
	for s := int64(0); s < 60; s++ {
		ts := ctrlNow - 59e9 + s*1e9
		for i := int64(0); i < 140; i++ {
			arr.Record(ts, buckets.Shape{Input: 200 + 7*i, Output: 64 + i})
		}
	}
	for s := int64(0); s < 240; s++ {
		ts := ctrlNow - 239e9 + s*1e9
		for i := int64(0); i < 140; i++ {
			outs.Record(ts, buckets.Shape{Input: 64 + i, Output: 32 + i/2})
		}
	}
	return arr, outs
}

func newBenchController(b *testing.B, engines int) *controller.Controller {
	b.Helper()
	tm := controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 0.25, TPOTSLOS: 0.1}
	c, err := controller.New(controller.DefaultConfig(), tm, controller.BuiltinProfiles())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < engines; i++ {
		r := controller.RolePrefill
		if i%2 == 1 {
			r = controller.RoleDecode
		}
		e := controller.Engine{ID: fmt.Sprintf("engine-%04d", i), Node: fmt.Sprintf("node-%03d", i/8), Model: "facebook/opt-13b", GPU: "A100-80GB",
			Role: r, Live: true, KVCapacityTokens: 66144,
			Resident: controller.Resident{QueuedPrefillS: float64(i%5) * 0.01, DecodeSeqs: int64(i % 17), KVTokens: int64(i%17) * 700}}
		if err := c.UpsertEngine(e); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkControllerStep: one controller step (freeze, score every split,
// gates, evidence, journal) over full windows of demand.
func BenchmarkControllerStep(b *testing.B) {
	arr, outs := fullDemand(b)
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprintf("engines=%d", n), func(b *testing.B) {
			c := newBenchController(b, n)
			in := controller.Inputs{Arrivals: arr, Outputs: outs,
				ObservedPrefill: controller.PhaseObservation{Count: 100, Mean: 0.6, Max: 1.2},
				ObservedDecode:  controller.PhaseObservation{Count: 100, Mean: 0.5, Max: 0.9}}
			c.Step(ctrlNow, in)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.Step(ctrlNow, in)
			}
		})
	}
}

var sinkID string

// BenchmarkRoleTableRead: what a router does per request: load the
// published table and pick an engine of a role.
func BenchmarkRoleTableRead(b *testing.B) {
	c := newBenchController(b, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := c.Roles()
		sinkID = t.Decode[i&31]
	}
}

// BenchmarkRoleTableReadParallel: the same from every core at once.
func BenchmarkRoleTableReadParallel(b *testing.B) {
	c := newBenchController(b, 64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var id string
		i := 0
		for pb.Next() {
			t := c.Roles()
			id = t.Prefill[i&31]
			i++
		}
		_ = id
	})
}

var sinkRole controller.Role

// BenchmarkRoleTableRoleOf: looking one engine's role up by id.
func BenchmarkRoleTableRoleOf(b *testing.B) {
	c := newBenchController(b, 64)
	ids := c.Roles().Decode
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sinkRole = c.Roles().RoleOf(ids[i&31])
	}
}
