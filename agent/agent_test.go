package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/liveness"
	"github.com/narwhal-io/narwhal/nvml"
)

func TestCollectLivenessAndHealth(t *testing.T) {
	eng, body := fakeEngine(t, "sglang.prom")
	cfg := Config{Node: "n", StaleAfterS: 1, Engines: []EngineConfig{{
		ID: "s1", Kind: engine.SGLang, MetricsURL: eng.URL, PID: 4242, Port: 30000, GPUs: []string{"0"},
		Geometry: engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2},
	}}}
	a, err := New(cfg, WithNVML(mockA100(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if h := a.Health(1e9); h.OK {
		t.Fatal("healthy before any collection")
	}
	snap := a.Collect(ctx, 10e9)
	e := snap.Engines[0]
	// SGLang max_total_num_tokens 430,000 > NVML bound 40 GiB / 131,072 B = 327,680: disagreement reported
	if !e.Live || e.KVCapacityTokens != 430000 || e.KVSource != engine.KVSourceEngine || e.Resident.KVTokens != 30123 ||
		e.Resident.DecodeSeqs != 24 || e.QueuedRequests != 5 || !strings.Contains(e.KVDisagreement, "holds at most 327680") {
		t.Fatalf("unexpected report; got %+v", e)
	}
	if h := a.Health(10.5e9); !h.OK {
		t.Fatalf("unhealthy right after a collection; got %+v", h)
	}
	if h := a.Health(11.5e9); h.OK || len(h.Problems) != 2 {
		t.Fatalf("healthy with stale data; got %+v", h)
	}
	// the process exits: not live at once, and stays not live even if the
	// port still answers in the same instant
	a.HandleLiveness(liveness.Event{Kind: liveness.Exited, PID: 4242, AtNs: 11e9})
	a.HandleLiveness(liveness.Event{Kind: liveness.Exited, PID: 9999, AtNs: 11e9}) // not ours
	a.mu.Lock()
	rep := a.reportLocked(a.engines[0])
	a.mu.Unlock()
	if rep.Live || !strings.Contains(rep.ScrapeError, "exit") {
		t.Fatalf("engine live after its exit; got %+v", rep)
	}
	// engine gone: scrape fails, still not live
	body.Store([]byte("<html>502</html>"))
	if e := a.Collect(ctx, 12e9).Engines[0]; e.Live || !strings.Contains(e.ScrapeError, "exposition format") ||
		e.KVCapacityTokens != 430000 {
		t.Fatalf("unexpected report for a dead engine; got %+v", e)
	}
	// restarted: a successful scrape after the exit makes it live again
	b, _ := os.ReadFile(filepath.Join("testdata", "sglang.prom"))
	body.Store(b)
	if e := a.Collect(ctx, 13e9).Engines[0]; !e.Live || e.ScrapeError != "" {
		t.Fatalf("restarted engine not live; got %+v", e)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	f := func(body, wantErr string) {
		t.Helper()
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p)
		if wantErr == "" {
			if err != nil {
				t.Fatalf("unexpected error; got %v", err)
			}
			if c.ScrapeIntervalS != 1 || c.QueueSize != 256 || c.Engines[0].Geometry.Layers != 32 {
				t.Fatalf("unexpected config; got %+v", c)
			}
			return
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("unexpected error; got %v; want ErrConfig containing %q", err, wantErr)
		}
	}
	good := `node: n1
core_url: http://narwhal-core:8080/v1/agent/reports
engines:
  - id: e1
    kind: vllm
    metrics_url: http://127.0.0.1:8000/metrics
    port: 8000
    gpus: ["0"]
    role: prefill
    geometry: {layers: 32, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tp: 1}
`
	f(good, "")
	f(good+"bogus: 1\n", "field bogus not found")
	f(strings.Replace(good, "kind: vllm", "kind: trt", 1), "engines[0].kind = trt")
	f(strings.Replace(good, "role: prefill", "role: both", 1), "engines[0].role = both")
	f(strings.Replace(good, "http://narwhal-core", "narwhal-core", 1), "core_url")
	f(strings.Replace(good, "layers: 32", "layers: -1", 1), "engines[0].geometry")
	f(good+"scrape_interval_s: -1\n", "scrape_interval_s = -1")
	f(strings.Replace(good, "port: 8000", "port: 8000\n    netns: var/run/netns/x", 1), "engines[0].netns")
	// a second engine on the same node and port: each must name its
	// namespace
	second := `  - id: e2
    kind: vllm
    metrics_url: http://127.0.0.1:8001/metrics
    port: 8000
`
	f(good+second, "engines[1].port = 8000: shared with engines[0]")
	f(good+second+"    pid: 77\n", "engines[1].port = 8000: shared with engines[0]")
	f(strings.Replace(good, "port: 8000", "port: 8000\n    netns: /var/run/netns/a", 1)+second+"    pid: 77\n", "")
	f(strings.Replace(good, "port: 8000", "port: 8000\n    node: n1", 1)+second+"    node: n2\n", "")
	// tp: the engine's tensor-parallel degree, one value with geometry.tp
	f(strings.Replace(good, "role: prefill", "role: prefill\n    tp: -1", 1), "engines[0].tp = -1")
	f(strings.Replace(good, "role: prefill", "role: prefill\n    tp: 2000", 1), "engines[0].tp = 2000")
	f(strings.Replace(good, "role: prefill", "role: prefill\n    tp: 4", 1), "engines[0].tp = 4: differs from geometry.tp 1")
	// A second document used to be ignored, whatever it said; an empty
	// file was refused as a bare "EOF".
	f(good+"---\nscrape_interval_s: -1\n", "c.yaml: more than one YAML document")
	f(good+"---\n", "c.yaml: more than one YAML document")
	f("", "c.yaml: empty file, no configuration")
	f("# nothing but a comment\n", "c.yaml: empty file, no configuration")
}

// fakeWatcher records registrations.
type fakeWatcher struct {
	pids  []int32
	socks []liveness.Socket
	ch    chan liveness.Event
}

func (f *fakeWatcher) WatchPID(pid int32) error          { f.pids = append(f.pids, pid); return nil }
func (f *fakeWatcher) UnwatchPID(int32) error            { return nil }
func (f *fakeWatcher) WatchPort(s liveness.Socket) error { f.socks = append(f.socks, s); return nil }
func (f *fakeWatcher) UnwatchPort(liveness.Socket) error { return nil }
func (f *fakeWatcher) Events() <-chan liveness.Event     { return f.ch }
func (f *fakeWatcher) Source() string                    { return "fake" }
func (f *fakeWatcher) Dropped() uint64                   { return 0 }
func (f *fakeWatcher) Close() error                      { close(f.ch); return nil }

// Two engines on one node listen on port 8000 in their own network
// namespaces (pods): a port event goes to the engine of its namespace
// only; an engine without a namespace takes its port from any.
func TestPortEventsGoToTheEngineOfTheirNamespace(t *testing.T) {
	dir := t.TempDir()
	nsFile := func(name string) (string, uint32) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		ino, err := liveness.NetNSOf(p)
		if err != nil {
			t.Fatal(err)
		}
		return p, ino
	}
	pa, nsA := nsFile("a")
	pb, nsB := nsFile("b")
	eng := func(id, netns string, port uint16) EngineConfig {
		return EngineConfig{ID: id, Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", Port: port, NetNS: netns}
	}
	cfg := Config{Node: "n", Engines: []EngineConfig{eng("a", pa, 8000), eng("b", pb, 8000), eng("c", "", 9000)}}
	w := &fakeWatcher{ch: make(chan liveness.Event)}
	a, err := New(cfg, WithWatcher(w, ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.Run(ctx) // registers the watches, then returns at once
	want := []liveness.Socket{{NetNS: nsA, Port: 8000}, {NetNS: nsB, Port: 8000}, {Port: 9000}}
	if len(w.socks) != len(want) {
		t.Fatalf("watched %v; want %v", w.socks, want)
	}
	for i := range want {
		if w.socks[i] != want[i] {
			t.Fatalf("watched %v; want %v", w.socks, want)
		}
	}
	dead := func() string {
		a.mu.Lock()
		defer a.mu.Unlock()
		var out []string
		for _, e := range a.engines {
			if e.deadAtNs != 0 {
				out = append(out, e.cfg.ID)
			}
		}
		return strings.Join(out, ",")
	}
	a.HandleLiveness(liveness.Event{Kind: liveness.PortClosed, Port: 8000, NetNS: nsA + nsB + 1, AtNs: 1}) // a third pod
	if got := dead(); got != "" {
		t.Fatalf("another namespace's close marked %q dead", got)
	}
	a.HandleLiveness(liveness.Event{Kind: liveness.PortClosed, Port: 8000, NetNS: nsB, AtNs: 2})
	if got := dead(); got != "b" {
		t.Fatalf("dead after b's close: %q; want b", got)
	}
	a.HandleLiveness(liveness.Event{Kind: liveness.PortClosed, Port: 9000, NetNS: nsA, AtNs: 3})
	if got := dead(); got != "b,c" {
		t.Fatalf("dead after a close on c's port: %q; want b,c", got)
	}
}

// A namespace that cannot be read: the port alone is watched, unless
// another engine of the node shares it, and then it is not watched at all.
func TestUnreadableNamespace(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	eng := func(id, netns string, port uint16) EngineConfig {
		return EngineConfig{ID: id, Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", Port: port, NetNS: netns}
	}
	w := &fakeWatcher{ch: make(chan liveness.Event)}
	a, err := New(Config{Node: "n", Engines: []EngineConfig{eng("a", missing, 8000), eng("b", missing, 8000), eng("c", missing, 9000)}}, WithWatcher(w, ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.Run(ctx)
	if len(w.socks) != 1 || w.socks[0] != (liveness.Socket{Port: 9000}) {
		t.Fatalf("watched %v; want only port 9000 in every namespace", w.socks)
	}
}

func TestEngineNodeFilter(t *testing.T) {
	cfg := Config{Node: "n1", Engines: []EngineConfig{
		{ID: "a", Node: "n1", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics"},
		{ID: "b", Node: "n2", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics"},
		{ID: "c", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics"},
	}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if h := a.hello(); strings.Join(h.Engines, ",") != "a,c" {
		t.Fatalf("unexpected engines for n1; got %v; want [a c]", h.Engines)
	}
}

// A restarted engine is live again at its first successful scrape after
// the exit, whatever the wall clock says: the eBPF watcher stamps events
// with the clock as it was at its start plus monotonic time, so after the
// node's clock steps back an exit carries a time later than the agent's
// clock for the length of the step.
func TestRestartedEngineLiveAfterClockStepsBack(t *testing.T) {
	eng, body := fakeEngine(t, "sglang.prom")
	good, _ := os.ReadFile(filepath.Join("testdata", "sglang.prom"))
	a, err := New(Config{Node: "n", Engines: []EngineConfig{{ID: "s1", Kind: engine.SGLang, MetricsURL: eng.URL, PID: 4242}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const t0, hour = int64(1_700_000_000e9), int64(3600e9)
	if e := a.Collect(ctx, t0).Engines[0]; !e.Live {
		t.Fatalf("engine not live at start; got %+v", e)
	}
	// the exit, stamped t0+1s; the node's clock then steps back an hour
	a.HandleLiveness(liveness.Event{Kind: liveness.Exited, PID: 4242, AtNs: t0 + 1e9})
	body.Store([]byte("<html>502</html>"))
	if e := a.Collect(ctx, t0+2e9-hour).Engines[0]; e.Live {
		t.Fatalf("engine live while its endpoint fails; got %+v", e)
	}
	// restarted and answering: live at once, not an hour later
	body.Store(good)
	for _, now := range []int64{t0 + 3e9 - hour, t0 + 4e9 - hour} {
		if e := a.Collect(ctx, now).Engines[0]; !e.Live || e.ScrapeError != "" {
			t.Fatalf("restarted engine at %d: %+v; want live (the scrape after the exit worked)", now, e)
		}
	}
}

// fakeNVML is an NVMLSource answering devs (or err).
type fakeNVML struct {
	devs []nvml.Device
	err  error
}

func (f *fakeNVML) Devices(context.Context, int64) ([]nvml.Device, error) { return f.devs, f.err }
func (f *fakeNVML) Status() nvml.Status                                   { return nvml.Status{Available: f.err == nil} }

// A GPU whose memory total reads 0 makes its engines' NVML bound unknown:
// it used to be skipped as "no minimum yet", so an engine on GPUs 0 and 1
// got GPU 1's memory as its bound when GPU 0 came first.
func TestZeroMemoryTotalIsUnknown(t *testing.T) {
	geo := engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	src := &fakeNVML{devs: []nvml.Device{
		{Index: 0, UUID: "GPU-0", Memory: nvml.Memory{Known: true}},
		{Index: 1, UUID: "GPU-1", Memory: nvml.Memory{TotalBytes: 40 << 30, Known: true}},
	}}
	cfg := Config{Node: "n", ScrapeTimeoutS: 0.2, Engines: []EngineConfig{
		{ID: "zero-first", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"0", "1"}, Geometry: geo},
		{ID: "zero-last", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"GPU-1", "GPU-0"}, Geometry: geo},
		{ID: "good", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"1"}, Geometry: geo},
	}}
	a, err := New(cfg, WithNVML(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range a.Collect(context.Background(), 1e9).Engines {
		want := int64(0)
		if e.ID == "good" {
			want = int64(40<<30) / 131072
		}
		if e.KVCapacityTokens != want {
			t.Errorf("%s: KV %d (%s); want %d", e.ID, e.KVCapacityTokens, e.KVDisagreement, want)
		}
	}
}

// An engine's GPU kind named by NVML stays when NVML cannot name its GPU
// any more (a lost GPU reads without a name; NVML down), so the core does
// not see it change profile; for other GPUs it is found anew.
func TestGPUKindKeptWhenNVMLCannotNameTheGPU(t *testing.T) {
	a100 := nvml.Device{Index: 0, UUID: "GPU-0", Name: "NVIDIA A100-SXM4-40GB", Memory: nvml.Memory{TotalBytes: 40 << 30, Known: true}}
	src := &fakeNVML{devs: []nvml.Device{a100, {Index: 1, UUID: "GPU-1"}}}
	cfg := Config{Node: "n", ScrapeTimeoutS: 0.2, Engines: []EngineConfig{
		{ID: "e", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"0"}},
	}}
	a, err := New(cfg, WithNVML(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kind := func(at int64) string { return a.Collect(ctx, at).Engines[0].GPU }
	if k := kind(1e9); k != "A100-SXM-40GB" {
		t.Fatalf("GPU kind %q; want A100-SXM-40GB", k)
	}
	src.devs = []nvml.Device{{Index: 0, Notes: []string{"DeviceGetHandleByIndex: ERROR_GPU_IS_LOST"}, Problem: true}, {Index: 1, UUID: "GPU-1"}}
	if k := kind(2e9); k != "A100-SXM-40GB" {
		t.Fatalf("GPU lost: kind %q; want A100-SXM-40GB kept", k)
	}
	src.devs, src.err = nil, nvml.ErrUnavailable
	if k := kind(3e9); k != "A100-SXM-40GB" {
		t.Fatalf("NVML down: kind %q; want A100-SXM-40GB kept", k)
	}
	// moved to GPU 1, whose name NVML does not know: not the old GPU's kind
	if err := a.SetEngines([]EngineConfig{{ID: "e", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"1"}}}); err != nil {
		t.Fatal(err)
	}
	if k := kind(4e9); k != "" {
		t.Fatalf("engine moved to an unnamed GPU: kind %q; want none", k)
	}
}
