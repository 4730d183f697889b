package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
	"github.com/narwhal-io/narwhal/sim"
)

// runSuite is `narwhal-sim suite`: the scenario suite (sim.GenerateSuite).
func runSuite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("narwhal-sim suite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var variants multiString
	traces := fs.String("traces", "", "directory with the source traces (default: the first shared/traces above the working directory)")
	asJSON := fs.Bool("json", false, "print one JSON object (scenarios, baselines, outcomes, summary) instead of the table")
	half := fs.String("half", "all", "scenarios to run: tune | held | all (both) | dev (the development draw, sim.GenerateDevSuite, part of neither half)")
	devDraw := fs.Int("dev-draw", 0, "with --half dev, which draw of the development set: 0 is sim.GenerateDevSuite (eNNc-…), K ≥ 1 sim.GenerateDevDraw(K) (xK-NN-…)")
	quick := fs.Bool("quick", false, "run the two 10-minute quick scenarios instead of the suite")
	match := fs.String("match", "", "run only scenarios whose name matches this regular expression")
	parallel := fs.Int("parallel", 1, "scenarios simulated at once")
	baselines := fs.String("baselines", "", "cache file for the calibration and static-best per scenario (read if present, rewritten after the run)")
	fs.Var(&variants, "variant", "narwhal variant NAME=CORE_CONFIG.json (repeatable; default: one variant \"narwhal\" with core.DefaultConfig())")
	decisions := fs.String("decisions", "", "write every narwhal decision as JSON lines to DIR/<scenario>.<variant>.jsonl")
	even := fs.Bool("even-start", false, "start narwhal and threshold from an even split instead of the opening traffic's fluid split")
	ctrlProf := fs.String("controller-profile", sim.ProfilePrior, "what each narwhal variant's controller starts from: prior | exact | nominal | none | FILE (as narwhal-sim --controller-profile)")
	calibrate := fs.Bool("calibrate", true, "narwhal variants calibrate their profile online from the engines' latency figures")
	exact := fs.Bool("exact", true, "also run each narwhal variant from the exact profile without calibration, reported as NAME@exact")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	oracle := fs.Bool("oracle", false, "also search each scenario's hindsight schedule from static-best (minutes per scenario; cached in --baselines) and report oracle − static-best and narwhal − oracle")
	clientTimeout := fs.Float64("client-timeout", 0, "clients cancel a request with no first token after this many seconds, in every policy's run on the same traffic (the load is calibrated with clients that wait for ever; 0: they always do, the suite's reference)")
	oracleLate := fs.Int("oracle-late", 0, "with --oracle, also replay each hindsight schedule this many seconds late (1..600; a yardstick for a causal controller)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *oracleLate != 0 && (!*oracle || *oracleLate < 1 || *oracleLate > 600) {
		return fmt.Errorf("suite: --oracle-late %d: want 1..600 seconds, with --oracle", *oracleLate)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("suite: unexpected arguments %q", fs.Args())
	}
	if *half != "all" && *half != "tune" && *half != "held" && *half != "dev" {
		return fmt.Errorf("suite: --half %q: want tune, held, all or dev", *half)
	}
	if *devDraw < 0 {
		return fmt.Errorf("suite: --dev-draw %d: want a draw ≥ 0 (0 is the development draw, eNNc-…)", *devDraw)
	}
	if *devDraw != 0 && *half != "dev" {
		return fmt.Errorf("suite: --dev-draw %d: only with --half dev", *devDraw)
	}
	if !(*clientTimeout == 0 || *clientTimeout >= 1 && *clientTimeout <= 3600) {
		return fmt.Errorf("suite: --client-timeout %v: want 0 or 1..3600 seconds", *clientTimeout)
	}
	if *parallel < 1 || *parallel > 64 {
		return fmt.Errorf("suite: --parallel %d: want 1..64", *parallel)
	}
	var re *regexp.Regexp
	if *match != "" {
		var err error
		if re, err = regexp.Compile(*match); err != nil {
			return fmt.Errorf("suite: --match: %w", err)
		}
	}
	vs, err := parseVariants(variants)
	if err != nil {
		return err
	}
	switch *ctrlProf {
	case sim.ProfilePrior, sim.ProfileExact, sim.ProfileNominal, sim.ProfileNone:
	default: // a file: refuse it before minutes of calibration
		if _, err := profile.LoadFile(*ctrlProf); err != nil {
			return fmt.Errorf("suite: --controller-profile: %w", err)
		}
	}
	vs = deployVariants(vs, *ctrlProf, *calibrate, *exact)
	dir := *traces
	if dir == "" {
		if dir = sim.FindSharedTraces(); dir == "" {
			return fmt.Errorf("suite: no shared/traces above the working directory: pass --traces")
		}
	}
	sources, err := sim.LoadSuiteSources(dir)
	if err != nil {
		return err
	}
	all := sim.GenerateSuite()
	if *half == "dev" {
		all = sim.GenerateDevDraw(uint(*devDraw))
	}
	if *quick {
		all = sim.QuickSuite()
	}
	var scenarios []sim.Scenario
	for _, sc := range all {
		if (*half == "all" || sc.Half == *half) && (re == nil || re.MatchString(sc.Name)) {
			sc.ClientTimeoutS = *clientTimeout
			scenarios = append(scenarios, sc)
		}
	}
	if len(scenarios) == 0 {
		return fmt.Errorf("suite: no scenario selected")
	}
	cache := map[string]sim.SuiteBaseline{}
	if *baselines != "" {
		if b, err := os.ReadFile(*baselines); err == nil {
			if err := json.Unmarshal(b, &cache); err != nil {
				return fmt.Errorf("suite: baselines %s: %w", *baselines, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("suite: baselines: %w", err)
		}
	}
	o := sim.SuiteOptions{Sources: sources, Variants: vs, Parallel: *parallel, Baselines: cache, EvenStart: *even, Oracle: *oracle, OracleLateS: *oracleLate}
	if *decisions != "" {
		if err := os.MkdirAll(*decisions, 0o755); err != nil {
			return fmt.Errorf("suite: decisions: %w", err)
		}
		o.Decisions = func(scenario, variant string) (func(controller.Decision), func()) {
			f, err := os.Create(filepath.Join(*decisions, scenario+"."+variant+".jsonl"))
			if err != nil {
				fmt.Fprintf(stderr, "suite: decisions: %v\n", err)
				return func(controller.Decision) {}, func() {}
			}
			bw := bufio.NewWriter(f)
			enc := json.NewEncoder(bw)
			return func(d controller.Decision) { _ = enc.Encode(d) }, func() {
				if err := bw.Flush(); err != nil {
					fmt.Fprintf(stderr, "suite: decisions: %v\n", err)
				}
				f.Close()
			}
		}
	}
	if !*quiet {
		o.Progress = stderr
		fmt.Fprintf(stderr, "suite: %d scenarios (%s half), %d narwhal variant(s), sources from %s\n", len(scenarios), *half, len(vs), dir)
	}
	results, err := sim.RunSuite(ctx, scenarios, o)
	if err != nil {
		return err
	}
	if *baselines != "" {
		b, err := json.MarshalIndent(cache, "", " ")
		if err != nil {
			return fmt.Errorf("suite: baselines: %w", err)
		}
		if err := os.WriteFile(*baselines, b, 0o644); err != nil {
			return fmt.Errorf("suite: baselines: %w", err)
		}
	}
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Name
	}
	rows := sim.SummarizeSuite(results, names)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(struct {
			Scenarios []sim.ScenarioResult `json:"scenarios"`
			Summary   []sim.SuiteRow       `json:"summary"`
		}{results, rows}); err != nil {
			return fmt.Errorf("suite: json: %w", err)
		}
		return nil
	}
	if err := sim.WriteSuiteTable(stdout, rows); err != nil {
		return err
	}
	if *oracle {
		if _, err := fmt.Fprintf(stdout, "\nThe hindsight schedule per scenario (points):\n\n"); err != nil {
			return err
		}
		return sim.WriteOracleTable(stdout, results, vs[0].Name)
	}
	return nil
}

