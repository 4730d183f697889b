package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/sim"
)

// sc is one scenario's result: narwhal's, static-best's and threshold's
// attainment (fractions) and narwhal's quick reversals.
type sc struct {
	name, kind         string
	narwhal, best, thr float64
	quick              int
	opening            float64 // the opening split held; 0: not run
}

func writeRun(t *testing.T, dir, name string, scs ...sc) {
	t.Helper()
	var doc struct {
		Scenarios []sim.ScenarioResult `json:"scenarios"`
	}
	for _, s := range scs {
		var r sim.ScenarioResult
		r.Scenario.Name, r.Scenario.Kind = s.name, s.kind
		r.Baseline.SimSeconds = 3600
		r.Baseline.StaticBest = s.best
		r.Baseline.Threshold.Attainment = s.thr
		r.Narwhal = map[string]sim.Outcome{"narwhal": {Attainment: s.narwhal, QuickReversals: s.quick}}
		if s.opening > 0 {
			r.Opening = &sim.Outcome{Attainment: s.opening}
		}
		doc.Scenarios = append(doc.Scenarios, r)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runOut(t *testing.T, args ...string) string {
	t.Helper()
	var out strings.Builder
	if err := run(args, &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func line(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting %q in\n%s", prefix, out)
	return ""
}

// Acceptance 1's figures per run: the within-threshold share counts
// scenarios at or above threshold − 0.5 pt, shifting and stationary
// means split by kind, quick reversals per scenario-hour; each figure
// says whether its target holds.
func TestAcceptancePerRun(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "held",
		sc{"d00b-shift-8x", sim.KindShift, 0.90, 0.86, 0.87, 1, 0.80},       // +4 vs best, +3 vs thr
		sc{"d01b-flash-8x", sim.KindFlash, 0.85, 0.83, 0.856, 0, 0.90},      // +2, −0.6 (outside −0.5)
		sc{"d02b-stationary-8x", sim.KindStationary, 0.80, 0.81, 0.7, 0, 0}, // −1, +10
		sc{"d03b-stationary-8x", sim.KindStationary, 0.75, 0.78, 0.755, 2, 0.70})
	writeRun(t, dir, "dev7", sc{"x7-00-shift-8x", sim.KindShift, 0.95, 0.90, 0.80, 0, 0})
	out := runOut(t, dir)
	// held: 3 of 4 within (75 %; −0.5 exactly is within), vs thr (3 − 0.6 + 10 − 0.5)/4 = 2.975,
	// shifting (4 + 2)/2 = 3, stationary (−1 − 3)/2 = −2, quick 3/4;
	// against the opening split held: shifting (10 − 5)/2 = 2.5,
	// stationary +5 (d02b has no opening run).
	if got, want := line(t, out, "| held |"), "| held | 4 | 75 % (no) | +2.98 (yes) | +3.00 over 2 (yes) | -2.00 over 2 (no) | 0.75 (yes) | +2.50 / +5.00 |"; got != want {
		t.Fatalf("held row\n got %s\nwant %s", got, want)
	}
	if got, want := line(t, out, "| dev7 |"), "| dev7 | 1 | 100 % (yes) | +15.00 (yes) | +5.00 over 1 (yes) | +0.00 over 0 (yes) | 0.00 (yes) | – / – |"; got != want {
		t.Fatalf("dev7 row\n got %s\nwant %s", got, want)
	}
	if got, want := line(t, out, "| met on"), "| met on (of 2 runs) | | 1 | 2 | 2 | 1 | 2 | |"; got != want {
		t.Fatalf("totals\n got %s\nwant %s", got, want)
	}
	if strings.Index(out, "| held |") > strings.Index(out, "| dev7 |") {
		t.Fatalf("held should come before the dev draws:\n%s", out)
	}
}

// Paired differences: scenarios matched by run and name, grouped as the
// sessions judged changes (tune with dev 0–4, dev 5 and later, held);
// mean ± standard error, counts past the margin, quick reversals summed.
func TestPairsByGroup(t *testing.T) {
	base, cand := filepath.Join(t.TempDir(), "base"), filepath.Join(t.TempDir(), "cand")
	writeRun(t, base, "tune", sc{"d00a-shift-8x", sim.KindShift, 0.80, 0.85, 0.8, 1, 0}, sc{"d01a-drift-8x", sim.KindDrift, 0.80, 0.85, 0.8, 0, 0})
	writeRun(t, cand, "tune", sc{"d00a-shift-8x", sim.KindShift, 0.82, 0.85, 0.8, 2, 0}, sc{"d01a-drift-8x", sim.KindDrift, 0.76, 0.85, 0.8, 0, 0})
	writeRun(t, base, "dev3", sc{"x3-04-stationary-16x", sim.KindStationary, 0.50, 0.85, 0.4, 0, 0})
	writeRun(t, cand, "dev3", sc{"x3-04-stationary-16x", sim.KindStationary, 0.503, 0.85, 0.4, 0, 0})
	writeRun(t, base, "dev9", sc{"x9-01-shift-8x", sim.KindShift, 0.9, 0.9, 0.9, 0, 0})
	writeRun(t, cand, "dev9", sc{"x9-01-shift-8x", sim.KindShift, 0.8, 0.9, 0.9, 1, 0})
	writeRun(t, base, "held", sc{"d00b-shift-8x", sim.KindShift, 0.9, 0.9, 0.9, 0, 0})
	// a run only the candidate has is not paired
	writeRun(t, cand, "dev12", sc{"x12-00-shift-8x", sim.KindShift, 0.1, 0.9, 0.9, 0, 0})
	out := runOut(t, base, cand)
	// tune + dev 0–4: +2, −4, +0.3 → mean −0.5667, SE sqrt(((2.5667)²+(3.4333)²+(0.8667)²)/2/3) = 1.785
	if got, want := line(t, out, "| tune + dev 0–4 |"), "| tune + dev 0–4 | 3 | -0.57 ± 1.79 | 1 / 1 | d01a -4.0, x3-04 +0.3, d00a +2.0 | d00a +2.0, x3-04 +0.3, d01a -4.0 | 1 → 2 |"; got != want {
		t.Fatalf("tune + dev 0–4\n got %s\nwant %s", got, want)
	}
	if got, want := line(t, out, "| dev 5+ |"), "| dev 5+ | 1 | -10.00 ± 0.00 | 0 / 1 | x9-01 -10.0 | x9-01 -10.0 | 0 → 1 |"; got != want {
		t.Fatalf("dev 5+\n got %s\nwant %s", got, want)
	}
	for _, absent := range []string{"held", "x12-00", "even start"} {
		if strings.Contains(out, "| "+absent) || strings.Contains(out, absent+" ") {
			t.Fatalf("%q appears without a pair:\n%s", absent, out)
		}
	}
}

// Bad input is refused with the file named, and nothing is printed.
func TestRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tune.json"), []byte(`{"scenarios": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := run([]string{dir}, &out)
	if err == nil || !strings.Contains(err.Error(), "tune.json") || out.Len() != 0 {
		t.Fatalf("truncated JSON: err %v, output %q; want an error naming tune.json and no output", err, out.String())
	}
	other := t.TempDir()
	writeRun(t, other, "tune", sc{"d00a-shift-8x", sim.KindShift, 0.8, 0.8, 0.8, 0, 0})
	if err := run([]string{"-variant", "fast", other}, &out); err == nil || !strings.Contains(err.Error(), `no variant "fast"`) {
		t.Fatalf("missing variant: %v", err)
	}
	if err := run([]string{"-margin", "-1", other}, &out); err == nil {
		t.Fatal("a negative margin was accepted")
	}
	if err := run([]string{t.TempDir()}, &out); err == nil || !strings.Contains(err.Error(), "no *.json") {
		t.Fatalf("empty directory: %v", err)
	}
	empty := t.TempDir()
	writeRun(t, empty, "tune", sc{"d00a-shift-8x", sim.KindShift, 0.8, 0.8, 0.8, 0, 0})
	writeRun(t, other, "held", sc{"d00b-shift-8x", sim.KindShift, 0.8, 0.8, 0.8, 0, 0})
	disjoint := t.TempDir()
	writeRun(t, disjoint, "held", sc{"d09b-shift-8x", sim.KindShift, 0.8, 0.8, 0.8, 0, 0})
	if err := run([]string{empty, disjoint}, &out); err == nil || !strings.Contains(err.Error(), "no scenario appears in both") {
		t.Fatalf("nothing paired: %v", err)
	}
}
