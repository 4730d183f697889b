package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Papercut: --help lists both commands, run and scrape.
func TestHelpListsRunAndScrape(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	help := errb.String() + out.String()
	for _, want := range []string{"narwhal-agent [run]", "narwhal-agent scrape", "-kind vllm|sglang", "-config", "-listen"} {
		if !strings.Contains(help, want) {
			t.Fatalf("--help lacks %q:\n%s", want, help)
		}
	}
}

// Papercut: for a hybrid model (kv_cache_size_tokens differs from
// num_gpu_blocks × block_size) scrape says where the capacity comes from
// instead of a wrong product, and without model geometry it prints no
// error-like message.
func TestScrapeHybridModelAndNoGeometry(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hybrid.prom")
	body := "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\",kv_cache_size_tokens=\"1000\"} 1\n" +
		"vllm:kv_cache_usage_perc 0.5\nvllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	scrapeOut := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"scrape", "-file", file}, args...), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		return out.String()
	}
	out := scrapeOut()
	for _, want := range []string{"kv capacity tokens 1000", "  = kv_cache_size_tokens (num_gpu_blocks 100, block_size 16)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"= num_gpu_blocks 100 × block_size 16\n", "disagreement", "invalid model KV geometry", "hybrid model?"} {
		if strings.Contains(out, bad) {
			t.Fatalf("output has %q:\n%s", bad, out)
		}
	}
	// Memory but no geometry: the cross-check is skipped, said as such.
	out = scrapeOut("-gpu-mem-gib", "40")
	if !strings.Contains(out, "kv cross-check     skipped (no model geometry configured;") || strings.Contains(out, "invalid") {
		t.Fatalf("unexpected cross-check lines:\n%s", out)
	}
}
