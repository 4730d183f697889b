package engine

import (
	"bytes"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

func parseFile(t *testing.T, kind Kind, name string) (Metrics, error) {
	t.Helper()
	f, err := os.Open("../testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Parse(kind, f)
}

func TestParseVLLMNewName(t *testing.T) {
	m, err := parseFile(t, VLLM, "vllm_new.prom")
	if err != nil {
		t.Fatal(err)
	}
	// 5,691 blocks of 16 tokens = 91,056 tokens; 25 % in use = 22,764
	if m.Running != 12 || m.Waiting != 3 || m.KVUsage != 0.25 || m.UsageMetric != "vllm:kv_cache_usage_perc" ||
		m.NumGPUBlocks != 5691 || m.BlockSize != 16 || m.CapacityTokens != 91056 || m.KVUsedTokens != 22764 ||
		m.GPUMemoryUtilization != 0.9 || len(m.Missing) != 0 {
		t.Fatalf("unexpected metrics; got %+v", m)
	}
}

func TestParseVLLMOldName(t *testing.T) {
	m, err := parseFile(t, VLLM, "vllm_old.prom")
	if err != nil {
		t.Fatal(err)
	}
	if m.Running != 7 || m.Waiting != 0 || m.UsageMetric != "vllm:gpu_cache_usage_perc" || m.CapacityTokens != 91056 ||
		m.KVUsedTokens != 45528 || len(m.Missing) != 0 {
		t.Fatalf("unexpected metrics; got %+v", m)
	}
}

func TestParseSGLang(t *testing.T) {
	m, err := parseFile(t, SGLang, "sglang.prom")
	if err != nil {
		t.Fatal(err)
	}
	if m.Running != 24 || m.Waiting != 5 || m.KVUsedTokens != 30123 || m.CapacityTokens != 430000 ||
		m.KVUsage != 0.07 || len(m.Missing) != 0 {
		t.Fatalf("unexpected metrics; got %+v", m)
	}
}

func TestParseMissingAndNaN(t *testing.T) {
	m, err := parseFile(t, VLLM, "vllm_missing_nan.prom")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vllm:num_requests_running", "vllm:num_requests_waiting"}
	if !reflect.DeepEqual(m.Missing, want) {
		t.Fatalf("unexpected missing; got %v; want %v", m.Missing, want)
	}
	// num_gpu_blocks="None": capacity unknown, so KV tokens unknown
	if m.Running != -1 || m.Waiting != -1 || m.KVUsage != 0.125 || m.CapacityTokens != 0 || m.KVUsedTokens != -1 {
		t.Fatalf("unexpected metrics; got %+v", m)
	}
	if len(m.Notes) != 1 || !strings.Contains(m.Notes[0], `num_gpu_blocks="None"`) {
		t.Fatalf("unexpected notes; got %v", m.Notes)
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := parseFile(t, VLLM, "garbage.txt"); !errors.Is(err, ErrParse) {
		t.Fatalf("unexpected error for garbage; got %v; want ErrParse", err)
	}
	// SGLang's body read as vLLM: parses, but no vLLM metrics
	if _, err := parseFile(t, VLLM, "sglang.prom"); !errors.Is(err, ErrNoEngineMetrics) {
		t.Fatalf("unexpected error for wrong kind; got %v; want ErrNoEngineMetrics", err)
	}
	if _, err := Parse("trtllm", strings.NewReader("")); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unexpected error; got %v; want ErrUnknownKind", err)
	}
	if _, err := Parse(SGLang, strings.NewReader("")); !errors.Is(err, ErrNoEngineMetrics) {
		t.Fatalf("unexpected error for empty body; got %v; want ErrNoEngineMetrics", err)
	}
}

func TestParseDataParallelAndHybrid(t *testing.T) {
	body := `vllm:num_requests_running{engine="0"} 2
vllm:num_requests_running{engine="1"} 3
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0.25
vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="100",kv_cache_size_tokens="1000"} 1
vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="100"} 1
vllm:kv_cache_usage_perc_extra NaN
`
	m, err := Parse(VLLM, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// capacity 1000 (kv_cache_size_tokens wins) + 1600; usage mean 0.375
	if m.Running != 5 || m.CapacityTokens != 2600 || m.KVUsage != 0.375 || m.KVUsedTokens != 975 || len(m.Notes) != 1 {
		t.Fatalf("unexpected metrics; got %+v", m)
	}
	if !math.IsNaN(Metrics{KVUsage: math.NaN()}.KVUsage) {
		t.Fatal("BUG")
	}
}

func BenchmarkParseVLLM(b *testing.B) {
	body, err := os.ReadFile("../testdata/vllm_new.prom")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(VLLM, bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}
