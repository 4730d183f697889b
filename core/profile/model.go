package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrGeometry is wrapped by every error about a model geometry.
var ErrGeometry = errors.New("profile: invalid model geometry")

// Geometry is what the prior needs to know of a model: the fields of its
// Hugging Face config.json (names as there).
type Geometry struct {
	// Name is the Hugging Face id, e.g. "meta-llama/Llama-3.1-8B-Instruct".
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	// ModelType is config.json's model_type ("llama", "qwen2", "opt", ...).
	ModelType string `json:"model_type"`
	Layers    int    `json:"num_hidden_layers"`
	Hidden    int    `json:"hidden_size"`
	Heads     int    `json:"num_attention_heads"`
	KVHeads   int    `json:"num_key_value_heads"`
	HeadDim   int    `json:"head_dim"`
	// Intermediate is the dense MLP width (ffn_dim for OPT).
	Intermediate int `json:"intermediate_size"`
	Vocab        int `json:"vocab_size"`
	// GatedMLP: three MLP matrices (SwiGLU: gate, up, down) instead of two.
	GatedMLP bool `json:"gated_mlp"`
	// TiedEmbeddings: the LM head shares the embedding matrix.
	TiedEmbeddings bool `json:"tie_word_embeddings"`
	// MaxContext is max_position_embeddings.
	MaxContext int `json:"max_position_embeddings"`
	// Mixture of experts: Experts routed experts of width MoEIntermediate,
	// ActiveExperts of them per token, SharedExperts always on, and the
	// first DenseLayers layers dense (DeepSeek's first_k_dense_replace).
	Experts         int `json:"n_routed_experts,omitempty"`
	ActiveExperts   int `json:"num_experts_per_tok,omitempty"`
	SharedExperts   int `json:"n_shared_experts,omitempty"`
	MoEIntermediate int `json:"moe_intermediate_size,omitempty"`
	DenseLayers     int `json:"first_k_dense_replace,omitempty"`
	// Multi-head latent attention (DeepSeek-V2/V3): KVLoRARank > 0.
	QLoRARank  int    `json:"q_lora_rank,omitempty"`
	KVLoRARank int    `json:"kv_lora_rank,omitempty"`
	QKRopeDim  int    `json:"qk_rope_head_dim,omitempty"`
	QKNopeDim  int    `json:"qk_nope_head_dim,omitempty"`
	VHeadDim   int    `json:"v_head_dim,omitempty"`
	DTypeBytes int    `json:"dtype_bytes"` // weights and KV: 2 for bf16/fp16, 1 for fp8
	Source     string `json:"source"`
}

const hfSrc = "Hugging Face config.json of "

