package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// Config describes one simulation. Zero fields take DefaultConfig's values
// through Normalize.
type Config struct {
	Engines        int     `json:"engines"`
	Profile        string  `json:"profile"`         // built-in profile name (ProfileNames)
	Policy         string  `json:"policy"`          // narwhal | static:P | static-best | threshold
	InitialPrefill int     `json:"initial_prefill"` // engines starting in prefill (narwhal, threshold); 0: Engines/2
	TTFTSLOS       float64 `json:"ttft_slo_s"`
	TPOTSLOS       float64 `json:"tpot_slo_s"`
	StepS          float64 `json:"step_s"`   // control step of the threshold policy and the static sampling tick
	SwitchS        float64 `json:"switch_s"` // role switch time after the drain
	// CooldownS is the threshold policy's own cooldown between moves.
	CooldownS        float64 `json:"cooldown_s"`
	TokenizeDelayS   float64 `json:"tokenize_delay_s"`   // arrival -> Tokenized
	TransferGBps     float64 `json:"transfer_gbps"`      // KV transfer bandwidth prefill -> decode, GB/s
	TransferLatencyS float64 `json:"transfer_latency_s"` // fixed per-transfer latency
	KVCapacityTokens int64   `json:"kv_capacity_tokens"` // override the profile's KV capacity; 0 keep
	SampleS          float64 `json:"sample_s"`           // time-series resolution
	DrainLimitS      float64 `json:"drain_limit_s"`      // after the last arrival, unfinished requests expire
	StartUnixNs      int64   `json:"start_unix_ns"`      // virtual clock at workload offset 0
	Seed             uint64  `json:"seed"`
	NoMaxTokensFrac  float64 `json:"no_max_tokens_frac"` // share of requests without max_tokens
	EstErrSigma      float64 `json:"est_err_sigma"`      // lognormal sigma of the bytes/4 input estimate
	// EngineSlowdown multiplies the simulated engines' true prefill and
	// decode times (0: 1).
	EngineSlowdown float64 `json:"engine_slowdown"`
	// ControllerProfile is what the narwhal policy's controller starts
	// from: "exact" (default; the engines' true profile, slowdown
	// included), "nominal" (the named profile without the slowdown: a
	// stale profile), "prior" (the geometry prior only), "none" (no
	// profile: observed pressure only) or a profile file's path.
	ControllerProfile string `json:"controller_profile"`
	// ControllerProfileError multiplies the times of an exact or nominal
	// starting profile (0: 1): a profile that error times too slow. It
	// measures how much a row moves for a small profile error (the noise
	// band beside calibration's results, benchmarks/slo/PROFILES.md).
	ControllerProfileError float64 `json:"controller_profile_error,omitempty"`
	// Calibrate switches the core's online calibration on
	// (core.WithCalibration; default off, so that the benchmark's
	// reference runs are unchanged). The engines report their
	// per-interval latency figures to the core every step either way, as
	// an agent streams them.
	Calibrate bool `json:"calibrate"`
	// WarmupS: the result also reports the SLO attainment of the requests
	// arriving at or after this many seconds (0: none).
	WarmupS float64 `json:"warmup_s"`
	// ClientTimeoutS: a client with no first token this many seconds
	// after it sent its request cancels it (0: clients wait for ever, the
	// benchmark's default). See the package documentation.
	ClientTimeoutS float64 `json:"client_timeout_s,omitempty"`
	// Core is the core configuration of the narwhal policy; nil: core.DefaultConfig()
	// with the SLOs above.
	Core *core.Config `json:"-"`
	// Parallel bounds the concurrent runs of static-best (0: 2).
	Parallel int `json:"-"`
}

// DefaultConfig is the benchmark's configuration: 16 OPT-66B TP8 engines on
// A100 with DistServe's OPT-66B chat SLOs (TTFT 0.4 s, TPOT 0.1 s).
func DefaultConfig() Config {
	return Config{
		Engines:          16,
		Profile:          DefaultProfile,
		Policy:           "narwhal",
		TTFTSLOS:         0.4,
		TPOTSLOS:         0.1,
		StepS:            1,
		SwitchS:          10,
		CooldownS:        30,
		TokenizeDelayS:   0.002,
		TransferGBps:     100,
		TransferLatencyS: 0.001,
		SampleS:          10,
		DrainLimitS:      600,
		StartUnixNs:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
		Seed:             1,
		NoMaxTokensFrac:  0.3,
		EstErrSigma:      0.15,
	}
}

