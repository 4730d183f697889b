package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// The README's example loads: measured points are fitted, a
// geometry-only entry is priced by the prior, and lookups find both.
func TestLoadFileExample(t *testing.T) {
	set, err := LoadFile("testdata/example-profiles.json")
	if err != nil {
		t.Fatal(err)
	}
	i, ok := set.LookupTP("meta-llama/Llama-3.1-8B-Instruct", "H100", 1)
	if !ok {
		t.Fatal("measured profile not found")
	}
	p := set.Profiles[i]
	if p.Origin != controller.OriginMeasured || !p.HasPrefill || !p.HasDecode || p.Source != "our sweep, vLLM 0.11, 2026-11-20" {
		t.Fatalf("measured profile %+v", p)
	}
	// The fit reproduces its points within 10 %.
	for _, c := range []struct{ l, s float64 }{{512, 0.031}, {2048, 0.118}, {8192, 0.52}} {
		if got := p.Prefill.Seconds(c.l); got < 0.9*c.s || got > 1.1*c.s {
			t.Errorf("prefill(%v) = %v; want ≈ %v", c.l, got, c.s)
		}
	}
	j, ok := set.LookupTP("acme/house-model-13b", "L40S", 2)
	if !ok {
		t.Fatal("hf_config profile not found")
	}
	q := set.Profiles[j]
	if q.Origin != controller.OriginPrior || !strings.Contains(q.Source, "L40S") || q.TP != 2 {
		t.Fatalf("hf_config profile %+v", q)
	}
	// A 13B model on two L40S: a 4k prompt takes tens to hundreds of ms.
	if s := q.Prefill.Seconds(4096); s < 0.05 || s > 2 {
		t.Errorf("prefill(4096) = %v s", s)
	}
}

// Validation errors name the file, the line and the field, and nothing
// is loaded.
func TestLoadFileErrorsNameFileLineField(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, want string
	}{
		{"negative-seconds", `{"profiles": [
  {"model": "m", "gpu": "H100", "tp": 1,
   "prefill_points": [
     {"input_tokens": 512, "seconds": 0.03},
     {"input_tokens": 1024, "seconds": -1},
     {"input_tokens": 2048, "seconds": 0.1}
   ]}
]}`, ":5: profiles[0].prefill_points[1].seconds: -1"},
		{"missing-gpu", `{"profiles": [
  {"model": "m", "tp": 1,
   "decode_points": [{"batch": 1, "ctx_tokens": 10, "seconds": 0.01}]}
]}`, ":2: profiles[0].gpu: required"},
		{"unknown-field", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "prefil_points": []}
]}`, ":3: profiles[0].prefil_points: unknown field"},
		{"wrong-type", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "tp": "two"}
]}`, ":3: profiles.tp: want int"},
		{"syntax", `{"profiles": [
  {"model": "m", "gpu": "H100",,
]}`, ":2:"},
		{"degenerate-fit", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "prefill_points": [{"input_tokens": 512, "seconds": 0.03}, {"input_tokens": 512, "seconds": 0.03}]}
]}`, ":3: profiles[0].prefill_points: invalid profile: prefill fit needs >= 3 points"},
		{"prefill-points-out-of-order", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "prefill_points": [{"input_tokens": 512, "seconds": 0.1}, {"input_tokens": 2, "seconds": 0.8}, {"input_tokens": 9, "seconds": 0.2}]}
]}`, ":3: profiles[0].prefill_points: invalid profile: prefill points fit a time that falls as the prompt grows"},
		{"decode-cheaper-with-batch", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "decode_points": [{"batch": 1, "ctx_tokens": 1024, "seconds": 0.02}, {"batch": 8, "ctx_tokens": 8192, "seconds": 0.01}, {"batch": 64, "ctx_tokens": 1024, "seconds": 0.005}]}
]}`, ":3: profiles[0].decode_points: invalid profile: decode points fit a step that gets cheaper with more sequences"},
		{"bad-hf-config", `{"profiles": [
  {"model": "m", "gpu": "H100",
   "hf_config": {"num_hidden_layers": 0, "hidden_size": 4096}}
]}`, ":3: profiles[0].hf_config:"},
		{"unknown-gpu-for-prior", `{"profiles": [
  {"model": "m", "gpu": "TPU-v9",
   "hf_config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}}
]}`, ":2: profiles[0].gpu: \"TPU-v9\": not in the built-in GPU table"},
		{"empty", `{"profiles": []}`, ":1: profiles: at least one profile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".json")
			if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			set, err := LoadFile(path)
			if err == nil || set != nil {
				t.Fatalf("loaded %v; want an error", set)
			}
			if !errors.Is(err, ErrFile) || !strings.Contains(err.Error(), path+c.want) {
				t.Fatalf("error %q; want it to contain %q", err, path+c.want)
			}
		})
	}
}
