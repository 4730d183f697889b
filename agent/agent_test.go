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
)

func TestCollectLivenessAndHealth(t *testing.T) {
	eng, body := fakeEngine(t, "sglang.prom")
	cfg := Config{Node: "n", StaleAfterS: 1, Engines: []EngineConfig{{
		ID: "s1", Kind: engine.SGLang, MetricsURL: eng.URL, PID: 4242, Port: 30000, GPUs: []string{"0"},
		Geometry: engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2},
	}}}
	a, err := New(cfg, WithNVML(mockA100()))
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
