package ui

import (
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

type fakeSource struct{}

func (fakeSource) State(nowNs int64) core.State {
	d := &controller.Decision{}
	d.Snapshot.Short = controller.HorizonDemand{RatePerS: 10, MeanInput: 1000, MeanOutput: 200}
	return core.State{AtNs: nowNs, LatestDecision: d,
		Engines: []controller.Engine{
			{ID: "p", Role: controller.RolePrefill, Live: true},
			{ID: "d", Role: controller.RoleDecode, Live: true},
			{ID: "m", Role: controller.RoleDecode, State: controller.StateDraining, Live: true},
			{ID: "x", Role: controller.RolePrefill, Live: false},
		},
		Attainment: core.AttainmentState{ByOutcome: map[string]buckets.Counts{
			"completed": {Total: 8, TTFTMet: 6, TPOTMet: 8}, "failed": {Total: 2},
		}},
	}
}

// The sample reads roles, offered demand and attainment from the state,
// and the ring keeps the newest MaxSamples: memory is bounded.
func TestSamplesAreBoundedAndRight(t *testing.T) {
	now := int64(1e18)
	p := New(fakeSource{}, func() int64 { return now })
	for i := 0; i < MaxSamples+100; i++ {
		if !p.Sample() {
			t.Fatalf("sample %d not taken", i)
		}
		now += 1e9
	}
	s := p.Series()
	if len(s) != MaxSamples {
		t.Fatalf("got %d samples; want %d", len(s), MaxSamples)
	}
	if first := int64(1e18) + 100*1e9; s[0].AtNs != first || s[len(s)-1].AtNs != now-1e9 {
		t.Fatalf("ring holds %d..%d; want %d..%d", s[0].AtNs, s[len(s)-1].AtNs, first, now-1e9)
	}
	want := Sample{AtNs: s[0].AtNs, Prefill: 1, Decode: 1, Moving: 1, Down: 1,
		PrefillTokensPerS: 10000, DecodeTokensPerS: 2000, Finished: 10, TTFTMet: 0.6, TPOTMet: 0.8}
	if s[0] != want {
		t.Fatalf("unexpected sample; got %+v; want %+v", s[0], want)
	}
}
