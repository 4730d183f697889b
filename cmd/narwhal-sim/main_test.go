package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
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
	f("--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--client-timeout", "-1", "--quiet")
}

// writeSuiteSources writes small synthetic Azure conv and Mooncake files
// (the Azure code source falls back to the embedded trace).
func writeSuiteSources(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var conv strings.Builder
	conv.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	var mc, ms strings.Builder
	for i := 0; i < 600; i++ {
		fmt.Fprintf(&conv, "2023-11-16 18:%02d:%02d.0000000,%d,%d\n", 10+i/60, i%60, 300+i%900, 20+i%300)
		fmt.Fprintf(&mc, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d}\n", i*700, 2000+(i*37)%12000, 50+i%500)
		fmt.Fprintf(&ms, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d}\n", i*500, 4000+(i*53)%16000, 1+i%80)
	}
	for name, body := range map[string]string{
		"AzureLLMInferenceTrace_conv.csv": conv.String(), "conversation_trace.jsonl": mc.String(), "synthetic_trace.jsonl": ms.String(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCLISuiteQuickJSON(t *testing.T) {
	dir := writeSuiteSources(t)
	cache := filepath.Join(t.TempDir(), "baselines.json")
	decDir := filepath.Join(t.TempDir(), "decisions")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"suite", "--quick", "--json", "--traces", dir, "--baselines", cache, "--decisions", decDir}, &out, &errOut); err != nil {
		t.Fatalf("suite: %v (%s)", err, errOut.String())
	}
	var rep struct {
		Scenarios []struct {
			Scenario struct{ Name, Half string }
			Baseline struct {
				StaticBest float64 `json:"static_best"`
				InRange    bool    `json:"in_range"`
			}
			Narwhal map[string]struct {
				Attainment        float64 `json:"slo_attainment"`
				EngineSlowdown    float64 `json:"engine_slowdown"`
				ControllerProfile string  `json:"controller_profile"`
				Calibrate         bool
			}
		}
		Summary []struct {
			Policy, Group string
			N             int `json:"scenarios"`
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v: %.200s", err, out.String())
	}
	if len(rep.Scenarios) != 2 || rep.Scenarios[0].Scenario.Half != "tune" || rep.Scenarios[1].Scenario.Half != "held" {
		t.Fatalf("scenarios: %+v", rep.Scenarios)
	}
	for _, s := range rep.Scenarios {
		if !s.Baseline.InRange || s.Baseline.StaticBest < 0.8 || s.Baseline.StaticBest > 0.95 || s.Narwhal["narwhal"].Attainment <= 0 {
			t.Fatalf("scenario %s: %+v", s.Scenario.Name, s)
		}
		// The default: prior + calibrate, with exact beside it, both on
		// the scenario's drawn slowdown (not 1).
		n, e := s.Narwhal["narwhal"], s.Narwhal["narwhal@exact"]
		if n.ControllerProfile != "prior" || !n.Calibrate || e.ControllerProfile != "exact" || e.Calibrate ||
			n.EngineSlowdown == 1 || n.EngineSlowdown < 0.7 || n.EngineSlowdown > 1.3 || e.EngineSlowdown != n.EngineSlowdown {
			t.Fatalf("scenario %s: narwhal %+v, narwhal@exact %+v", s.Scenario.Name, n, e)
		}
	}
	groups := map[string]int{}
	for _, r := range rep.Summary {
		groups[r.Policy+" "+r.Group] = r.N
	}
	if groups["narwhal all/all"] != 2 || groups["narwhal@exact all/all"] != 2 || groups["threshold held/all"] != 1 || groups["narwhal tune/shifting"] != 1 {
		t.Fatalf("summary groups: %v", groups)
	}
	if !strings.Contains(errOut.String(), "suite: [2/2]") {
		t.Fatalf("no progress on stderr: %q", errOut.String())
	}
	for _, s := range rep.Scenarios {
		b, err := os.ReadFile(filepath.Join(decDir, s.Scenario.Name+".narwhal.jsonl"))
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		var d struct {
			Action string `json:"action"`
		}
		if err != nil || len(lines) < 500 || json.Unmarshal(lines[0], &d) != nil || d.Action == "" {
			t.Fatalf("decisions of %s (%v): %d lines, first %.100s", s.Scenario.Name, err, len(lines), lines[0])
		}
	}
	if b, err := os.ReadFile(cache); err != nil || !bytes.Contains(b, []byte("rate_scale")) {
		t.Fatalf("baselines file (%v): %.100s", err, b)
	}
	// The table form, on the held half only, from the cache; exact alone
	// adds no second row.
	out.Reset()
	errOut.Reset()
	if err := run(context.Background(), []string{"suite", "--quick", "--half", "held", "--traces", dir, "--baselines", cache, "--quiet",
		"--controller-profile", "exact", "--calibrate=false"}, &out, &errOut); err != nil {
		t.Fatalf("suite table: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "| held/all | narwhal | 1 |") || strings.Contains(out.String(), "@exact") || strings.Contains(out.String(), "tune/") || errOut.Len() != 0 {
		t.Fatalf("table:\n%s\nstderr: %s", out.String(), errOut.String())
	}
}

// --oracle: each scenario's hindsight schedule in the JSON (oracle −
// static-best computed from the two attainments) and the summary's oracle
// rows; the table form, from the cache, adds the per-scenario table and
// the headroom line.
func TestCLISuiteOracle(t *testing.T) {
	dir := writeSuiteSources(t)
	cache := filepath.Join(t.TempDir(), "baselines.json")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"suite", "--quick", "--json", "--oracle", "--exact=false", "--traces", dir, "--baselines", cache}, &out, &errOut); err != nil {
		t.Fatalf("suite: %v (%s)", err, errOut.String())
	}
	var rep struct {
		Scenarios []struct {
			Baseline struct {
				StaticBest float64 `json:"static_best"`
			}
			Oracle *struct {
				Outcome struct {
					Attainment float64 `json:"slo_attainment"`
				}
				VsStaticBest float64 `json:"vs_static_best"`
				Schedule     string
			}
		}
		Summary []struct {
			Policy, Group string
			VsStaticBest  struct{ Mean float64 }  `json:"vs_static_best"`
			VsOracle      *struct{ Mean float64 } `json:"vs_oracle"`
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v", err)
	}
	for _, s := range rep.Scenarios {
		if s.Oracle == nil || s.Oracle.VsStaticBest != 100*(s.Oracle.Outcome.Attainment-s.Baseline.StaticBest) || s.Oracle.VsStaticBest < 0 {
			t.Fatalf("scenario: %+v", s)
		}
	}
	rows := map[string]bool{}
	for _, r := range rep.Summary {
		rows[r.Policy+" "+r.Group] = true
		if r.Policy == "narwhal" && r.VsOracle == nil {
			t.Fatalf("narwhal row %s without vs_oracle", r.Group)
		}
	}
	if !rows["oracle held/stationary"] || !rows["oracle tune/shifting"] {
		t.Fatalf("summary rows: %v", rows)
	}
	if !strings.Contains(errOut.String(), "oracle: pass 1") {
		t.Fatalf("no oracle progress on stderr: %q", errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if err := run(context.Background(), []string{"suite", "--quick", "--oracle", "--exact=false", "--traces", dir, "--baselines", cache}, &out, &errOut); err != nil {
		t.Fatalf("suite table: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "The hindsight schedule per scenario") || !strings.Contains(out.String(), "| q0a-") ||
		strings.Contains(errOut.String(), "oracle: pass") {
		t.Fatalf("table from the cache:\n%s\nstderr: %s", out.String(), errOut.String())
	}
}

func TestCLISuiteRejectsBadFlags(t *testing.T) {
	dir := writeSuiteSources(t)
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"controller":{"cooldown_s":-5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"suite", "--half", "middle", "--traces", dir},
		{"suite", "--parallel", "0", "--traces", dir},
		{"suite", "--quick", "--oracle-late", "30", "--traces", dir},
		{"suite", "--quick", "--oracle", "--oracle-late", "601", "--traces", dir},
		{"suite", "--quick", "--oracle", "--oracle-late", "-1", "--traces", dir},
		{"suite", "--variant", "novalue", "--traces", dir},
		{"suite", "--variant", "threshold=" + bad, "--traces", dir},
		{"suite", "--variant", "x=" + bad, "--traces", dir},
		{"suite", "--quick", "--match", "(", "--traces", dir},
		{"suite", "--quick", "--controller-profile", "/nonexistent.json", "--traces", dir},
		{"suite", "--quick", "--match", "nothing-matches", "--traces", dir},
		{"suite", "--traces", "/nonexistent"},
		{"suite", "extra"},
		{"suite", "--quick", "--client-timeout", "-1", "--traces", dir},
		{"suite", "--quick", "--client-timeout", "0.5", "--traces", dir},
		{"suite", "--quick", "--client-timeout", "NaN", "--traces", dir},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Fatalf("args %q: no error", args)
		}
	}
}

// --dev-draw: a negative draw is refused, and so is a draw other than 0
// without --half dev, each before any scenario runs and with the flag named;
// draw K ≥ 1 selects the xK-NN-… scenarios, not the eNNc-… ones.
func TestCLISuiteDevDraw(t *testing.T) {
	dir := writeSuiteSources(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"suite", "--half", "dev", "--dev-draw", "-1", "--traces", dir}, "suite: --dev-draw -1: want a draw ≥ 0"},
		{[]string{"suite", "--dev-draw", "-3", "--traces", dir}, "suite: --dev-draw -3: want a draw ≥ 0"},
		{[]string{"suite", "--half", "tune", "--dev-draw", "2", "--traces", dir}, "suite: --dev-draw 2: only with --half dev"},
		{[]string{"suite", "--dev-draw", "1", "--traces", dir}, "suite: --dev-draw 1: only with --half dev"},
		{[]string{"suite", "--half", "dev", "--dev-draw", "1", "--match", "^e", "--traces", dir}, "suite: no scenario selected"},
		{[]string{"suite", "--half", "dev", "--dev-draw", "2", "--match", "^x1-", "--traces", dir}, "suite: no scenario selected"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) || out.Len() != 0 {
			t.Fatalf("args %q: error %v, stdout %q; want an error containing %q", c.args, err, out.String(), c.want)
		}
	}
}

// A core configuration with a field it does not have is refused, naming
// the field, by --core-config and --variant alike; the nested form sets
// the value. (Before, a controller setting at the top level was ignored,
// and the variant ran the defaults under its own name.)
func TestCoreConfigRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flat := write("flat.json", `{"hysteresis_margin":0.5}`)
	nested := write("nested.json", `{"controller":{"hysteresis_margin":0.5}}`)
	trailing := write("trailing.json", `{"controller":{"hysteresis_margin":0.5}} {}`)

	if _, err := readCoreConfig(flat); err == nil || !strings.Contains(err.Error(), "hysteresis_margin") {
		t.Fatalf("flat controller key: err %v, want one naming hysteresis_margin", err)
	}
	if _, err := readCoreConfig(trailing); err == nil || !strings.Contains(err.Error(), "after the JSON object") {
		t.Fatalf("trailing data: err %v", err)
	}
	cc, err := readCoreConfig(nested)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Controller.HysteresisMargin != 0.5 || cc.Controller.CooldownS != core.DefaultConfig().Controller.CooldownS {
		t.Fatalf("nested: hysteresis %v cooldown %v, want 0.5 and the default", cc.Controller.HysteresisMargin, cc.Controller.CooldownS)
	}

	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--core-config", flat, "--quiet"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "hysteresis_margin") {
		t.Fatalf("--core-config flat: err %v", err)
	}
	src := writeSuiteSources(t)
	err = run(context.Background(), []string{"suite", "--quick", "--variant", "x=" + flat, "--traces", src, "--quiet"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "hysteresis_margin") {
		t.Fatalf("--variant flat: err %v", err)
	}
}

// A run refused for its configuration leaves no --decisions file.
func TestCLIRefusedRunWritesNoDecisions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "d.jsonl")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--engines", "-1",
		"--decisions", out, "--quiet"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "engines") {
		t.Fatalf("--engines -1: err %v, want one naming engines", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Fatalf("refused run left %s (stat: %v)", out, serr)
	}
}

