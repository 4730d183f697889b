package engine

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// vllmPage is a vLLM V1 metrics page: waiting and running requests, and
// the cumulative prefill-time and prompt-token histograms after
// prefills prefills of promptTokens tokens each took prefillS seconds in
// all.
func vllmPage(waiting, running int, prefills, prefillS, promptTokens float64) string {
	return fmt.Sprintf(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{le="+Inf",model_name="m"} %g
vllm:request_prefill_time_seconds_sum{model_name="m"} %g
vllm:request_prefill_time_seconds_count{model_name="m"} %g
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{le="+Inf",model_name="m"} %g
vllm:request_prompt_tokens_sum{model_name="m"} %g
vllm:request_prompt_tokens_count{model_name="m"} %g
`, running, waiting, prefills, prefillS, prefills, prefills, prefills*promptTokens, prefills)
}

func parseText(t *testing.T, kind Kind, page string) Metrics {
	t.Helper()
	m, err := Parse(kind, strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkBacklog(t *testing.T, what string, got Backlog, queued, running float64, source string) {
	t.Helper()
	near(t, what+" queued_prefill_s", got.QueuedPrefillS, queued)
	near(t, what+" running_prefill_s", got.RunningPrefillS, running)
	if got.Source != source {
		t.Errorf("%s source %q; want %q", what, got.Source, source)
	}
}

// A first page prices its waiting requests at the engine's lifetime
// prefill time per request: 40 prompts of 2,000 tokens took 10 s of
// prefill (0.25 s each), so 12 waiting requests are 3 s of queued
// prefill and 2 running ones half of 0.5 s.
func TestBacklogFromOnePageUsesLifetimePrefillTime(t *testing.T) {
	m := parseText(t, VLLM, vllmPage(12, 2, 40, 10, 2000))
	if m.Waiting != 12 || m.Running != 2 || m.Latency == nil || m.Latency.PromptTokens != 80000 {
		t.Fatalf("page read as waiting %d running %d latency %+v", m.Waiting, m.Running, m.Latency)
	}
	var r PrefillRate
	checkBacklog(t, "lifetime", r.Price(m.Waiting, m.Running, m.Latency), 3, 0.25, BacklogLifetime)
}

// Between two scrapes the recent rate wins over the lifetime one, and
// it is the larger of the serial rate (prefills / their seconds) and the
// achieved rate (prefills / wall seconds).
func TestBacklogRecentRateSerialAndBatched(t *testing.T) {
	// lifetime 0.25 s per prefill; then 8 prefills of 0.5 s in 10 s: the
	// engine was busy 4 of 10 s, serial rate 2/s beats achieved 0.8/s.
	prev := parseText(t, VLLM, vllmPage(0, 0, 40, 10, 2000))
	cur := parseText(t, VLLM, vllmPage(6, 1, 48, 14, 2000))
	var r PrefillRate
	r.Observe(prev.Latency, cur.Latency, 10)
	b := r.Price(cur.Waiting, cur.Running, cur.Latency)
	checkBacklog(t, "serial", b, 3, 0.25, BacklogRecent)
	near(t, "serial rate", b.RequestsPerS, 2)

	// batched: 80 prefills of 0.5 s each in 10 s (4 at a time): the
	// achieved 8/s beats the serial 2/s; 16 waiting drain in 2 s.
	cur2 := parseText(t, VLLM, vllmPage(16, 4, 120, 50, 2000))
	var r2 PrefillRate
	r2.Observe(prev.Latency, cur2.Latency, 10)
	b = r2.Price(cur2.Waiting, cur2.Running, cur2.Latency)
	checkBacklog(t, "batched", b, 2, 0.25, BacklogRecent)
	near(t, "batched rate", b.RequestsPerS, 8)
}

// Idle scrapes decay the recent figures: after one half-life the rate
// still holds (the ratio of decayed sums is unchanged); after enough
// half-lives that less than one prefill's weight is left, the lifetime
// rate stands in.
func TestBacklogRecentRateDecaysToLifetime(t *testing.T) {
	p0 := parseText(t, VLLM, vllmPage(0, 0, 40, 10, 2000)).Latency
	p1 := parseText(t, VLLM, vllmPage(0, 0, 48, 14, 2000)).Latency
	var r PrefillRate
	r.Observe(p0, p1, 10)
	r.Observe(p1, p1, BacklogHalfLifeS) // idle: n 8 → 4
	checkBacklog(t, "one half-life idle", r.Price(4, 0, p1), 2, 0, BacklogRecent)
	r.Observe(p1, p1, 3*BacklogHalfLifeS) // n 4 → 0.5
	// lifetime: 48 prefills in 14 s
	checkBacklog(t, "long idle", r.Price(4, 0, p1), 4*14.0/48, 0, BacklogLifetime)
}

// A restarted engine (counters went down) forgets the old rate; figures
// the engine does not expose price nothing; unknown counts are 0.
func TestBacklogRestartUnpricedAndUnknown(t *testing.T) {
	p0 := parseText(t, VLLM, vllmPage(0, 0, 40, 10, 2000)).Latency
	p1 := parseText(t, VLLM, vllmPage(0, 0, 48, 14, 2000)).Latency
	var r PrefillRate
	r.Observe(p0, p1, 10)
	restarted := parseText(t, VLLM, vllmPage(3, 0, 2, 2, 2000))
	r.Observe(p1, restarted.Latency, 10)
	checkBacklog(t, "restart", r.Price(restarted.Waiting, 0, restarted.Latency), 3, 0, BacklogLifetime)

	bare := parseText(t, VLLM, `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 9
vllm:num_requests_running 1
`)
	var r2 PrefillRate
	r2.Observe(bare.Latency, bare.Latency, 10)
	b := r2.Price(bare.Waiting, bare.Running, bare.Latency)
	checkBacklog(t, "no prefill histogram", b, 0, 0, BacklogUnpriced)
	if b.RequestsPerS != 0 {
		t.Errorf("unpriced rate %v; want 0", b.RequestsPerS)
	}
	fresh := parseText(t, VLLM, vllmPage(5, 0, 0, 0, 0)) // started, nothing prefilled yet
	checkBacklog(t, "fresh engine", r2.Price(fresh.Waiting, 0, fresh.Latency), 0, 0, BacklogUnpriced)
	checkBacklog(t, "unknown counts", (&PrefillRate{}).Price(-1, -1, p1), 0, 0, BacklogLifetime)
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		var r3 PrefillRate
		r3.Observe(p0, p1, bad)
		if r3 != (PrefillRate{}) {
			t.Errorf("interval %v learned %+v", bad, r3)
		}
	}
}

// SGLang: prefill time is time to first token less queue time; 10
// requests had 6 s to first token of which 4 s queued, so 2 s of
// prefill, 0.2 s each; 5 waiting requests are 1 s.
func TestBacklogSGLang(t *testing.T) {
	page := `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs 5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs 0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="+Inf"} 10
sglang:time_to_first_token_seconds_sum 6
sglang:time_to_first_token_seconds_count 10
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{le="+Inf"} 10
sglang:queue_time_seconds_sum 4
sglang:queue_time_seconds_count 10
`
	m := parseText(t, SGLang, page)
	var r PrefillRate
	checkBacklog(t, "sglang", r.Price(m.Waiting, m.Running, m.Latency), 1, 0, BacklogLifetime)
}

// The published pages: vLLM's (9 prefills in 0.382 s, nothing waiting)
// prices at its lifetime rate and reports 0 s for an empty queue, and 5
// waiting on the same counters at 5 × 0.382 / 9 s; SGLang's
// documentation page predates sglang:queue_time_seconds, so its 2,826
// waiting requests cannot be priced from one page (time to first token
// there is mostly queueing: 214 s a request) and are reported as 0,
// unpriced, until a busy interval is seen
// (TestBacklogBusyThroughputWithoutPrefillTiming).
func TestBacklogFromPublishedPages(t *testing.T) {
	v := parsePage(t, VLLM, "../testdata/public/vllm_tinyllama_blog.prom")
	var r PrefillRate
	b := r.Price(v.Waiting, v.Running, v.Latency)
	checkBacklog(t, "vllm page", b, 0, 0, BacklogLifetime)
	near(t, "vllm page rate", b.RequestsPerS, 9/0.38225245475769043)
	checkBacklog(t, "vllm page, 5 waiting", r.Price(5, 0, v.Latency), 5*0.38225245475769043/9, 0, BacklogLifetime)

	s := parsePage(t, SGLang, "../testdata/public/sglang_docs_production_metrics.prom")
	if s.Waiting != 2826 {
		t.Fatalf("sglang page waiting %d; want 2826", s.Waiting)
	}
	checkBacklog(t, "sglang page", r.Price(s.Waiting, s.Running, s.Latency), 0, 0, BacklogUnpriced)
}

// publishedSGLang is SGLang's published metrics page (no
// sglang:queue_time_seconds) with its time-to-first-token count and
// waiting gauge replaced, as the same server would read later.
func publishedSGLang(t *testing.T, firstTokens float64, waiting int) Metrics {
	t.Helper()
	b, err := os.ReadFile("../testdata/public/sglang_docs_production_metrics.prom")
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(string(b), `sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0`,
		fmt.Sprintf(`sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} %g`, firstTokens), 1)
	page = strings.Replace(page, `sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0`,
		fmt.Sprintf(`sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} %d`, waiting), 1)
	if page == string(b) {
		t.Fatal("published SGLang page: the lines to replace are missing")
	}
	return parseText(t, SGLang, page)
}

// An SGLang engine that times no prefill (the published page, without
// sglang:queue_time_seconds) is priced at its busy throughput: 11,008 →
// 11,068 first tokens in 20 s with requests waiting at both scrapes is
// 3 requests/s, so 2,826 waiting are 942 s of queued prefill and 162
// running are 27 s (half done). Intervals that were not busy are not
// observed; with no busy interval the backlog stays unpriced, and a
// counter that went down (a restart) forgets the throughput.
func TestBacklogBusyThroughputWithoutPrefillTiming(t *testing.T) {
	p0 := publishedSGLang(t, 11008, 2826)
	p1 := publishedSGLang(t, 11068, 2826)
	if p1.Latency == nil || p1.Latency.PrefillCount != -1 || p1.Latency.FirstTokens != 11068 {
		t.Fatalf("page read as %+v; want untimed prefill, 11068 first tokens", p1.Latency)
	}
	var r PrefillRate
	r.Observe(p0.Latency, p1.Latency, 20)
	checkBacklog(t, "no busy interval yet", r.Price(p1.Waiting, p1.Running, p1.Latency), 0, 0, BacklogUnpriced)
	r.ObserveBusy(p0.Latency, p1.Latency, 20)
	b := r.Price(p1.Waiting, p1.Running, p1.Latency)
	checkBacklog(t, "busy", b, 942, 27, BacklogBusy)
	near(t, "busy rate", b.RequestsPerS, 3)

	// another busy interval at 5/s: decayed mean (60·2^(-1/3)+50)/(20·2^(-1/3)+10)
	p2 := publishedSGLang(t, 11118, 2000)
	r.ObserveBusy(p1.Latency, p2.Latency, 10)
	d := math.Exp2(-10 / BacklogHalfLifeS)
	near(t, "two busy intervals", r.Price(2000, 0, p2.Latency).RequestsPerS, (60*d+50)/(20*d+10))

	restarted := publishedSGLang(t, 5, 10)
	r.ObserveBusy(p2.Latency, restarted.Latency, 10)
	checkBacklog(t, "restart", r.Price(10, 0, restarted.Latency), 0, 0, BacklogUnpriced)

	// an engine that times its prefills keeps its timed rate
	v0 := parseText(t, VLLM, vllmPage(4, 0, 40, 10, 2000)).Latency
	v1 := parseText(t, VLLM, vllmPage(4, 0, 48, 14, 2000)).Latency
	var rv PrefillRate
	rv.Observe(v0, v1, 10)
	rv.ObserveBusy(v0, v1, 10)
	checkBacklog(t, "timed engine", rv.Price(4, 0, v1), 2, 0, BacklogRecent)
}
