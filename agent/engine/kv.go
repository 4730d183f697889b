package engine

import (
	"errors"
	"fmt"
	"math"
)

// ErrGeometry: a model KV geometry field is missing or out of range.
var ErrGeometry = errors.New("engine: invalid model KV geometry")

// Geometry is a model's KV cache geometry.
type Geometry struct {
	// Layers is the number of transformer layers (num_hidden_layers).
	Layers int64 `yaml:"layers" json:"layers"`
	// KVHeads is the number of key/value heads (num_key_value_heads;
	// num_attention_heads without grouped-query attention).
	KVHeads int64 `yaml:"kv_heads" json:"kv_heads"`
	// HeadDim is one head's dimension (hidden_size / num_attention_heads
	// unless the model sets head_dim).
	HeadDim int64 `yaml:"head_dim" json:"head_dim"`
	// DTypeBytes is the bytes of one KV cache element: 2 for fp16 or
	// bf16, 1 for an fp8 cache.
	DTypeBytes int64 `yaml:"dtype_bytes" json:"dtype_bytes"`
	// TP is the tensor-parallel degree (1 if 0).
	TP int64 `yaml:"tp" json:"tp"`
}

// Zero reports whether no geometry was given.
func (g Geometry) Zero() bool { return g == Geometry{} }

// BytesPerToken is the KV bytes one token takes on one tensor-parallel
// rank: 2 (K and V) × layers × KV heads per rank × head dim × dtype bytes.
// KV heads per rank is max(1, KV heads / TP): with more ranks than KV
// heads, engines replicate heads.
func (g Geometry) BytesPerToken() (int64, error) {
	tp := g.TP
	if tp == 0 {
		tp = 1
	}
	if g.Layers <= 0 || g.Layers > 1024 || g.KVHeads <= 0 || g.KVHeads > 1024 || g.HeadDim <= 0 || g.HeadDim > 4096 ||
		g.DTypeBytes <= 0 || g.DTypeBytes > 8 || tp < 0 || tp > 1024 {
		return 0, fmt.Errorf("%w: %+v: layers 1..1024, kv_heads 1..1024, head_dim 1..4096, dtype_bytes 1..8, tp 0..1024", ErrGeometry, g)
	}
	heads := max(1, g.KVHeads/tp)
	return 2 * g.Layers * heads * g.HeadDim * g.DTypeBytes, nil
}

// KV limit sources.
const (
	KVSourceEngine = "engine"     // the engine's own capacity
	KVSourceBound  = "nvml_bound" // no engine number: the NVML memory bound
)

// KVLimit is one engine's physical KV limit and how it was checked.
type KVLimit struct {
	// Tokens is the limit the core gets; 0 unknown.
	Tokens int64  `json:"tokens"`
	Source string `json:"source,omitempty"`
	// EngineTokens is the engine's own capacity (0 unknown).
	EngineTokens int64 `json:"engine_tokens"`
	// BoundTokens is the most tokens the GPU memory could hold at the
	// memory utilisation: floor(memory × utilisation / bytes per token);
	// 0 when NVML memory or the geometry is unknown.
	BoundTokens   int64 `json:"bound_tokens"`
	BytesPerToken int64 `json:"bytes_per_token"`
	// Disagreement is non-empty when the engine's number is impossible
	// given NVML memory and the geometry, or the check could not run.
	Disagreement string `json:"disagreement,omitempty"`
}

// CrossCheck derives the KV limit. engineTokens is the engine's reported
// capacity (0 unknown); gpuMemBytes the smallest total memory among the
// engine's GPUs per NVML (0 unknown); memUtil the fraction of it the engine
// may use (vLLM's gpu_memory_utilization; <= 0 or > 1 means 1). The
// engine's number wins when present; the NVML bound only replaces it when
// the engine gives none. An engine number above the bound is reported as a
// disagreement (and still used: the engine knows its pool; the operator
// must look).
func CrossCheck(engineTokens int64, gpuMemBytes uint64, g Geometry, memUtil float64) KVLimit {
	l := KVLimit{EngineTokens: max(engineTokens, 0)}
	if memUtil <= 0 || memUtil > 1 || math.IsNaN(memUtil) {
		memUtil = 1
	}
	var why string
	bpt, err := g.BytesPerToken()
	switch {
	case g.Zero():
		why = "no model geometry configured"
	case err != nil:
		why = err.Error()
	case gpuMemBytes == 0:
		why = "NVML memory unknown"
	default:
		l.BytesPerToken = bpt
		l.BoundTokens = int64(math.Floor(float64(gpuMemBytes) * memUtil / float64(bpt)))
	}
	switch {
	case l.EngineTokens > 0:
		l.Tokens, l.Source = l.EngineTokens, KVSourceEngine
		if l.BoundTokens > 0 && l.EngineTokens > l.BoundTokens {
			l.Disagreement = fmt.Sprintf(
				"engine reports %d KV tokens but %d B of GPU memory × %.2f / %d B per token holds at most %d: check the model geometry or the GPU assignment",
				l.EngineTokens, gpuMemBytes, memUtil, bpt, l.BoundTokens)
		} else if l.BoundTokens == 0 {
			l.Disagreement = "not cross-checked: " + why
		}
	case l.BoundTokens > 0:
		l.Tokens, l.Source = l.BoundTokens, KVSourceBound
		l.Disagreement = "engine reports no KV capacity: using the NVML memory bound, an overestimate (weights and activations not subtracted)"
	default:
		l.Disagreement = "KV limit unknown: engine reports no capacity and " + why
	}
	return l
}