// The built-in geometries: each from the model's config.json on the
// Hugging Face hub (the fields above, copied).
var geometries = []Geometry{
	{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3-8b", "llama3-8b", "llama-3.1-8b"},
		ModelType: "llama", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 128256, GatedMLP: true, MaxContext: 131072},
	{Name: "meta-llama/Llama-3.1-70B-Instruct", Aliases: []string{"meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Meta-Llama-3-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3-70b", "llama3-70b", "llama-3.1-70b", "llama-3.3-70b"},
		ModelType: "llama", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, Intermediate: 28672, Vocab: 128256, GatedMLP: true, MaxContext: 131072},
	{Name: "meta-llama/Llama-3.2-3B-Instruct", Aliases: []string{"meta-llama/Llama-3.2-3B"},
		ModelType: "llama", Layers: 28, Hidden: 3072, Heads: 24, KVHeads: 8, HeadDim: 128, Intermediate: 8192, Vocab: 128256, GatedMLP: true, TiedEmbeddings: true, MaxContext: 131072},
	{Name: "meta-llama/Llama-2-70b-hf", Aliases: []string{"meta-llama/Llama-2-70b-chat-hf", "llama2-70b", "llama-2-70b"},
		ModelType: "llama", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, Intermediate: 28672, Vocab: 32000, GatedMLP: true, MaxContext: 4096},
	{Name: "Qwen/Qwen2.5-7B-Instruct", Aliases: []string{"Qwen/Qwen2.5-7B"},
		ModelType: "qwen2", Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4, HeadDim: 128, Intermediate: 18944, Vocab: 152064, GatedMLP: true, MaxContext: 32768},
	{Name: "Qwen/Qwen2.5-14B-Instruct", Aliases: []string{"Qwen/Qwen2.5-14B"},
		ModelType: "qwen2", Layers: 48, Hidden: 5120, Heads: 40, KVHeads: 8, HeadDim: 128, Intermediate: 13824, Vocab: 152064, GatedMLP: true, MaxContext: 32768},
	{Name: "Qwen/Qwen2.5-32B-Instruct", Aliases: []string{"Qwen/Qwen2.5-32B"},
		ModelType: "qwen2", Layers: 64, Hidden: 5120, Heads: 40, KVHeads: 8, HeadDim: 128, Intermediate: 27648, Vocab: 152064, GatedMLP: true, MaxContext: 32768},
	{Name: "Qwen/Qwen2.5-72B-Instruct", Aliases: []string{"Qwen/Qwen2.5-72B"},
		ModelType: "qwen2", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, Intermediate: 29568, Vocab: 152064, GatedMLP: true, MaxContext: 32768},
	{Name: "Qwen/Qwen3-8B", Aliases: []string{"Qwen/Qwen3-8B-Base"},
		ModelType: "qwen3", Layers: 36, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 12288, Vocab: 151936, GatedMLP: true, MaxContext: 40960},
	{Name: "Qwen/Qwen3-14B", Aliases: []string{"Qwen/Qwen3-14B-Base"},
		ModelType: "qwen3", Layers: 40, Hidden: 5120, Heads: 40, KVHeads: 8, HeadDim: 128, Intermediate: 17408, Vocab: 151936, GatedMLP: true, MaxContext: 40960},
	{Name: "Qwen/Qwen3-32B",
		ModelType: "qwen3", Layers: 64, Hidden: 5120, Heads: 64, KVHeads: 8, HeadDim: 128, Intermediate: 25600, Vocab: 151936, GatedMLP: true, MaxContext: 40960},
	{Name: "mistralai/Mistral-7B-Instruct-v0.3", Aliases: []string{"mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-v0.3", "mistral-7b"},
		ModelType: "mistral", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 32768, GatedMLP: true, MaxContext: 32768},
	{Name: "mistralai/Mixtral-8x7B-Instruct-v0.1", Aliases: []string{"mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"},
		ModelType: "mixtral", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 14336, Vocab: 32000, GatedMLP: true, MaxContext: 32768,
		Experts: 8, ActiveExperts: 2, MoEIntermediate: 14336},
	{Name: "deepseek-ai/DeepSeek-V2-Lite-Chat", Aliases: []string{"deepseek-ai/DeepSeek-V2-Lite"},
		ModelType: "deepseek_v2", Layers: 27, Hidden: 2048, Heads: 16, KVHeads: 16, Intermediate: 10944, Vocab: 102400, GatedMLP: true, MaxContext: 163840,
		Experts: 64, ActiveExperts: 6, SharedExperts: 2, MoEIntermediate: 1408, DenseLayers: 1,
		KVLoRARank: 512, QKRopeDim: 64, QKNopeDim: 128, VHeadDim: 128},
	{Name: "facebook/opt-13b", Aliases: []string{"opt-13b"},
		ModelType: "opt", Layers: 40, Hidden: 5120, Heads: 40, KVHeads: 40, HeadDim: 128, Intermediate: 20480, Vocab: 50272, TiedEmbeddings: true, MaxContext: 2048},
	{Name: "facebook/opt-66b", Aliases: []string{"opt-66b"},
		ModelType: "opt", Layers: 64, Hidden: 9216, Heads: 72, KVHeads: 72, HeadDim: 128, Intermediate: 36864, Vocab: 50272, TiedEmbeddings: true, MaxContext: 2048},
}

func init() {
	for i := range geometries {
		g := &geometries[i]
		g.DTypeBytes = 2
		g.Source = hfSrc + g.Name + " (huggingface.co/" + g.Name + "/blob/main/config.json)"
	}
}

// Geometries returns the built-in model geometries (a fresh copy).
func Geometries() []Geometry {
	out := make([]Geometry, len(geometries))
	copy(out, geometries)
	return out
}

// NormModel lowercases a model name and drops an org prefix and
// separators ("meta-llama/Llama-3.1-8B-Instruct" -> "llama318binstruct").
func NormModel(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return strings.NewReplacer("-", "", "_", "", ".", "", " ", "").Replace(s)
}

// LookupGeometry finds a built-in geometry by Hugging Face id or alias
// (case, org prefix and separators ignored).
func LookupGeometry(model string) (Geometry, bool) {
	m := NormModel(model)
	if m == "" {
		return Geometry{}, false
	}
	for _, g := range geometries {
		if NormModel(g.Name) == m {
			return g, true
		}
		for _, a := range g.Aliases {
			if NormModel(a) == m {
				return g, true
			}
		}
	}
	return Geometry{}, false
}

