package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLIJSONAndSVG(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "t.csv")
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	for i := 0; i < 200; i++ {
		b.WriteString("2023-11-16 18:15:")
		b.WriteString([]string{"00", "10", "20", "30", "40", "50"}[i%6])
		b.WriteString(".0000000,500,20\n")
	}
	if err := os.WriteFile(csv, []byte(strings.TrimSuffix(b.String(), "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "out.svg")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--trace", csv, "--trace", csv, "--engines", "4", "--policy", "static-best",
		"--json", "--svg", svg, "--rate-scale", "1,2", "--quiet"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v: %q", err, out.String())
	}
	for _, k := range []string{"policy", "requests", "slo_attainment", "ttft_attainment", "tpot_attainment", "goodput_rps",
		"moves", "mean_prefill_engines", "mean_decode_engines", "wall_seconds", "best_split"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("JSON lacks %q: %s", k, out.String())
		}
	}
	if res["requests"].(float64) != 400 || res["policy"] != "static-best" {
		t.Fatalf("unexpected requests/policy: %v %v", res["requests"], res["policy"])
	}
	pt, _ := res["per_trace"].([]any)
	if len(pt) != 2 || pt[1].(map[string]any)["requests"].(float64) != 200 {
		t.Fatalf("unexpected per_trace for two concatenated traces: %v", res["per_trace"])
	}
	s, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(s, []byte("<svg")) || !bytes.Contains(s, []byte("prefill engines")) {
		t.Fatalf("bad svg (%v): %.80s", err, s)
	}
}

func TestCLIRejectsBadFlags(t *testing.T) {
	f := func(args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Fatalf("args %q: no error", args)
		}
	}
	f()                                    // no trace
	f("--trace", "/nonexistent/trace.csv") // missing file
	f("--trace", "x", "--slice", "abc")    // bad slice
	f("--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--policy", "static:0", "--quiet")
	f("--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--policy", "magic", "--quiet")
	f("--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--rate-scale", "-1", "--quiet")
}
