package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/sim"
)

type multiString []string

func (m *multiString) String() string     { return strings.Join(*m, ",") }
func (m *multiString) Set(v string) error { *m = append(*m, v); return nil }

type multiFloat []float64

func (m *multiFloat) String() string { return fmt.Sprint([]float64(*m)) }
func (m *multiFloat) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("rate scale %q: %w", part, err)
		}
		*m = append(*m, f)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "narwhal-sim:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "suite" {
		return runSuite(ctx, args[1:], stdout, stderr)
	}
	d := sim.DefaultConfig()
	fs := flag.NewFlagSet("narwhal-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var traces multiString
	var scales multiFloat
	fs.Var(&traces, "trace", "trace file (Azure CSV or Mooncake JSONL); repeat to concatenate in order")
	fs.Var(&scales, "rate-scale", "arrival-rate multiplier (inter-arrival times divided by it); one value, or one per --trace (repeat or comma-separate)")
	engines := fs.Int("engines", d.Engines, "engines in the cluster")
	policy := fs.String("policy", d.Policy, "narwhal | static:P | static-best | oracle (a schedule searched in hindsight) | threshold | scheduled:P@T[,P@T...] (timing oracle: at T s, move to P prefill engines)")
	seed := fs.Uint64("seed", d.Seed, "seed for max_tokens and input-estimate draws")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	svg := fs.String("svg", "", "write a chart of engines per role, offered demand and attainment to this file")
	ttft := fs.Float64("ttft-slo", d.TTFTSLOS, "TTFT SLO, seconds")
	tpot := fs.Float64("tpot-slo", d.TPOTSLOS, "TPOT SLO, seconds")
	slice := fs.String("slice", "", "keep arrivals in [A,B) seconds of the scaled, concatenated timeline (A:B, A:, :B)")
	profile := fs.String("profile", d.Profile, "engine profile: "+strings.Join(sim.ProfileNames(), ", "))
	switchS := fs.Float64("switch-s", d.SwitchS, "role switch time after the drain, seconds")
	initP := fs.Int("initial-prefill", 0, "engines starting in prefill for narwhal, threshold and scheduled (0: engines/2)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	coreCfg := fs.String("core-config", "", "narwhal: JSON file overriding core.DefaultConfig() (e.g. {\"controller\":{\"cooldown_s\":10}}); the SLOs always come from --ttft-slo/--tpot-slo")
	slowdown := fs.Float64("engine-slowdown", 1, "multiply the simulated engines' true prefill and decode times by X")
	ctrlProf := fs.String("controller-profile", sim.ProfileExact, "narwhal: what the controller starts from: exact (the engines' true profile, slowdown included) | nominal (the named profile without the slowdown) | prior (the geometry prior only) | none (no profile: observed pressure) | FILE (measured points, see core/profile/README.md)")
	profErr := fs.Float64("controller-profile-error", 1, "narwhal: multiply the exact or nominal starting profile's times by X (a profile X times too slow; to measure a row's sensitivity to profile error)")
	profFile := fs.String("profiles", "", "narwhal: profile file (same as --controller-profile FILE)")
	calibrate := fs.Bool("calibrate", false, "narwhal: feed the engines' per-interval latency figures to the core's online profile calibration")
	warmup := fs.Float64("warmup", 0, "also report the SLO attainment of the requests arriving at or after this many seconds (slo_attainment_after_warmup)")
	clientTimeout := fs.Float64("client-timeout", 0, "clients cancel a request with no first token after this many seconds; it counts as missed (0: clients wait for ever)")
	decisions := fs.String("decisions", "", "narwhal: write every controller decision as a JSON line to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(traces) == 0 {
		return fmt.Errorf("at least one --trace is required")
	}
	if len(scales) == 0 {
		scales = multiFloat{1}
	}
	fromS, toS, err := parseSlice(*slice)
	if err != nil {
		return err
	}
	var loaded [][]sim.Request
	for _, p := range traces {
		r, err := sim.LoadTrace(p)
		if err != nil {
			return err
		}
		loaded = append(loaded, r)
	}
	reqs, err := sim.Workload(loaded, scales, fromS, toS)
	if err != nil {
		return err
	}
	cfg := sim.DefaultConfig()
	cfg.Engines, cfg.Policy, cfg.Seed = *engines, *policy, *seed
	cfg.TTFTSLOS, cfg.TPOTSLOS, cfg.Profile = *ttft, *tpot, *profile
	cfg.SwitchS, cfg.InitialPrefill = *switchS, *initP
	cfg.EngineSlowdown, cfg.ControllerProfile, cfg.Calibrate, cfg.WarmupS = *slowdown, *ctrlProf, *calibrate, *warmup
	cfg.ControllerProfileError = *profErr
	cfg.ClientTimeoutS = *clientTimeout
	if *profFile != "" {
		if *ctrlProf != sim.ProfileExact && *ctrlProf != *profFile {
			return fmt.Errorf("--profiles and --controller-profile %s: give one", *ctrlProf)
		}
		cfg.ControllerProfile = *profFile
	}
	if *coreCfg != "" {
		cc, err := readCoreConfig(*coreCfg)
		if err != nil {
			return err
		}
		cc.TTFTSLOS, cc.TPOTSLOS = cfg.TTFTSLOS, cfg.TPOTSLOS
		if err := cc.Validate(); err != nil {
			return fmt.Errorf("core config %s: %w", *coreCfg, err)
		}
		cfg.Core = &cc
	}
	var opts []sim.Option
	if !*quiet {
		opts = append(opts, sim.WithProgress(stderr))
		fmt.Fprintf(stderr, "narwhal-sim: %d requests from %d trace(s), policy %s, %d engines\n", len(reqs), len(traces), cfg.Policy, cfg.Engines)
	}
	// The configuration is checked before the decisions file is created:
	// a refused run leaves no file behind.
	if _, err := cfg.Normalize(); err != nil {
		return err
	}
	if *decisions != "" {
		f, err := os.Create(*decisions)
		if err != nil {
			return fmt.Errorf("decisions: %w", err)
		}
		defer f.Close()
		bw := bufio.NewWriter(f)
		defer bw.Flush()
		enc := json.NewEncoder(bw)
		opts = append(opts, sim.WithDecisionHook(func(d controller.Decision) { _ = enc.Encode(d) }))
	}
	res, err := sim.Run(ctx, cfg, reqs, opts...)
	if err != nil {
		return err
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			return fmt.Errorf("svg: %w", err)
		}
		if err := sim.WriteSVG(f, res); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("svg: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("json: %w", err)
		}
		return nil
	}
	return sim.WriteSummary(stdout, res)
}

func parseSlice(s string) (float64, float64, error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("slice %q: want A:B seconds", s)
	}
	var from, to float64
	var err error
	if a != "" {
		if from, err = strconv.ParseFloat(a, 64); err != nil {
			return 0, 0, fmt.Errorf("slice %q: %w", s, err)
		}
	}
	if b != "" {
		if to, err = strconv.ParseFloat(b, 64); err != nil {
			return 0, 0, fmt.Errorf("slice %q: %w", s, err)
		}
	}
	return from, to, nil
}

// readCoreConfig reads a JSON core configuration over core.DefaultConfig().
// A field the configuration does not have (a misspelling, or a controller
// setting outside its "controller" section) is an error, not a silent
// no-op: a variant that measures nothing must not read as a result.
func readCoreConfig(path string) (core.Config, error) {
	cc := core.DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cc, fmt.Errorf("core config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cc); err != nil {
		return core.DefaultConfig(), fmt.Errorf("core config %s: %w", path, err)
	}
	if dec.More() {
		return core.DefaultConfig(), fmt.Errorf("core config %s: data after the JSON object", path)
	}
	return cc, nil
}
