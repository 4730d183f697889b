package sim

import (
	"strings"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Llama2-70B TP8 engines from the Splitwise characterization database
// (Mutinifni/splitwise-sim data/perf_model.csv, MIT): the medians are the
// ones package controller transcribes (BuiltinProfilePoints), fitted with the
// controller's least squares (prefill a + b·L + c·L² over batch-1 prompts of
// 128–8192 tokens; decode a + per_seq·batch + per_ctx·ctx over batch 1–64).
// In the simulator a prefill batch costs a + b·ΣL + c·ΣL² (DistServe's
// batching rule) and the decode step uses one coefficient set.
//
// KV capacity is not in the data: we estimate it with vLLM's rule
// (../shared/REFERENCES.md): 8 × 80 GiB × 0.9 − 138 GB of fp16 weights ≈
// 480 GB, less ~5 % activations, at 2 × 80 layers × 8 KV heads × 128 × 2 B
// = 327,680 B per token ≈ 1.39 M tokens; we use 1.3 M.
const (
	llama70bKVBytesPerToken = 2 * 80 * 8 * 128 * 2
	llama70bKVTokens        = 1_300_000
)

func init() {
	for _, pp := range controller.BuiltinProfilePoints() {
		if !strings.Contains(strings.ToLower(pp.Model), "llama-2-70b") {
			continue
		}
		fit, err := pp.Fit()
		if err != nil || !fit.HasPrefill || !fit.HasDecode {
			continue // the table simply lacks this engine kind
		}
		gpu := "a100"
		if strings.Contains(strings.ToLower(pp.GPU), "h100") {
			gpu = "h100"
		}
		name := "llama2-70b-tp8-" + gpu
		d := fit.Decode
		builtinProfiles[name] = Profile{
			Name: name, Model: pp.Model, GPU: pp.GPU, TP: pp.TP,
			PrefillMs: [3]float64{fit.Prefill.A * 1e3, fit.Prefill.B * 1e3, fit.Prefill.C * 1e3},
			// a + b·(Σctx + batch) + c·batch = A + PerCtx·Σctx + PerSeq·batch
			DecodeSmallMs:    [3]float64{d.A * 1e3, d.PerCtxToken * 1e3, (d.PerSeq - d.PerCtxToken) * 1e3},
			DecodeLargeMs:    [3]float64{d.A * 1e3, d.PerCtxToken * 1e3, (d.PerSeq - d.PerCtxToken) * 1e3},
			DecodeLargeBatch: 1 << 62,
			KVCapacityTokens: llama70bKVTokens,
			KVBytesPerToken:  llama70bKVBytesPerToken,
			MaxBatchTokens:   16384,
			Source:           "Splitwise perf_model.csv medians (Mutinifni/splitwise-sim 8f99e7dc, MIT) via controller.BuiltinProfilePoints; KV capacity estimated",
		}
	}
}