// Normalize fills zero fields from DefaultConfig and validates.
func (c Config) Normalize() (Config, error) {
	d := DefaultConfig()
	if c.Engines == 0 {
		c.Engines = d.Engines
	}
	if c.Profile == "" {
		c.Profile = d.Profile
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	setF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setF(&c.TTFTSLOS, d.TTFTSLOS)
	setF(&c.TPOTSLOS, d.TPOTSLOS)
	setF(&c.StepS, d.StepS)
	setF(&c.CooldownS, d.CooldownS)
	setF(&c.TransferGBps, d.TransferGBps)
	setF(&c.SampleS, d.SampleS)
	setF(&c.DrainLimitS, d.DrainLimitS)
	if c.StartUnixNs == 0 {
		c.StartUnixNs = d.StartUnixNs
	}
	if c.Engines < 2 || c.Engines > 4096 {
		return c, fmt.Errorf("sim: engines %d: want 2..4096: %w", c.Engines, ErrBadConfig)
	}
	if c.InitialPrefill == 0 {
		c.InitialPrefill = max(1, c.Engines/2)
	}
	if c.InitialPrefill < 1 || c.InitialPrefill >= c.Engines {
		return c, fmt.Errorf("sim: initial_prefill %d: want 1..%d: %w", c.InitialPrefill, c.Engines-1, ErrBadConfig)
	}
	for _, f := range []struct {
		name string
		v    float64
		min  float64
	}{
		{"ttft_slo_s", c.TTFTSLOS, 1e-6}, {"tpot_slo_s", c.TPOTSLOS, 1e-6}, {"step_s", c.StepS, 1e-3},
		{"switch_s", c.SwitchS, 0}, {"cooldown_s", c.CooldownS, 0}, {"tokenize_delay_s", c.TokenizeDelayS, 0},
		{"transfer_gbps", c.TransferGBps, 1e-6}, {"transfer_latency_s", c.TransferLatencyS, 0},
		{"sample_s", c.SampleS, 1e-3}, {"drain_limit_s", c.DrainLimitS, 1},
		{"no_max_tokens_frac", c.NoMaxTokensFrac, 0}, {"est_err_sigma", c.EstErrSigma, 0},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < f.min {
			return c, fmt.Errorf("sim: %s %v: want a finite value ≥ %v: %w", f.name, f.v, f.min, ErrBadConfig)
		}
	}
	if c.EngineSlowdown == 0 {
		c.EngineSlowdown = 1
	}
	if !(c.EngineSlowdown >= 0.01 && c.EngineSlowdown <= 100) {
		return c, fmt.Errorf("sim: engine_slowdown %v: want 0.01..100: %w", c.EngineSlowdown, ErrBadConfig)
	}
	if !(c.ClientTimeoutS >= 0) || math.IsInf(c.ClientTimeoutS, 0) || c.ClientTimeoutS > 0 && c.ClientTimeoutS <= c.TokenizeDelayS {
		return c, fmt.Errorf("sim: client_timeout_s %v: want 0 or a finite value > tokenize_delay_s (%v): %w", c.ClientTimeoutS, c.TokenizeDelayS, ErrBadConfig)
	}
	if !(c.WarmupS >= 0) || math.IsInf(c.WarmupS, 0) {
		return c, fmt.Errorf("sim: warmup_s %v: want a finite value >= 0: %w", c.WarmupS, ErrBadConfig)
	}
	if c.ControllerProfile == "" {
		c.ControllerProfile = ProfileExact
	}
	if c.ControllerProfileError == 0 {
		c.ControllerProfileError = 1
	}
	if !(c.ControllerProfileError >= 0.1 && c.ControllerProfileError <= 10) {
		return c, fmt.Errorf("sim: controller_profile_error %v: want 0.1..10: %w", c.ControllerProfileError, ErrBadConfig)
	}
	if c.ControllerProfileError != 1 && c.ControllerProfile != ProfileExact && c.ControllerProfile != ProfileNominal {
		return c, fmt.Errorf("sim: controller_profile_error %v: applies to the exact and nominal profiles, not %q: %w", c.ControllerProfileError, c.ControllerProfile, ErrBadConfig)
	}
	if c.NoMaxTokensFrac > 1 {
		return c, fmt.Errorf("sim: no_max_tokens_frac %v: want ≤ 1: %w", c.NoMaxTokensFrac, ErrBadConfig)
	}
	if _, err := LookupProfile(c.Profile); err != nil {
		return c, err
	}
	if _, err := parsePolicy(c.Policy, c.Engines); err != nil {
		return c, err
	}
	return c, nil
}

// Option adjusts a run.
type Option func(*options)

type options struct {
	pace       float64
	onDecision func(controller.Decision)
	newCore    func(a controller.Actuator, ps *controller.ProfileSet) (*core.Core, error)
	coreReady  func(*core.Core)
	progress   io.Writer
}

// WithPace replays at factor× real time (60: one virtual minute per wall
// second); 0 runs as fast as possible.
func WithPace(factor float64) Option { return func(o *options) { o.pace = factor } }

// WithDecisionHook is called with every controller decision (narwhal).
func WithDecisionHook(f func(controller.Decision)) Option {
	return func(o *options) { o.onDecision = f }
}

// WithCoreFactory lets the caller create the core the narwhal policy drives
// (e.g. with a journal sink or a state file); it must pass the given
// actuator to core.WithActuator and the profile set of the simulated
// engines to core.WithProfiles. Default: core.New(cfg.Core, WithActuator,
// WithProfiles). A core made by the factory is not closed by Run.
func WithCoreFactory(f func(a controller.Actuator, ps *controller.ProfileSet) (*core.Core, error)) Option {
	return func(o *options) { o.newCore = f }
}

// WithCoreReady is called once with the core, after its engines are
// registered and before the first event (e.g. to serve its HTTP API).
func WithCoreReady(f func(*core.Core)) Option { return func(o *options) { o.coreReady = f } }

// WithProgress writes progress lines (at most one per second) to w.
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// policySpec is a parsed Config.Policy: the kind ("narwhal", "static",
// "static-best", "threshold", "scheduled"), the prefill count of static:P
// and the moves of scheduled:P@T[,P@T...].
type policySpec struct {
	kind    string
	prefill int
	moves   []scheduledMove
}

// maxScheduledMoves bounds a schedule's length (a policy string is
// configuration, not a data file).
const maxScheduledMoves = 10000

func parsePolicy(p string, engines int) (policySpec, error) {
	switch {
	case p == "narwhal" || p == "threshold" || p == "static-best" || p == "oracle":
		return policySpec{kind: p}, nil
	case strings.HasPrefix(p, "static:"):
		n, err := strconv.Atoi(strings.TrimPrefix(p, "static:"))
		if err != nil || n < 1 || n >= engines {
			return policySpec{}, fmt.Errorf("sim: policy %q: want static:P with 1 ≤ P ≤ %d: %w", p, engines-1, ErrBadConfig)
		}
		return policySpec{kind: "static", prefill: n}, nil
	case strings.HasPrefix(p, "scheduled:"):
		items := strings.Split(strings.TrimPrefix(p, "scheduled:"), ",")
		if len(items) > maxScheduledMoves {
			return policySpec{}, fmt.Errorf("sim: policy scheduled: %d moves (at most %d): %w", len(items), maxScheduledMoves, ErrBadConfig)
		}
		spec := policySpec{kind: "scheduled", moves: make([]scheduledMove, 0, len(items))}
		for _, it := range items {
			ps, ts, ok := strings.Cut(it, "@")
			n, errP := strconv.Atoi(ps)
			t, errT := strconv.ParseFloat(ts, 64)
			if !ok || errP != nil || errT != nil || n < 1 || n >= engines || !(t >= 0) || math.IsInf(t, 0) || t > 1e7 {
				return policySpec{}, fmt.Errorf("sim: policy scheduled: move %q: want P@T with 1 ≤ P ≤ %d and 0 ≤ T ≤ 1e7 seconds: %w", it, engines-1, ErrBadConfig)
			}
			atNs := int64(t * 1e9)
			if k := len(spec.moves); k > 0 && atNs <= spec.moves[k-1].atNs {
				return policySpec{}, fmt.Errorf("sim: policy scheduled: move %q: times must increase: %w", it, ErrBadConfig)
			}
			spec.moves = append(spec.moves, scheduledMove{target: n, atNs: atNs})
		}
		return spec, nil
	}
	return policySpec{}, fmt.Errorf("sim: policy %q: want narwhal, static:P, static-best, oracle, threshold or scheduled:P@T[,P@T...]: %w", p, ErrBadConfig)
}

// Run simulates the workload reqs (see Workload) under cfg. The requests
// are copied; Prepare fills their max_tokens and input estimates from
// cfg.Seed, so the same seed gives the same result.
func Run(ctx context.Context, cfg Config, reqs []Request, opts ...Option) (*Result, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("sim: no requests: %w", ErrBadConfig)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	spec, _ := parsePolicy(cfg.Policy, cfg.Engines)
	switch spec.kind {
	case "static-best":
		return runStaticBest(ctx, cfg, reqs, o)
	case "oracle":
		return runOracle(ctx, cfg, reqs, o)
	}
	work := make([]Request, len(reqs))
	copy(work, reqs)
	Prepare(work, cfg.Seed, cfg.NoMaxTokensFrac, cfg.EstErrSigma)
	var pol policy
	switch spec.kind {
	case "static":
		cfg.InitialPrefill = spec.prefill
		pol = &staticPolicy{split: spec.prefill, stepNsV: int64(cfg.StepS * 1e9)}
	case "threshold":
		pol = &thresholdPolicy{stepNsV: int64(cfg.StepS * 1e9), cooldownNs: int64(cfg.CooldownS * 1e9)}
	case "scheduled":
		pol = &scheduledPolicy{moves: spec.moves, stepNsV: int64(cfg.StepS * 1e9)}
	case "narwhal":
		pol = &narwhalPolicy{}
	}
	s, err := newSimulator(cfg, work, o, pol)
	if err != nil {
		return nil, err
	}
	runErr := s.run(ctx)
	closeErr := pol.close()
	if runErr != nil {
		return nil, fmt.Errorf("sim: run: %w", runErr)
	}
	if closeErr != nil {
		return nil, fmt.Errorf("sim: close: %w", closeErr)
	}
	res := s.result()
	if np, ok := pol.(*narwhalPolicy); ok && np.errs > 0 {
		res.CoreErrors = np.errs
		res.LastCoreError = np.lastErr.Error()
	}
	return res, nil
}

// runPolicies runs reqs under each of pols, cfg.Parallel at a time (2
// when unset), without progress lines; note, when not nil, sees each run
// that succeeded (one at a time). The first error is returned.
func runPolicies(ctx context.Context, cfg Config, reqs []Request, o options, pols []string, note func(i int, r *Result)) ([]*Result, error) {
	par := cfg.Parallel
	if par <= 0 {
		par = 2
	}
	results := make([]*Result, len(pols))
	errs := make([]error, len(pols))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	quiet := o
	quiet.progress = nil
	for i := range pols {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c := cfg
			c.Policy = pols[i]
			results[i], errs[i] = Run(ctx, c, reqs, func(x *options) { *x = quiet })
			if errs[i] == nil && note != nil {
				mu.Lock()
				note(i, results[i])
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// runStaticBest runs every static split, cfg.Parallel at a time, and
// returns the best by SLO attainment (ties: fewer prefill engines).
func runStaticBest(ctx context.Context, cfg Config, reqs []Request, o options) (*Result, error) {
	start := time.Now()
	n := cfg.Engines - 1
	pols := make([]string, n)
	for i := range pols {
		pols[i] = "static:" + strconv.Itoa(i+1)
	}
	results, err := runPolicies(ctx, cfg, reqs, o, pols, func(i int, r *Result) {
		if o.progress != nil {
			fmt.Fprintf(o.progress, "static-best: static:%d slo_attainment=%.4f\n", i+1, r.SLOAttainment)
		}
	})
	if err != nil {
		return nil, err
	}
	var best *Result
	bs := 0
	splits := make([]Split, 0, n)
	for i, r := range results {
		splits = append(splits, Split{Prefill: i + 1, SLOAttainment: r.SLOAttainment})
		if best == nil || r.SLOAttainment > best.SLOAttainment {
			best, bs = r, i+1
		}
	}
	out := *best
	out.Policy = "static-best"
	out.BestSplit = &bs
	out.Splits = splits
	out.WallSeconds = time.Since(start).Seconds()
	return &out, nil
}
