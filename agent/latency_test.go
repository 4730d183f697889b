package agent

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/core/wire"
)

// earlier rewrites a real page's latency counters to what an earlier
// scrape of the same engine would have read.
func earlier(page string, set map[string]string) string {
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		for prefix, v := range set {
			if strings.HasPrefix(l, prefix+"{") {
				lines[i] = l[:strings.LastIndexByte(l, ' ')+1] + v
			}
		}
	}
	return strings.Join(lines, "\n")
}

// earlierRealPage serves, from a fake vLLM engine, a real published page
// rewritten to an earlier scrape of it (fewer prefills and decode
// tokens); the real page is returned to serve next.
func earlierRealPage(t *testing.T) ([]byte, *httptest.Server, *atomic.Value) {
	t.Helper()
	real, err := os.ReadFile(filepath.Join("testdata", "public", "vllm_tinyllama_blog.prom"))
	if err != nil {
		t.Fatal(err)
	}
	eng, body := fakeEngine(t, "vllm_new.prom")
	body.Store([]byte(earlier(string(real), map[string]string{
		"vllm:request_prefill_time_seconds_sum":    "0.2",
		"vllm:request_prefill_time_seconds_count":  "5.0",
		"vllm:request_prompt_tokens_sum":           "100.0",
		"vllm:request_prompt_tokens_count":         "5.0",
		"vllm:time_per_output_token_seconds_sum":   "8.0",
		"vllm:time_per_output_token_seconds_count": "1000.0",
	})))
	return real, eng, body
}

// Two scrapes of a vLLM engine serving a real published page: the
// second snapshot carries the latency interval between them in the wire
// format (EngineReport.Latency), once, and it survives the JSON the core
// decodes.
func TestSnapshotCarriesLatencyInterval(t *testing.T) {
	real, eng, body := earlierRealPage(t)
	cfg := Config{Node: "n", StaleAfterS: 5, Engines: []EngineConfig{{
		ID: "v1", Kind: engine.VLLM, MetricsURL: eng.URL, Model: "tinyLlama/TinyLlama-1.1B-Chat-v1.0", GPUKind: "L4",
		Geometry: engine.Geometry{Layers: 22, KVHeads: 4, HeadDim: 64, DTypeBytes: 2, TP: 1},
	}}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if e := a.Collect(ctx, 10e9).Engines[0]; e.Latency != nil {
		t.Fatalf("first scrape reported an interval: %+v", e.Latency)
	}
	body.Store(real)
	snap := a.Collect(ctx, 15e9)
	b, err := json.Marshal(wire.Batch{Version: wire.Version, Reports: []wire.Report{{Kind: wire.KindSnapshot, Node: "n", Epoch: 1, Seq: 1, Snapshot: &snap}}})
	if err != nil {
		t.Fatal(err)
	}
	var back wire.Batch
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Fatalf("the core would refuse the report: %v", err)
	}
	e := back.Reports[0].Snapshot.Engines[0]
	li := e.Latency
	if li == nil {
		t.Fatal("second scrape: no latency interval")
	}
	want := map[string][2]float64{
		"interval_s":      {li.IntervalS, 5},
		"prefill_count":   {li.PrefillCount, 4},
		"prefill_seconds": {li.PrefillSeconds, 0.38225245475769043 - 0.2},
		"prefill_tokens":  {li.PrefillTokens, 110},
		"decode_count":    {li.DecodeCount, 1362},
		"decode_seconds":  {li.DecodeSeconds, 18.68156147003174 - 8},
	}
	for k, v := range want {
		if math.Abs(v[0]-v[1]) > 1e-9 {
			t.Errorf("%s = %v; want %v", k, v[0], v[1])
		}
	}
	if e.TP != 1 {
		t.Errorf("tp %d; want 1", e.TP)
	}
	if e := a.Collect(ctx, 20e9).Engines[0]; e.Latency != nil && e.Latency.PrefillCount != 0 {
		t.Errorf("unchanged counters reported prefills again: %+v", e.Latency)
	}
}
