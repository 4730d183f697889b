package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// backlogPage is a vLLM V1 page: waiting and running requests, and the
// prefill-time and prompt-token histograms after prefills prompts of
// 2,000 tokens took prefillS seconds of prefill in all.
func backlogPage(waiting, running int, prefills, prefillS float64) []byte {
	return fmt.Appendf(nil, `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
vllm:cache_config_info{block_size="16",num_gpu_blocks="4096",model_name="m"} 1
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{le="+Inf",model_name="m"} %g
vllm:request_prefill_time_seconds_sum{model_name="m"} %g
vllm:request_prefill_time_seconds_count{model_name="m"} %g
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{le="+Inf",model_name="m"} %g
vllm:request_prompt_tokens_sum{model_name="m"} %g
vllm:request_prompt_tokens_count{model_name="m"} %g
`, running, waiting, prefills, prefillS, prefills, prefills, prefills*2000, prefills)
}

func pageServer(t *testing.T, body []byte) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var cur atomic.Value
	cur.Store(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(cur.Load().([]byte))
	}))
	t.Cleanup(srv.Close)
	return srv, &cur
}

func backlogEngine(id, role, url string) EngineConfig {
	return EngineConfig{ID: id, Kind: engine.VLLM, MetricsURL: url, Model: "facebook/opt-13b", GPUKind: "A100-80GB", Role: role,
		Geometry: engine.Geometry{Layers: 40, KVHeads: 40, HeadDim: 128, DTypeBytes: 2, TP: 1}}
}