// --client-timeout reaches the run: on the embedded Azure code trace
// compressed 40× onto one prefill engine, prompts queue for minutes, so
// clients with a 10-s first-token timeout cancel some (counted, and
// missed), and clients that wait for ever cancel none.
func TestCLIClientTimeout(t *testing.T) {
	get := func(extra ...string) map[string]any {
		t.Helper()
		args := append([]string{"--trace", "../../sim/traces/AzureLLMInferenceTrace_code.csv", "--engines", "2",
			"--policy", "static:1", "--rate-scale", "40", "--slice", ":120", "--json", "--quiet"}, extra...)
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("run %q: %v (%s)", extra, err, errOut.String())
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("stdout is not one JSON object: %v", err)
		}
		return res
	}
	with, without := get("--client-timeout", "10"), get()
	n, _ := with["cancelled"].(float64)
	if n < 1 || with["client_timeout_s"] != 10.0 {
		t.Fatalf("with --client-timeout 10: cancelled %v, client_timeout_s %v; want some, 10", with["cancelled"], with["client_timeout_s"])
	}
	if _, ok := without["cancelled"]; ok {
		t.Fatalf("without a timeout the run reports cancelled %v; want none", without["cancelled"])
	}
	if c, r := with["completed"].(float64), with["requests"].(float64); c+n > r || c != r-n {
		t.Fatalf("completed %v + cancelled %v against %v requests; want every request served or cancelled", c, n, r)
	}
}
