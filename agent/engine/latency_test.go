package engine

import (
	"math"
	"os"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func parsePage(t *testing.T, kind Kind, path string) Metrics {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Parse(kind, f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v; want %v", what, got, want)
	}
}

// A real vLLM page (old names: time_per_output_token_seconds) read into
// cumulative counters, and the interval since the engine's start (all
// counters zero) derived from it.
func TestLatencyFromPublishedVLLMPage(t *testing.T) {
	m := parsePage(t, VLLM, "../testdata/public/vllm_tinyllama_blog.prom")
	lc := m.Latency
	if lc == nil {
		t.Fatal("no latency counters read")
	}
	near(t, "prefill count", lc.PrefillCount, 9)
	near(t, "prefill seconds", lc.PrefillSeconds, 0.38225245475769043)
	near(t, "prompt requests", lc.PromptRequests, 9)
	near(t, "prompt tokens", lc.PromptTokens, 210)
	near(t, "prompt tokens total", lc.PromptTokensTotal, 210)
	near(t, "decode count", lc.DecodeCount, 2362)
	near(t, "decode seconds", lc.DecodeSeconds, 18.68156147003174)
	if !strings.Contains(strings.Join(lc.Names, " "), vllmITLOld) {
		t.Errorf("names %v: want the old inter-token name %s", lc.Names, vllmITLOld)
	}
	zero := &LatencyCounters{}
	li, ok := lc.Since(zero, 10, 4, 800)
	if !ok {
		t.Fatal("no interval since a zero baseline")
	}
	near(t, "interval prefill count", li.PrefillCount, 9)
	near(t, "interval prefill seconds", li.PrefillSeconds, 0.38225245475769043)
	near(t, "interval prompt tokens", li.PrefillTokens, 210)
	near(t, "interval decode count", li.DecodeCount, 2362)
	near(t, "interval decode seconds", li.DecodeSeconds, 18.68156147003174)
	// Σ ITL over the interval: on average 1.87 sequences decoding.
	near(t, "interval batch", li.DecodeBatch, 18.68156147003174/10)
	near(t, "interval ctx", li.DecodeCtxTokens, 800)
	// A restarted engine (counters back below the previous scrape) gives
	// no interval rather than a negative one.
	if _, ok := zero.Since(lc, 10, 4, 800); ok {
		t.Error("counters going down gave an interval")
	}
}

// A real SGLang page (SGLang's docs; old name time_per_output_token, no
// queue time): decode is read, prefill is not (TTFT includes queueing).
func TestLatencyFromPublishedSGLangPage(t *testing.T) {
	m := parsePage(t, SGLang, "../testdata/public/sglang_docs_production_metrics.prom")
	lc := m.Latency
	if lc == nil {
		t.Fatal("no latency counters read")
	}
	near(t, "decode count", lc.DecodeCount, 7.400757e+06)
	near(t, "decode seconds", lc.DecodeSeconds, 866964.5791549598)
	near(t, "prompt tokens total", lc.PromptTokensTotal, 8.128902e+06)
	if lc.PrefillCount != -1 {
		t.Errorf("prefill count %v: want -1 (TTFT without queue time is not a prefill time)", lc.PrefillCount)
	}
	li, ok := lc.Since(&LatencyCounters{PrefillCount: -1, PrefillSeconds: -1, PromptRequests: -1, PromptTokens: -1}, 5, 162, 123859)
	if !ok || li.PrefillCount != 0 || li.DecodeCount != 7.400757e+06 {
		t.Fatalf("interval %+v ok %v: want decode only", li, ok)
	}
	// The page's mean inter-token latency: 117 ms.
	near(t, "mean ITL", li.DecodeSeconds/li.DecodeCount, 866964.5791549598/7.400757e+06)
}

// With queue time exposed (newer SGLang), prefill = TTFT − queueing.
func TestSGLangPrefillFromTTFTLessQueue(t *testing.T) {
	page := `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4
sglang:time_to_first_token_seconds_sum{model_name="m"} 2.0
sglang:time_to_first_token_seconds_count{model_name="m"} 4
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{model_name="m",le="+Inf"} 4
sglang:queue_time_seconds_sum{model_name="m"} 0.5
sglang:queue_time_seconds_count{model_name="m"} 4
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{model_name="m",le="+Inf"} 100
sglang:inter_token_latency_seconds_sum{model_name="m"} 2.5
sglang:inter_token_latency_seconds_count{model_name="m"} 100
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 4000
`
	m, err := Parse(SGLang, strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	lc := m.Latency
	near(t, "prefill count", lc.PrefillCount, 4)
	near(t, "prefill seconds", lc.PrefillSeconds, 1.5)
	near(t, "decode seconds (new name)", lc.DecodeSeconds, 2.5)
	li, ok := lc.Since(&LatencyCounters{}, 1, 3, 300)
	if !ok {
		t.Fatal("no interval")
	}
	near(t, "prompt tokens from the counter", li.PrefillTokens, 4000)
}

func hist(buckets map[float64]uint64, count uint64, sum float64) *dto.MetricFamily {
	h := &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	for ub, c := range buckets {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(ub), CumulativeCount: proto.Uint64(c)})
	}
	return &dto.MetricFamily{Type: dto.MetricType_HISTOGRAM.Enum(), Metric: []*dto.Metric{{Histogram: h}}}
}

// Σ L² from coarse buckets: prompts 100, 100, 900, 900 in buckets
// (0,128], (128,1024], (1024,+Inf): exact Σ L² = 1,640,000. The estimate
// (midpoints, rescaled to the exact Σ L) lands within 25 % and never
// below Σ L²'s lower bound (ΣL)²/n.
func TestPromptSquaresFromCoarseBuckets(t *testing.T) {
	f := hist(map[float64]uint64{128: 2, 1024: 4, math.Inf(1): 4}, 4, 2000)
	got := histSquares(f)
	want := 2*100.0*100 + 2*900.0*900
	if math.Abs(got-want)/want > 0.25 {
		t.Errorf("Σ L² estimate %v; want within 25 %% of %v", got, want)
	}
	if got < 2000.0*2000/4 {
		t.Errorf("Σ L² estimate %v below (ΣL)²/n", got)
	}
}
