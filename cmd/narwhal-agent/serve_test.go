package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/netcap/netcaptest"
	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeHealthReflectsFreshness runs the agent binary's serve path
// against a fake engine: /healthz is 200 while scrapes work and 503 once
// they have failed for stale_after_s; /metrics carries narwhal_agent_*.
func TestServeHealthReflectsFreshness(t *testing.T) {
	body, err := os.ReadFile("../../agent/testdata/vllm_new.prom")
	if err != nil {
		t.Fatal(err)
	}
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	addr := netcaptest.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	conf := fmt.Sprintf(`node: t1
scrape_interval_s: 0.02
stale_after_s: 0.3
liveness: none
engines:
  - id: e1
    kind: vllm
    metrics_url: %s/metrics
    gpus: ["0"]
`, eng.URL)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"run", "-config", cfg, "-listen", addr}, io.Discard, &logs) }()
	base := "http://" + addr
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; logs:\n%s", what, logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("healthz 200", func() bool { c, _ := get(base + "/healthz"); return c == 200 })
	_, m := get(base + "/metrics")
	for _, want := range []string{`narwhal_agent_engine_kv_capacity_tokens{engine="e1"} 91056`, `narwhal_agent_engine_kv_tokens{engine="e1"} 22764`,
		`narwhal_agent_scrapes_total{engine="e1",result="ok"}`, "narwhal_agent_nvml_available "} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	eng.Close() // the engine goes away: scrapes fail, data goes stale
	wait("healthz 503", func() bool {
		c, b := get(base + "/healthz")
		return c == 503 && strings.Contains(b, "no engine scraped successfully")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// The /healthz and /metrics listener holds at most -max-connections open:
// one more is answered 503 at once and counted; -max-connections 0 is
// refused before anything starts.
func TestServeCapsConnections(t *testing.T) {
	var errs bytes.Buffer
	if code := run(context.Background(), []string{"run", "-config", "/nonexistent", "-max-connections", "0"}, io.Discard, &errs); code != 2 || !strings.Contains(errs.String(), "-max-connections 0: must be at least 1") {
		t.Fatalf("-max-connections 0: exit %d, %q; want 2 and the reason", code, errs.String())
	}
	addr := netcaptest.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("node: t1\nliveness: none\nengines:\n  - id: e1\n    kind: vllm\n    metrics_url: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A listen address already taken fails the start (exit 1), naming it.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var busy syncbuf.Buffer
	code := run(context.Background(), []string{"run", "-config", cfg, "-listen", taken.Addr().String()}, io.Discard, &busy)
	taken.Close()
	if code != 1 || !strings.Contains(busy.String(), "address already in use") {
		t.Fatalf("listen address taken: exit %d, logs %q; want 1 and the bind error", code, busy.String())
	}
	serveAgent(t, addr, "/metrics", func(c int, _ string) bool { return c == 200 }, "-config", cfg, "-listen", addr, "-max-connections", "2")
	http.DefaultClient.CloseIdleConnections() // the probe's keep-alive
	// Of three connections opened at once, at least one is refused (more
	// while the probe's is still closing), each answered 503 at once.
	refused := netcaptest.Refusals(t, addr, 3, time.Second)
	if refused == 0 {
		t.Fatal("three connections with -max-connections 2: none refused; want a 503")
	}
	// Until the server has seen the held connections close, a probe may
	// itself be refused (and counted): count those too.
	want := refused
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, m := get("http://" + addr + "/metrics")
		if code == 503 {
			want++
		}
		if code == 200 {
			if line := fmt.Sprintf("narwhal_agent_http_connections_refused_total %d\n", want); !strings.Contains(m, line) {
				i := strings.LastIndex(m, "narwhal_agent_http_connections_refused_total")
				t.Fatalf("refusals: %.50q; want %q", m[max(i, 0):], line)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /metrics after the held connections closed: %d", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With liveness: proc configured, /healthz names /proc as the source and
// no eBPF failure: it used to say "proc (eBPF unavailable: configured:
// proc)" although eBPF was never tried.
func TestServeHealthNamesConfiguredProcLiveness(t *testing.T) {
	addr := netcaptest.FreeAddr(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("node: t1\nliveness: proc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, b := serveAgent(t, addr, "/healthz", func(c int, _ string) bool { return c != 0 }, "-config", cfg, "-listen", addr)
	var h struct {
		Liveness string `json:"liveness"`
	}
	if err := json.Unmarshal([]byte(b), &h); err != nil {
		t.Fatalf("/healthz: %v: %q", err, b)
	}
	if h.Liveness != "proc" {
		t.Fatalf(`/healthz liveness %q; want "proc"`, h.Liveness)
	}
}

// serveAgent runs the agent with "run" and args until the test ends
// (then it must exit 0), and waits up to 5 s for GET path on addr to
// satisfy ready, returning that answer.
func serveAgent(t *testing.T, addr, path string, ready func(code int, body string) bool, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var logs syncbuf.Buffer
	go func() { done <- run(ctx, append([]string{"run"}, args...), io.Discard, &logs) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, b := get("http://" + addr + path); ready(c, b) {
			return c, b
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not serve %s; logs:\n%s", path, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
