//go:build cgo

package agent

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/narwhal-io/narwhal/internal/syncbuf"
	"github.com/narwhal-io/narwhal/nvml"
)

// How the agent reacts to what real GPUs answer NVML, through go-nvml's
// mock (package nvml's tests cover each answer's reading; these, what
// reaches the core, /healthz and /metrics).

// faults is a fault table for faultA100: "init", "count" and "<i>/handle"
// name the calls; a missing key answers SUCCESS.
type faults struct {
	mu sync.Mutex
	m  map[string]gonvml.Return
}

func (f *faults) get(k string) gonvml.Return {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k]
}

func (f *faults) set(m map[string]gonvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m = m
}

// faultA100 is mockServer's node named as the real part, with every call
// the agent's reads make answering (utilization 50 %; processes whose
// PIDs are no engine's: the agent maps engines to GPUs by its
// configuration, not by process) and failing as f says.
func faultA100(f *faults) *server.Server {
	s := mockServer(func(i int, dev *server.Device) {
		dev.Config.Name = "NVIDIA A100-SXM4-40GB"
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: 50}, gonvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return []gonvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 1 << 30}, {Pid: uint32(31337 + i), UsedGpuMemory: 37 << 30}}, gonvml.SUCCESS
		}
	})
	count, handle := s.DeviceGetCountFunc, s.DeviceGetHandleByIndexFunc
	s.InitFunc = func() gonvml.Return { return f.get("init") }
	s.DeviceGetCountFunc = func() (int, gonvml.Return) {
		if r := f.get("count"); r != gonvml.SUCCESS {
			return 0, r
		}
		return count()
	}
	s.DeviceGetHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if r := f.get(strconv.Itoa(i) + "/handle"); r != gonvml.SUCCESS {
			return nil, r
		}
		return handle(i)
	}
	return s
}

var geo8b = engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2} // 131,072 B per token

// boundA100 is the NVML bound of geo8b on a 40 GiB A100.
const boundA100 = int64(40<<30) / 131072

func byID(s wire.Snapshot) map[string]wire.EngineReport {
	m := map[string]wire.EngineReport{}
	for _, e := range s.Engines {
		m[e.ID] = e
	}
	return m
}