// deployVariants starts each variant from profile (with calibration when
// calibrate) and, when exact and that is not already the exact profile
// without calibration, adds NAME@exact beside each: the same
// configuration given the engines' true profile, slowdown included.
func deployVariants(vs []sim.SuiteVariant, profile string, calibrate, exact bool) []sim.SuiteVariant {
	var out []sim.SuiteVariant
	for _, v := range vs {
		v.ControllerProfile, v.Calibrate = profile, calibrate
		out = append(out, v)
		if exact && (profile != sim.ProfileExact || calibrate) {
			v.Name, v.ControllerProfile, v.Calibrate = v.Name+"@exact", sim.ProfileExact, false
			out = append(out, v)
		}
	}
	return out
}

// parseVariants reads NAME=FILE core configurations (the SLOs are always
// the scenario's).
func parseVariants(vs []string) ([]sim.SuiteVariant, error) {
	if len(vs) == 0 {
		return []sim.SuiteVariant{{Name: "narwhal"}}, nil
	}
	var out []sim.SuiteVariant
	seen := map[string]bool{}
	for _, v := range vs {
		name, file, ok := strings.Cut(v, "=")
		if !ok || name == "" || file == "" || name == "threshold" || seen[name] {
			return nil, fmt.Errorf("suite: --variant %q: want a new NAME=CORE_CONFIG.json (NAME not threshold)", v)
		}
		seen[name] = true
		cc, err := readCoreConfig(file)
		if err != nil {
			return nil, fmt.Errorf("suite: variant %s: %w", name, err)
		}
		// SLOs come from each scenario; validate with placeholders.
		check := cc
		check.TTFTSLOS, check.TPOTSLOS = 1, 0.1
		if err := check.Validate(); err != nil {
			return nil, fmt.Errorf("suite: variant %s: %w", name, err)
		}
		out = append(out, sim.SuiteVariant{Name: name, Core: &cc})
	}
	return out, nil
}