// hfConfig is the subset of config.json the prior reads, with the
// spellings different model families use.
type hfConfig struct {
	ModelType       string    `json:"model_type"`
	Layers          int       `json:"num_hidden_layers"`
	Hidden          int       `json:"hidden_size"`
	Heads           int       `json:"num_attention_heads"`
	KVHeads         *int      `json:"num_key_value_heads"`
	HeadDim         int       `json:"head_dim"`
	Intermediate    int       `json:"intermediate_size"`
	FFNDim          int       `json:"ffn_dim"` // OPT
	Vocab           int       `json:"vocab_size"`
	HiddenAct       string    `json:"hidden_act"`
	ActivationFn    string    `json:"activation_function"` // OPT
	Tie             *bool     `json:"tie_word_embeddings"`
	MaxPos          int       `json:"max_position_embeddings"`
	TorchDType      string    `json:"torch_dtype"`
	NumLocalExperts int       `json:"num_local_experts"` // Mixtral
	NumExperts      int       `json:"num_experts"`       // Qwen MoE
	NRoutedExperts  int       `json:"n_routed_experts"`  // DeepSeek
	ExpertsPerTok   int       `json:"num_experts_per_tok"`
	NSharedExperts  int       `json:"n_shared_experts"`
	MoEIntermediate int       `json:"moe_intermediate_size"`
	FirstKDense     int       `json:"first_k_dense_replace"`
	QLoRARank       *int      `json:"q_lora_rank"`
	KVLoRARank      int       `json:"kv_lora_rank"`
	QKRopeDim       int       `json:"qk_rope_head_dim"`
	QKNopeDim       int       `json:"qk_nope_head_dim"`
	VHeadDim        int       `json:"v_head_dim"`
	TextConfig      *hfConfig `json:"text_config"` // multimodal wrappers
}

// FromHFConfig reads a model's geometry from its Hugging Face config.json
// (the fields named in Geometry; num_key_value_heads defaults to the
// attention heads, head_dim to hidden/heads, ffn_dim is OPT's
// intermediate size, num_local_experts / num_experts / n_routed_experts
// the expert count; a text_config of a multimodal wrapper is used when
// present). name is the model's id.
func FromHFConfig(name string, configJSON []byte) (Geometry, error) {
	var c hfConfig
	if err := json.Unmarshal(configJSON, &c); err != nil {
		return Geometry{}, fmt.Errorf("%w: %s: config.json: %w", ErrGeometry, name, err)
	}
	if c.TextConfig != nil && c.Layers == 0 {
		mt := c.ModelType
		c = *c.TextConfig
		if c.ModelType == "" {
			c.ModelType = mt
		}
	}
	g := Geometry{Name: name, ModelType: c.ModelType, Layers: c.Layers, Hidden: c.Hidden, Heads: c.Heads,
		HeadDim: c.HeadDim, Intermediate: c.Intermediate, Vocab: c.Vocab, MaxContext: c.MaxPos,
		ActiveExperts: c.ExpertsPerTok, SharedExperts: c.NSharedExperts, MoEIntermediate: c.MoEIntermediate,
		DenseLayers: c.FirstKDense, KVLoRARank: c.KVLoRARank, QKRopeDim: c.QKRopeDim, QKNopeDim: c.QKNopeDim, VHeadDim: c.VHeadDim,
		DTypeBytes: 2, Source: hfSrc + name + " (supplied)"}
	if c.KVHeads != nil {
		g.KVHeads = *c.KVHeads
	} else {
		g.KVHeads = c.Heads
	}
	if c.QLoRARank != nil {
		g.QLoRARank = *c.QLoRARank
	}
	if g.Intermediate == 0 {
		g.Intermediate = c.FFNDim
	}
	g.Experts = max(c.NumLocalExperts, c.NumExperts, c.NRoutedExperts)
	if g.Experts > 0 && g.MoEIntermediate == 0 {
		g.MoEIntermediate = g.Intermediate // Mixtral: experts are full MLPs
	}
	act := strings.ToLower(c.HiddenAct + c.ActivationFn)
	g.GatedMLP = c.ModelType != "opt" && c.ModelType != "gpt2" && (strings.Contains(act, "silu") || strings.Contains(act, "swish") || strings.Contains(act, "gelu_pytorch_tanh") || act == "")
	if c.Tie != nil {
		g.TiedEmbeddings = *c.Tie
	} else {
		g.TiedEmbeddings = c.ModelType == "opt"
	}
	switch strings.ToLower(c.TorchDType) {
	case "float8_e4m3fn", "float8", "fp8":
		g.DTypeBytes = 1
	case "float32":
		g.DTypeBytes = 2 // served in 16-bit
	}
	if g.HeadDim == 0 && g.Heads > 0 {
		g.HeadDim = g.Hidden / g.Heads
	}
	if err := g.Validate(); err != nil {
		return Geometry{}, err
	}
	return g, nil
}