// One GPU of eight falls off the bus mid-run (ERROR_GPU_IS_LOST). Its
// engines' NVML bound becomes unknown, not the last one: the engine with
// no capacity of its own reports KV unknown (0, which the core counts as
// unknown), the one with its own keeps it, flagged as not cross-checked;
// both keep their GPU kind (a GPU kind flipping to "" would make the core
// re-register the engine on another profile). The engine on a healthy GPU
// is untouched. The fault is in /healthz (nvml.problems) and
// narwhal_agent_nvml_device_problems without failing health; when the GPU
// answers again, everything is as before.
func TestGPULostMidRunMakesItsEnginesKVUnknown(t *testing.T) {
	f := &faults{}
	s := faultA100(f)
	eng, _ := fakeEngine(t, "sglang.prom") // max_total_num_tokens 430,000
	lostUUID := s.Devices[3].(*server.Device).UUID
	cfg := Config{Node: "n", StaleAfterS: 5, ScrapeTimeoutS: 0.5, Engines: []EngineConfig{
		{ID: "ok-bound", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"0"}, Geometry: geo8b},
		{ID: "lost-bound", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"3"}, Geometry: geo8b},
		{ID: "lost-eng", Kind: engine.SGLang, MetricsURL: eng.URL, GPUs: []string{lostUUID}, Geometry: geo8b},
	}}
	a, err := New(cfg, WithNVML(nvml.NewManager(s, time.Second, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	healthy := func(at int64) {
		t.Helper()
		r := byID(a.Collect(ctx, at))
		for _, id := range []string{"ok-bound", "lost-bound"} {
			if e := r[id]; e.KVCapacityTokens != boundA100 || e.KVSource != engine.KVSourceBound || e.GPU != "A100-SXM-40GB" {
				t.Fatalf("at %d: %s %+v; want the NVML bound %d on A100-SXM-40GB", at, id, e, boundA100)
			}
		}
		if e := r["lost-eng"]; e.KVCapacityTokens != 430000 || !strings.Contains(e.KVDisagreement, "holds at most 327680") {
			t.Fatalf("at %d: lost-eng %+v; want 430,000 tokens over the bound", at, e)
		}
		if p := testutil.ToFloat64(a.nvmlProbs); p != 0 {
			t.Fatalf("at %d: %v device problems; want 0", at, p)
		}
	}
	healthy(1e9)

	f.set(map[string]gonvml.Return{"3/handle": gonvml.ERROR_GPU_IS_LOST})
	for _, at := range []int64{2e9, 3e9} {
		r := byID(a.Collect(ctx, at))
		if e := r["ok-bound"]; e.KVCapacityTokens != boundA100 {
			t.Fatalf("at %d: the engine on a healthy GPU %+v; want its bound", at, e)
		}
		if e := r["lost-bound"]; e.KVCapacityTokens != 0 || e.KVSource != "" || e.GPU != "A100-SXM-40GB" ||
			e.KVDisagreement != "KV limit unknown: engine reports no capacity and NVML memory unknown" {
			t.Fatalf("at %d: lost-bound %+v; want KV unknown, GPU kind kept", at, e)
		}
		if e := r["lost-eng"]; e.KVCapacityTokens != 430000 || e.KVSource != engine.KVSourceEngine || e.GPU != "A100-SXM-40GB" ||
			e.KVDisagreement != "not cross-checked: NVML memory unknown" || !e.Live {
			t.Fatalf("at %d: lost-eng %+v; want its own capacity, not cross-checked, GPU kind kept", at, e)
		}
		if g := testutil.ToFloat64(a.kvCap.WithLabelValues("lost-bound")); g != 0 {
			t.Fatalf("at %d: kv capacity metric %v; want 0", at, g)
		}
	}
	h := a.Health(3.5e9)
	if !h.OK || !h.NVML.Available || len(h.NVML.Problems) != 1 || h.NVML.Problems[0].Index != 3 || h.NVML.Problems[0].MemoryKnown ||
		h.NVML.Problems[0].Notes[0] != "DeviceGetHandleByIndex: ERROR_GPU_IS_LOST" {
		t.Fatalf("health %+v; want OK, with GPU 3's problem listed", h)
	}
	if p := testutil.ToFloat64(a.nvmlProbs); p != 1 {
		t.Fatalf("%v device problems; want 1", p)
	}

	f.set(nil) // reset, the GPU is back
	healthy(4e9)
	if h := a.Health(4.5e9); len(h.NVML.Problems) != 0 {
		t.Fatalf("health after recovery %+v; want no problem", h.NVML)
	}
}

// NVML unreadable as a whole. A transient error (ERROR_UNKNOWN on the
// device count) degrades NVML for its 1 s backoff: the collection in it
// keeps the GPUs' memory as last read (a GPU's total does not change in
// a second) and sends no busy time (no utilization was sampled); the next
// collection reads NVML again. A driver reload (ERROR_UNINITIALIZED, then
// Init failing with DRIVER_NOT_LOADED) outlasting stale_after_s makes the
// memory unknown, with one log line, so the bound is not reported as if
// fresh; the GPU kind stays; when the driver is back, the bound is.
func TestNVMLOutageKeepsThenDropsGPUMemory(t *testing.T) {
	f := &faults{}
	real, busyEng, body := earlierRealPage(t)
	var logs syncbuf.Buffer
	cfg := Config{Node: "n", StaleAfterS: 5, ScrapeTimeoutS: 0.5, Engines: []EngineConfig{
		{ID: "b", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"0"}, Geometry: geo8b},
		{ID: "busy", Kind: engine.VLLM, MetricsURL: busyEng.URL, GPUs: []string{"1"}},
	}}
	a, err := New(cfg, WithNVML(nvml.NewManager(faultA100(f), time.Second, nil)),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bound := func(at int64, want int64, up float64) wire.EngineReport {
		t.Helper()
		r := byID(a.Collect(ctx, at))
		e := r["b"]
		if e.KVCapacityTokens != want || e.GPU != "A100-SXM-40GB" {
			t.Fatalf("at %d: %+v; want KV %d on A100-SXM-40GB", at, e, want)
		}
		if g := testutil.ToFloat64(a.nvmlUp); g != up {
			t.Fatalf("at %d: narwhal_agent_nvml_available %v; want %v", at, g, up)
		}
		return r["busy"]
	}
	bound(10e9, boundA100, 1)

	f.set(map[string]gonvml.Return{"count": gonvml.ERROR_UNKNOWN})
	body.Store(real)
	if busy := bound(11e9, boundA100, 0); busy.Latency == nil || busy.Latency.BusyS != nil {
		t.Fatalf("busy engine's interval %+v; want one without busy_s (no utilization sampled)", busy.Latency)
	}
	f.set(nil)
	bound(12e9, boundA100, 1) // the 1 s retry is due: back

	f.set(map[string]gonvml.Return{"count": gonvml.ERROR_UNINITIALIZED, "init": gonvml.ERROR_DRIVER_NOT_LOADED})
	for _, at := range []int64{13e9, 14e9, 16e9, 17e9} { // within stale_after_s of the read at 12 s
		bound(at, boundA100, 0)
	}
	for _, at := range []int64{18e9, 19e9} {
		if e := byID(a.Collect(ctx, at))["b"]; e.KVCapacityTokens != 0 || e.GPU != "A100-SXM-40GB" ||
			e.KVDisagreement != "KV limit unknown: engine reports no capacity and NVML memory unknown" {
			t.Fatalf("at %d, NVML unread for 6 s: %+v; want KV unknown, GPU kind kept", at, e)
		}
	}
	f.set(nil)
	bound(20e9, boundA100, 1) // the retry due at 20 s finds the driver back
	if n, m := logs.Count("NVML not read within stale_after_s"), logs.Count("NVML read again"); n != 1 || m != 1 {
		t.Fatalf("log lines: %d stale, %d back; want one each", n, m)
	}
}
