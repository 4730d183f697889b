package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
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
	var logs syncBuf
	done := make(chan int)
	go func() { done <- run(ctx, []string{"run", "-config", cfg, "-listen", addr}, io.Discard, &logs) }()
	base := "http://" + addr
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				logs.mu.Lock()
				t.Fatalf("timed out waiting for %s; logs:\n%s", what, logs.b.String())
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