// The agent prices an engine's waiting and running requests with the
// engine's own prefill histogram and sends the seconds in the wire
// report: first at the lifetime rate (40 prefills in 10 s: 0.25 s each;
// 12 waiting = 3 s, 2 running = 0.25 s), then at the recent rate (8
// prefills of 0.5 s in 10 s, one at a time: 2/s; 6 waiting = 3 s, 1
// running = 0.25 s), and the same numbers on its metrics.
func TestSnapshotCarriesPricedPrefillBacklog(t *testing.T) {
	eng, body := pageServer(t, backlogPage(12, 2, 40, 10))
	a, err := New(Config{Node: "n", StaleAfterS: 5, Engines: []EngineConfig{backlogEngine("p1", "prefill", eng.URL)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(what string, snap wire.Snapshot, queued, running float64) {
		t.Helper()
		b, err := json.Marshal(wire.Batch{Version: wire.Version, Reports: []wire.Report{{Kind: wire.KindSnapshot, Node: "n", Epoch: 1, Seq: 1, Snapshot: &snap}}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), fmt.Sprintf(`"queued_prefill_s":%v`, queued)) {
			t.Errorf("%s: wire JSON lacks queued_prefill_s %v: %s", what, queued, b)
		}
		var back wire.Batch
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("%s: the core would refuse the report: %v", what, err)
		}
		res := back.Reports[0].Snapshot.Engines[0].Resident
		if math.Abs(res.QueuedPrefillS-queued) > 1e-9 || math.Abs(res.RunningPrefillS-running) > 1e-9 {
			t.Errorf("%s: resident queued %v running %v; want %v, %v", what, res.QueuedPrefillS, res.RunningPrefillS, queued, running)
		}
		if g := testutil.ToFloat64(a.backlogS.WithLabelValues("p1", "queued")); math.Abs(g-queued) > 1e-9 {
			t.Errorf("%s: narwhal_agent_engine_prefill_backlog_seconds{state=queued} %v; want %v", what, g, queued)
		}
		if g := testutil.ToFloat64(a.priced.WithLabelValues("p1")); g != 1 {
			t.Errorf("%s: priced gauge %v; want 1", what, g)
		}
	}
	check("lifetime", a.Collect(ctx, 10e9), 3, 0.25)
	body.Store(backlogPage(6, 1, 48, 14))
	check("recent", a.Collect(ctx, 20e9), 3, 0.25)

	// a restarted engine that has timed nothing yet: unpriced, 0, and the
	// gauge says so
	body.Store(backlogPage(9, 0, 0, 0))
	if res := a.Collect(ctx, 30e9).Engines[0].Resident; res.QueuedPrefillS != 0 || res.RunningPrefillS != 0 {
		t.Errorf("unpriced engine reported %+v", res)
	}
	if g := testutil.ToFloat64(a.priced.WithLabelValues("p1")); g != 0 {
		t.Errorf("priced gauge %v after a restart with no prefill; want 0", g)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// Spec "Prefill recovery ratio", wired end to end: an agent scraping a
// prefill engine with a queue and a decode engine with one streams their
// priced backlog to narwhal-core; with demand incomplete, the core's
// decision shows the prefill engine's queued seconds only and
// recovery_prefill_ratio = (running + queued) / (prefill engines × TTFT
// SLO) = (0.25 + 3) / (1 × 0.25) = 13.
func TestQueuedPrefillFromEngineReachesRecoveryDecision(t *testing.T) {
	var coreNow atomic.Int64
	coreNow.Store(time.Now().UnixNano())
	c, err := core.New(core.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, base := serveCore(t, c, coreNow.Load, nil)

	pEng, _ := pageServer(t, backlogPage(12, 2, 40, 10))
	dEng, _ := pageServer(t, backlogPage(7, 3, 40, 10))
	acfg := testConfig(t, base+"/v1/agent/reports", pEng.URL)
	acfg.Engines = []EngineConfig{backlogEngine("p1", "prefill", pEng.URL), backlogEngine("d1", "decode", dEng.URL)}
	a, err := New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(actx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "/v1/state to show both engines' priced backlog", func() bool {
		st := getState(t, base)
		p, d := st["p1"], st["d1"]
		return p.Live && d.Live && p.Resident.QueuedPrefillS == 3 && p.Resident.RunningPrefillS == 0.25 && d.Resident.QueuedPrefillS == 1.75
	})

	now := coreNow.Load()
	c.OfferStarted(now) // a body still being read: demand incomplete
	dec := c.Step(now + 1e9)
	want := (0.25 + 3) / (1 * core.DefaultConfig().TTFTSLOS)
	if dec.Basis != controller.BasisRecovery || math.Abs(dec.QueuedPrefillS-3) > 1e-9 || math.Abs(dec.RecoveryPrefillRatio-want) > 1e-6 {
		t.Fatalf("decision basis %s queued_prefill_s %v recovery_prefill_ratio %v; want recovery, 3, %v",
			dec.Basis, dec.QueuedPrefillS, dec.RecoveryPrefillRatio, want)
	}
	b, _ := json.Marshal(dec)
	if !strings.Contains(string(b), `"queued_prefill_s":3`) || !strings.Contains(string(b), `"recovery_prefill_ratio":13`) {
		t.Fatalf("decision JSON lacks the backlog: %s", b)
	}
}

// sglangUntimed is an SGLang page as releases without
// sglang:queue_time_seconds write it: time to first token (mostly
// queueing there) with its count, and the request gauges.
func sglangUntimed(t *testing.T, firstTokens float64, waiting int) []byte {
	t.Helper()
	return fmt.Appendf(nil, `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 162
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} %d
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="m"} 123859
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} %g
sglang:time_to_first_token_seconds_sum{model_name="m"} %g
sglang:time_to_first_token_seconds_count{model_name="m"} %g
`, waiting, firstTokens, 214*firstTokens, firstTokens)
}

// An SGLang release without sglang:queue_time_seconds times no prefill:
// the agent reports its backlog unpriced until it has seen requests
// waiting at two successive scrapes, then priced at the first tokens
// it completed meanwhile: 11,008 → 11,068 in 20 s is 3/s, so 2,826
// waiting are 942 s and 162 running 27 s. An idle interval in between
// (nothing waiting at the earlier scrape) teaches nothing.
func TestSnapshotPricesSGLangBacklogAtBusyThroughput(t *testing.T) {
	eng, body := pageServer(t, sglangUntimed(t, 11000, 0))
	cfg := backlogEngine("s1", "prefill", eng.URL)
	cfg.Kind = engine.SGLang
	a, err := New(Config{Node: "n", StaleAfterS: 60, Engines: []EngineConfig{cfg}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Collect(ctx, 10e9)
	body.Store(sglangUntimed(t, 11008, 2826)) // idle before: not observed
	if res := a.Collect(ctx, 30e9).Engines[0].Resident; res.QueuedPrefillS != 0 {
		t.Fatalf("after an idle interval the backlog is priced: %+v", res)
	}
	if g := testutil.ToFloat64(a.priced.WithLabelValues("s1")); g != 0 {
		t.Errorf("priced gauge %v before a busy interval; want 0", g)
	}
	body.Store(sglangUntimed(t, 11068, 2826))
	res := a.Collect(ctx, 50e9).Engines[0].Resident
	if math.Abs(res.QueuedPrefillS-942) > 1e-6 || math.Abs(res.RunningPrefillS-27) > 1e-6 {
		t.Errorf("busy throughput: queued %v running %v; want 942, 27", res.QueuedPrefillS, res.RunningPrefillS)
	}
	if g := testutil.ToFloat64(a.priced.WithLabelValues("s1")); g != 1 {
		t.Errorf("priced gauge %v; want 1", g)
	}
}
