package fuzz

import (
	"bytes"
	"errors"
	"testing"

	"github.com/narwhal-io/narwhal/agent/engine"
)

// FuzzEngineMetrics feeds arbitrary bodies to the engine metrics reader as
// vLLM (sglang false) or SGLang: it must never panic, must fail only with
// its sentinel errors, and what it returns must be in range.
func FuzzEngineMetrics(f *testing.F) {
	f.Add(false, []byte("vllm:num_requests_running 1\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"5691\"} 1\n"))
	f.Add(true, []byte("sglang:num_used_tokens 10\nsglang:max_total_num_tokens 100\n"))
	f.Add(false, []byte("vllm:kv_cache_usage_perc NaN\n"))
	f.Fuzz(func(t *testing.T, sglang bool, body []byte) {
		kind := engine.VLLM
		if sglang {
			kind = engine.SGLang
		}
		m, err := engine.Parse(kind, bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, engine.ErrParse) && !errors.Is(err, engine.ErrNoEngineMetrics) {
				t.Fatalf("unexpected error kind; got %v", err)
			}
			return
		}
		if m.Kind != kind || m.Running < -1 || m.Waiting < -1 || m.KVUsedTokens < -1 || m.CapacityTokens < 0 ||
			m.NumGPUBlocks < 0 || m.BlockSize < 0 {
			t.Fatalf("out-of-range result; got %+v", m)
		}
		if m.KVUsage < 0 {
			t.Fatalf("negative usage; got %v", m.KVUsage)
		}
		if kind == engine.VLLM && m.CapacityTokens > 0 && m.KVUsedTokens > m.CapacityTokens {
			t.Fatalf("vLLM kv tokens %d above capacity %d", m.KVUsedTokens, m.CapacityTokens)
		}
	})
}
