package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scrape shows the prefill backlog the agent would report for the page
// (one page: the engine's lifetime seconds per prefill), in text and
// JSON, and says when it cannot price it.
func TestScrapeShowsPrefillBacklog(t *testing.T) {
	page := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 12
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{le="+Inf"} 40
vllm:request_prefill_time_seconds_sum 10
vllm:request_prefill_time_seconds_count 40
`
	file := filepath.Join(t.TempDir(), "page.prom")
	if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"scrape", "-kind", "vllm", "-file", file}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "prefill backlog    queued 3.000 s, running 0.250 s (lifetime rate 4 prefills/s)"; !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"scrape", "-kind", "vllm", "-json", "-file", file}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got struct {
		Backlog struct {
			Queued  float64 `json:"queued_prefill_s"`
			Running float64 `json:"running_prefill_s"`
			Source  string  `json:"source"`
		} `json:"prefill_backlog"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if b := got.Backlog; math.Abs(b.Queued-3) > 1e-9 || math.Abs(b.Running-0.25) > 1e-9 || b.Source != "lifetime" {
		t.Fatalf("prefill_backlog %+v; want queued 3, running 0.25, lifetime", b)
	}
	out.Reset()
	if code := run(context.Background(), []string{"scrape", "-kind", "sglang", "-file", "../../agent/testdata/sglang.prom"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "prefill backlog    unpriced") {
		t.Fatalf("sglang page without prefill time: output lacks the unpriced line:\n%s", out.String())
	}
}