// Validate checks that the geometry describes a model the prior can price.
func (g *Geometry) Validate() error {
	bad := func(field string, v int) error {
		return fmt.Errorf("%w: %s: %s %d", ErrGeometry, g.Name, field, v)
	}
	switch {
	case g.Layers <= 0 || g.Layers > 1000:
		return bad("num_hidden_layers", g.Layers)
	case g.Hidden <= 0 || g.Hidden > 1<<20:
		return bad("hidden_size", g.Hidden)
	case g.Heads <= 0 || g.Heads > 1<<14:
		return bad("num_attention_heads", g.Heads)
	case g.KVHeads <= 0 || g.KVHeads > g.Heads:
		return bad("num_key_value_heads", g.KVHeads)
	case g.KVLoRARank == 0 && (g.HeadDim <= 0 || g.HeadDim > 4096):
		return bad("head_dim", g.HeadDim)
	case g.Intermediate <= 0 && g.MoEIntermediate <= 0:
		return bad("intermediate_size", g.Intermediate)
	case g.Vocab <= 0 || g.Vocab > 1<<24:
		return bad("vocab_size", g.Vocab)
	case g.Experts < 0 || g.Experts > 4096 || g.ActiveExperts < 0 || g.ActiveExperts > max(g.Experts, 0):
		return bad("num_experts_per_tok", g.ActiveExperts)
	case g.Experts > 0 && g.ActiveExperts == 0:
		return bad("num_experts_per_tok", g.ActiveExperts)
	case g.DTypeBytes != 1 && g.DTypeBytes != 2:
		return bad("dtype_bytes", g.DTypeBytes)
	}
	return nil
}

// attnParams is one layer's attention weights.
func (g *Geometry) attnParams() float64 {
	h := float64(g.Hidden)
	if g.KVLoRARank > 0 { // MLA
		nh := float64(g.Heads)
		qk := float64(g.QKNopeDim + g.QKRopeDim)
		var q float64
		if g.QLoRARank > 0 {
			q = h*float64(g.QLoRARank) + float64(g.QLoRARank)*nh*qk
		} else {
			q = h * nh * qk
		}
		kv := h*float64(g.KVLoRARank+g.QKRopeDim) + float64(g.KVLoRARank)*nh*float64(g.QKNopeDim+g.VHeadDim)
		return q + kv + nh*float64(g.VHeadDim)*h
	}
	qd := float64(g.Heads * g.HeadDim)
	kvd := float64(g.KVHeads * g.HeadDim)
	return h*qd + 2*h*kvd + qd*h
}

func (g *Geometry) mlpMats() float64 {
	if g.GatedMLP {
		return 3
	}
	return 2
}

// layerCounts returns the dense and MoE layer counts.
func (g *Geometry) layerCounts() (dense, moe int) {
	if g.Experts == 0 {
		return g.Layers, 0
	}
	d := min(g.DenseLayers, g.Layers)
	return d, g.Layers - d
}

// expertParams is one routed expert's weights.
func (g *Geometry) expertParams() float64 {
	return g.mlpMats() * float64(g.Hidden) * float64(g.MoEIntermediate)
}

// Params returns the weights in all (embedding and LM head included) and
// the weights one token passes through (active: attention, dense MLPs,
// shared and ActiveExperts routed experts, LM head), without embeddings.
func (g *Geometry) Params() (total, active float64) {
	h := float64(g.Hidden)
	dense, moe := g.layerCounts()
	denseMLP := g.mlpMats() * h * float64(g.Intermediate)
	attn := g.attnParams()
	ex := g.expertParams()
	shared := float64(g.SharedExperts) * ex
	total = float64(g.Layers)*attn + float64(dense)*denseMLP + float64(moe)*(float64(g.Experts)*ex+shared)
	active = float64(g.Layers)*attn + float64(dense)*denseMLP + float64(moe)*(float64(g.ActiveExperts)*ex+shared)
	emb := float64(g.Vocab) * h
	head := emb
	if g.TiedEmbeddings {
		total += emb
	} else {
		total += emb + head
	}
	active += head
	return total, active
}

// KVBytesPerToken is the KV cache one token holds over the whole model
// (all tensor-parallel ranks): 2 × layers × KV heads × head dim × dtype
// bytes; MLA holds one latent of kv_lora_rank + qk_rope_head_dim per layer.
func (g *Geometry) KVBytesPerToken() float64 {
	if g.KVLoRARank > 0 {
		return float64(g.Layers) * float64(g.KVLoRARank+g.QKRopeDim) * float64(g.DTypeBytes)
	}
	return 2 * float64(g.Layers) * float64(g.KVHeads*g.HeadDim) * float64(g.DTypeBytes)
}

// attnDim is the width attention scores and values run over per layer
// (heads × head dim; for MLA heads × (qk dims) for scores).
func (g *Geometry) attnDim() float64 {
	if g.KVLoRARank > 0 {
		return float64(g.Heads) * float64(g.QKNopeDim+g.QKRopeDim+g.VHeadDim) / 2
	}
	return float64(g.Heads * g.HeadDim)
}
