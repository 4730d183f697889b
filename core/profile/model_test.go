package profile

import (
	"math"
	"testing"
)

// Parameter counts from the geometry match the models' published sizes
// (their Hugging Face model cards) within 3 %.
func TestGeometryParamsMatchPublishedSizes(t *testing.T) {
	cases := []struct {
		model         string
		total, active float64 // billions; active 0: dense
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", 8.03, 0},
		{"meta-llama/Llama-3.1-70B-Instruct", 70.6, 0},
		{"Qwen/Qwen2.5-7B-Instruct", 7.61, 0},
		{"Qwen/Qwen2.5-72B-Instruct", 72.7, 0},
		{"Qwen/Qwen3-8B", 8.2, 0},
		{"mistralai/Mistral-7B-Instruct-v0.3", 7.25, 0},
		{"mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7, 12.9},
		{"deepseek-ai/DeepSeek-V2-Lite-Chat", 15.7, 2.4},
	}
	for _, c := range cases {
		g, ok := LookupGeometry(c.model)
		if !ok {
			t.Fatalf("%s: no geometry", c.model)
		}
		total, active := g.Params()
		if math.Abs(total/1e9-c.total)/c.total > 0.03 {
			t.Errorf("%s: %.2f B parameters; published %.2f B", c.model, total/1e9, c.total)
		}
		if c.active > 0 {
			// active: the weights a token passes through (no input
			// embedding lookup), as the model cards count them.
			if a := active / 1e9; math.Abs(a-c.active)/c.active > 0.05 {
				t.Errorf("%s: %.2f B active parameters; published %.1f B", c.model, a, c.active)
			}
		}
	}
}

// KV bytes per token: Llama-3-8B bf16 = 2 × 32 × 8 × 128 × 2 = 131,072
// (../shared/REFERENCES.md); DeepSeek's MLA keeps one 576-wide latent.
func TestKVBytesPerToken(t *testing.T) {
	g, _ := LookupGeometry("meta-llama/Meta-Llama-3-8B-Instruct")
	if got := g.KVBytesPerToken(); got != 131072 {
		t.Errorf("Llama-3-8B: %v B/token; want 131072", got)
	}
	d, _ := LookupGeometry("deepseek-ai/DeepSeek-V2-Lite")
	if got := d.KVBytesPerToken(); got != 27*576*2 {
		t.Errorf("DeepSeek-V2-Lite: %v B/token; want %d", got, 27*576*2)
	}
}

// config.json fields give the same geometry as the built-in table, and
// OPT's spelling (ffn_dim, no num_key_value_heads, relu) is understood.
func TestFromHFConfig(t *testing.T) {
	llama := `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,"intermediate_size":14336,
"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":128256,"hidden_act":"silu",
"max_position_embeddings":131072,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`
	g, err := FromHFConfig("my/llama", []byte(llama))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := LookupGeometry("meta-llama/Llama-3.1-8B-Instruct")
	gt, _ := g.Params()
	bt, _ := b.Params()
	if gt != bt || g.HeadDim != 128 || !g.GatedMLP || g.KVBytesPerToken() != b.KVBytesPerToken() {
		t.Errorf("config.json geometry %+v differs from the table's %+v", g, b)
	}
	opt := `{"model_type":"opt","hidden_size":5120,"ffn_dim":20480,"num_attention_heads":40,"num_hidden_layers":40,
"vocab_size":50272,"activation_function":"relu","max_position_embeddings":2048,"torch_dtype":"float16"}`
	o, err := FromHFConfig("facebook/opt-13b", []byte(opt))
	if err != nil {
		t.Fatal(err)
	}
	if o.KVHeads != 40 || o.Intermediate != 20480 || o.GatedMLP || !o.TiedEmbeddings {
		t.Errorf("OPT geometry %+v", o)
	}
	mixtral := `{"model_type":"mixtral","hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,
"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":32000,"num_local_experts":8,"num_experts_per_tok":2,"hidden_act":"silu"}`
	m, err := FromHFConfig("mixtral", []byte(mixtral))
	if err != nil || m.Experts != 8 || m.ActiveExperts != 2 || m.MoEIntermediate != 14336 {
		t.Errorf("Mixtral geometry %+v, %v", m, err)
	}
	for _, bad := range []string{`{`, `{"num_hidden_layers":-1}`, `{"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":8,"intermediate_size":1,"vocab_size":1}`} {
		if _, err := FromHFConfig("bad", []byte(bad)); err == nil {
			t.Errorf("config %s accepted", bad)
		}
	}
}

// NVML names, short kinds and the list all resolve; unknown
// kinds do not.
func TestLookupGPU(t *testing.T) {
	cases := map[string]string{
		"NVIDIA H100 80GB HBM3": "H100-SXM-80GB", "H100": "H100-SXM-80GB", "H100 PCIe": "H100-PCIe-80GB",
		"NVIDIA A100-SXM4-40GB": "A100-SXM-40GB", "A100-80G": "A100-SXM-80GB", "A100": "A100-SXM-80GB",
		"NVIDIA H200": "H200-SXM-141GB", "B200": "B200-180GB", "NVIDIA L40S": "L40S-48GB", "L4": "L4-24GB",
		"AMD Instinct MI300X": "MI300X-192GB",
	}
	for in, want := range cases {
		g, ok := LookupGPU(in)
		if !ok || g.Name != want {
			t.Errorf("LookupGPU(%q) = %q, %v; want %q", in, g.Name, ok, want)
		}
	}
	for _, g := range GPUs() {
		if g.Source == "" || g.BF16TFLOPS <= 0 || g.HBMGBps <= 0 || g.MemoryGB <= 0 {
			t.Errorf("%s: incomplete datasheet figures %+v", g.Name, g)
		}
	}
	if _, ok := LookupGPU("TPU-v5e"); ok {
		t.Error("an unknown accelerator resolved")
	}
}

// The prior behaves like hardware: longer prompts, larger batches and
// contexts cost more; a faster GPU or more TP costs less.
func TestPriorShape(t *testing.T) {
	p := mustPrior(t, "meta-llama/Llama-3.1-70B-Instruct", "H100", 4)
	for l := 256.0; l < 32768; l *= 2 {
		if !(p.PrefillSeconds(2*l) > p.PrefillSeconds(l)) {
			t.Errorf("prefill not increasing at %v", l)
		}
	}
	if !(p.DecodeStepSeconds(64, 64*2048) > p.DecodeStepSeconds(8, 8*2048)) || !(p.DecodeStepSeconds(8, 8*8192) > p.DecodeStepSeconds(8, 8*1024)) {
		t.Error("decode step not increasing in batch or context")
	}
	p8 := mustPrior(t, "meta-llama/Llama-3.1-70B-Instruct", "H100", 8)
	a100 := mustPrior(t, "meta-llama/Llama-3.1-70B-Instruct", "A100", 4)
	if !(p8.PrefillSeconds(8192) < p.PrefillSeconds(8192)) || !(a100.PrefillSeconds(8192) > p.PrefillSeconds(8192)) {
		t.Error("TP8 not faster than TP4, or A100 not slower than H100")
	}
	// The controller profile from the prior reproduces the prior within 15 %
	// over the grid it was fitted on.
	prof, ok := Resolve("meta-llama/Llama-3.1-8B-Instruct", "H100", 1)
	if !ok || prof.Prefill.MaxInput < 1<<20 {
		t.Fatalf("Resolve: %+v %v", prof, ok)
	}
	q := mustPrior(t, "meta-llama/Llama-3.1-8B-Instruct", "H100", 1)
	for _, l := range []float64{512, 4096, 32768} {
		if got, want := prof.Prefill.Seconds(l), q.PrefillSeconds(l); math.Abs(got-want)/want > 0.15 {
			t.Errorf("fitted prefill(%v) = %v; prior %v", l, got, want)
		}
	}
	if _, ok := Resolve("acme/unknown", "H100", 1); ok {
		t.Error("unknown model resolved")
	}
}
