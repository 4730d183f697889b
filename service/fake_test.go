package service

import (
	"context"
	"fmt"
	"github.com/narwhal-io/narwhal/core"
	"log/slog"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service/servicetest"
)

// fakeCore is the full Core for handler-chain tests: the recorder for
// events, a small engine table, a counter of steps.
type fakeCore struct {
	*servicetest.Recorder
	mu      sync.Mutex
	engines []controller.Engine
	steps   int
	closed  bool
	gauge   prometheus.Gauge
}

func newFakeCore(engines ...string) *fakeCore {
	f := &fakeCore{Recorder: servicetest.NewRecorder(engines...)}
	for _, id := range engines {
		f.engines = append(f.engines, controller.Engine{ID: id, Role: controller.RolePrefill, Live: true})
	}
	f.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "narwhal_fake_steps", Help: "Steps taken by the fake core."})
	return f
}

func (f *fakeCore) UpsertEngine(e controller.Engine) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.engines = append(f.engines, e)
	return nil
}
func (f *fakeCore) UpdateEngine(string, int64, controller.Resident, int64, bool) error { return nil }
func (f *fakeCore) Engines() []controller.Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]controller.Engine(nil), f.engines...)
}
func (f *fakeCore) Roles() *roleTable { return &roleTable{Version: 1, Prefill: []string{"e1"}} }
func (f *fakeCore) Step(nowNs int64) decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.steps++
	f.gauge.Set(float64(f.steps))
	return decision{Seq: uint64(f.steps), AtNs: nowNs}
}
func (f *fakeCore) Run(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (f *fakeCore) State(nowNs int64) coreState {
	var st coreState
	st.AtNs = nowNs
	st.Engines = f.Engines()
	st.DemandHistory.Unsized.Pending = f.Pending()
	st.EvidenceSeq = uint64(f.Len()) // the fake's stand-in for "something changed"
	return st
}
func (f *fakeCore) Decisions(since uint64, limit int) []decision {
	return []decision{{Seq: since + 1, Reason: fmt.Sprintf("limit=%d", limit)}}
}
func (f *fakeCore) Collectors() []prometheus.Collector { return []prometheus.Collector{f.gauge} }
func (f *fakeCore) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// metricsCore is the core whose collectors the promtool test lints.
func metricsCore(t *testing.T) Core {
	c := newRealCore(t, "e1", "e2")
	c.Step(testNow - 1e9)
	return c
}

// newRealCore is the facade with default config and the given engines
// (OPT-13B on A100-80GB, the built-in profile), half prefill, half decode.
func newRealCore(t testing.TB, engines ...string) *core.Core {
	t.Helper()
	return newRealCoreWith(t, core.DefaultConfig(), engines...)
}

// newRealCoreWith is newRealCore with cfg.
func newRealCoreWith(t testing.TB, cfg core.Config, engines ...string) *core.Core {
	t.Helper()
	c, err := core.New(cfg, core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range engines {
		role := controller.RolePrefill
		if i%2 == 1 {
			role = controller.RoleDecode
		}
		if err := c.UpsertEngine(controller.Engine{ID: id, Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB",
			Role: role, Live: true, KVCapacityTokens: 66144}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
