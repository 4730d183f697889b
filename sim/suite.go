package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// The scenario suite runner: per scenario, calibrate the rate scale so
// static-best attains the scenario's target, then run threshold and each
// narwhal variant at that scale; summarise per policy the distribution of
// its attainment minus static-best's and minus threshold's.

// SuiteVariant is one narwhal configuration the suite runs (Core nil:
// core.DefaultConfig()); the SLOs are always the scenario's.
// ControllerProfile and Calibrate are what the controller starts from and
// whether it calibrates online (Config.ControllerProfile, Config.Calibrate;
// "": exact). A deployment starts from ProfilePrior with Calibrate (the
// CLI's default); ProfileExact without calibration is the reference of a
// perfect profile.
type SuiteVariant struct {
	Name              string
	Core              *core.Config
	ControllerProfile string
	Calibrate         bool
}

// SuiteOptions configures RunSuite.
type SuiteOptions struct {
	Sources  map[string]ShapeSource
	Variants []SuiteVariant // at least one; the first is reported as "narwhal" in the acceptance lines
	Parallel int            // scenarios at once (0: 1)
	Progress io.Writer      // progress lines; nil: none
	// Baselines, when not nil, caches the calibration and static-best per
	// scenario (keyed by BaselineKey): a hit skips them, a miss adds the
	// new entry.
	Baselines map[string]SuiteBaseline
	// EvenStart starts narwhal and threshold from an even split (the
	// benchmark rows' start) instead of the opening traffic's fluid split.
	EvenStart bool
	// Decisions, when not nil, is called for each narwhal run and returns
	// a hook that sees every decision of it, and a function called after
	// the run (e.g. to write a journal file per scenario and variant).
	Decisions func(scenario, variant string) (func(controller.Decision), func())
	// Oracle also searches each scenario's hindsight schedule from
	// static-best (suite_oracle.go), cached in Baselines beside
	// static-best, and reports it (ScenarioResult.Oracle, the "oracle"
	// summary rows, SuiteRow.VsOracle). Without it a cached oracle is
	// kept in the cache and not reported.
	Oracle bool
	// OracleLateS, with Oracle, also replays each hindsight schedule this
	// many seconds late (ScenarioOracle.Late, the "oracle_late" summary
	// rows): a yardstick for a causal controller, which sees a change
	// only after it happened and confirms it before it moves. 0: not.
	OracleLateS int
}

// Outcome is one policy's result on one scenario.
type Outcome struct {
	Attainment     float64 `json:"slo_attainment"`
	Moves          int     `json:"moves"`
	Reversals      int     `json:"reversals"`
	QuickReversals int     `json:"quick_reversals"`
	WallS          float64 `json:"wall_s"`
	// What the run was: the engines' slowdown and, for narwhal, the
	// controller's starting profile and calibration.
	EngineSlowdown    float64 `json:"engine_slowdown"`
	ControllerProfile string  `json:"controller_profile,omitempty"`
	Calibrate         bool    `json:"calibrate,omitempty"`
}

func outcomeOf(r *Result) Outcome {
	o := Outcome{Attainment: r.SLOAttainment, Moves: r.Moves, Reversals: r.Reversals, QuickReversals: r.QuickReversals, WallS: r.WallSeconds,
		EngineSlowdown: r.EngineSlowdown}
	if r.Policy == "narwhal" {
		o.ControllerProfile, o.Calibrate = r.ControllerProfile, r.Calibrate
	}
	return o
}

// SuiteBaseline is what a scenario's calibration finds: the rate scale,
// the SLOs and static-best (a local search over splits, see
// staticBestLocal) at that scale; and threshold's outcome there (run
// every time, from the run's initial split; not taken from a cache).
type SuiteBaseline struct {
	Key        string  `json:"key"`
	RateScale  float64 `json:"rate_scale"`
	TTFTSLOS   float64 `json:"ttft_slo_s"`
	TPOTSLOS   float64 `json:"tpot_slo_s"`
	Requests   int     `json:"requests"`
	SimSeconds float64 `json:"trace_seconds"`
	StaticBest float64 `json:"static_best"`
	BestSplit  int     `json:"best_split"`
	// Target is the attainment the calibration aimed at: the scenario's
	// target, or 3 pt under the ceiling where lighter load stopped gaining.
	Target float64 `json:"target"`
	// InRange: static-best is within [0.80, 0.95] at RateScale.
	InRange   bool    `json:"in_range"`
	Evals     int     `json:"static_runs"` // static runs the calibration took
	Threshold Outcome `json:"threshold"`
	// Oracle caches the scenario's hindsight schedule (SuiteOptions.Oracle;
	// valid while its Key is oracleKey of this baseline). Only in the cache:
	// the suite reports it as ScenarioResult.Oracle.
	Oracle *SuiteOracle `json:"oracle,omitempty"`
}

// ScenarioResult is one scenario's outcome.
type ScenarioResult struct {
	Scenario Scenario           `json:"scenario"`
	Baseline SuiteBaseline      `json:"baseline"`
	Narwhal  map[string]Outcome `json:"narwhal"` // by variant name
	// InitialPrefill: the prefill engines narwhal and threshold start with.
	InitialPrefill int `json:"initial_prefill"`
	// Opening: that split held for the whole run (static:InitialPrefill).
	// Narwhal minus it is what the controller's moves are worth; it minus
	// static-best, what the opening split costs.
	Opening *Outcome `json:"static_opening,omitempty"`
	WallS   float64  `json:"wall_s"`
	// Oracle: the hindsight schedule from static-best (SuiteOptions.Oracle).
	Oracle *ScenarioOracle `json:"oracle,omitempty"`
}

// suiteBaselineVersion is part of every baseline cache key: bump it when
// the simulator's engine model, the threshold policy or the calibration
// changes, so cached baselines are not reused across such a change.
// 3: the engines run at the scenario's drawn slowdown.
const suiteBaselineVersion = 3

// BaselineKey identifies a scenario's baseline: the scenario's definition,
// the sources' sizes and suiteBaselineVersion.
func BaselineKey(sc Scenario, sources map[string]ShapeSource) string {
	b, _ := json.Marshal(sc)
	h := sha256.New()
	h.Write(b)
	for _, name := range suiteSourceNames {
		fmt.Fprintf(h, "|%s:%d", name, len(sources[name].Shapes))
	}
	fmt.Fprintf(h, "|v%d", suiteBaselineVersion)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Calibration bounds.
const (
	suiteMinAttainment = 0.80
	suiteMaxAttainment = 0.95
	suiteCalTolerance  = 0.02
	suiteMaxEvals      = 10 // static-best evaluations per calibration
)

// RunSuite runs every scenario and returns the results in the order given.
func RunSuite(ctx context.Context, scenarios []Scenario, o SuiteOptions) ([]ScenarioResult, error) {
	if len(o.Variants) == 0 {
		return nil, fmt.Errorf("sim: suite: no narwhal variant: %w", ErrBadConfig)
	}
	par := max(o.Parallel, 1)
	if o.Progress != nil { // the oracle's lines come from the scenarios' goroutines
		o.Progress = &lockedWriter{w: o.Progress}
	}
	out := make([]ScenarioResult, len(scenarios))
	errs := make([]error, len(scenarios))
	var mu sync.Mutex
	done := 0
	start := time.Now()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range scenarios {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			sc := scenarios[i]
			key := BaselineKey(sc, o.Sources)
			mu.Lock()
			bl, hit := o.Baselines[key]
			mu.Unlock()
			r, entry, err := runScenario(ctx, sc, o, key, bl, hit)
			errs[i] = err
			if err != nil {
				return
			}
			out[i] = r
			mu.Lock()
			defer mu.Unlock()
			if o.Baselines != nil {
				o.Baselines[key] = entry
			}
			done++
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "suite: [%d/%d] %s (%s): x%.3f, %d req, SLO %.1f/%.2f s, static-best %.2f%% (static:%d), threshold %.2f%%",
					done, len(scenarios), sc.Name, sc.Half, r.Baseline.RateScale, r.Baseline.Requests, r.Baseline.TTFTSLOS, r.Baseline.TPOTSLOS,
					100*r.Baseline.StaticBest, r.Baseline.BestSplit, 100*r.Baseline.Threshold.Attainment)
				for _, v := range o.Variants {
					n := r.Narwhal[v.Name]
					fmt.Fprintf(o.Progress, ", %s %.2f%% (%d moves, %d quick rev.)", v.Name, 100*n.Attainment, n.Moves, n.QuickReversals)
				}
				if r.Oracle != nil {
					fmt.Fprintf(o.Progress, ", oracle %.2f%% (%+.2f pt vs static-best, %d moves, %d runs)",
						100*r.Oracle.Outcome.Attainment, r.Oracle.VsStaticBest, r.Oracle.Outcome.Moves, r.Oracle.Runs)
				}
				fmt.Fprintf(o.Progress, "; %.0f s (total %.0f s)\n", r.WallS, time.Since(start).Seconds())
			}
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sim: suite: scenario %s: %w", scenarios[i].Name, err)
		}
	}
	return out, nil
}

func scenarioConfig(sc Scenario, ttft, tpot float64) (Config, error) {
	cfg := DefaultConfig()
	cfg.Engines, cfg.Profile, cfg.SwitchS, cfg.Seed = sc.Engines, sc.Profile, sc.SwitchS, sc.Seed
	cfg.TTFTSLOS, cfg.TPOTSLOS = ttft, tpot
	// Every policy, static-best included, runs on the slowed engines; the
	// SLOs and the opening split come from the published profile (what an
	// operator knows).
	cfg.EngineSlowdown = sc.EngineSlowdown
	cfg.ClientTimeoutS = sc.ClientTimeoutS
	cfg.Parallel = 1
	return cfg.Normalize()
}

// runScenario runs one scenario; it returns the result and the entry to
// cache (the baseline, with the oracle when one was searched or cached).
func runScenario(ctx context.Context, sc Scenario, o SuiteOptions, key string, bl SuiteBaseline, hit bool) (ScenarioResult, SuiteBaseline, error) {
	start := time.Now()
	res := ScenarioResult{Scenario: sc, Narwhal: map[string]Outcome{}}
	var reqs []Request
	var err error
	if hit {
		if reqs, _, _, err = sc.Workload(o.Sources, bl.RateScale); err != nil {
			return res, bl, err
		}
	} else {
		// The load is calibrated with clients that wait for ever, so a
		// scenario with a client timeout runs the reference's traffic and
		// only the clients differ; static-best is then searched again
		// with the timeout, from the reference's best split.
		ref := sc
		ref.ClientTimeoutS = 0
		if bl, reqs, err = calibrate(ctx, ref, o); err != nil {
			return res, bl, err
		}
		bl.Key = key
	}
	cfg, err := scenarioConfig(sc, bl.TTFTSLOS, bl.TPOTSLOS)
	if err != nil {
		return res, bl, err
	}
	if !hit && sc.ClientTimeoutS > 0 {
		att, best, n, err := staticBestLocal(ctx, cfg, reqs, bl.BestSplit)
		if err != nil {
			return res, bl, fmt.Errorf("static-best with client timeout: %w", err)
		}
		bl.StaticBest, bl.BestSplit, bl.Evals = att, best, bl.Evals+n
		bl.InRange = att >= suiteMinAttainment && att <= suiteMaxAttainment
	}
	if !o.EvenStart {
		cfg.InitialPrefill = openingSplit(cfg, reqs)
	}
	res.InitialPrefill = cfg.InitialPrefill
	c := cfg
	c.Policy = "threshold"
	r, err := Run(ctx, c, reqs)
	if err != nil {
		return res, bl, err
	}
	bl.Threshold = outcomeOf(r)
	c.Policy = fmt.Sprintf("static:%d", cfg.InitialPrefill)
	if r, err = Run(ctx, c, reqs); err != nil {
		return res, bl, fmt.Errorf("static at the opening split: %w", err)
	}
	op := outcomeOf(r)
	res.Opening = &op
	res.Baseline = bl
	res.Baseline.Oracle = nil
	if o.Oracle {
		if bl.Oracle == nil || bl.Oracle.Key != oracleKey(key, bl.BestSplit) {
			c := cfg
			if bl.Oracle, err = suiteOracle(ctx, sc.Name, c, reqs, bl, o.Progress); err != nil {
				return res, bl, err
			}
		}
		res.Oracle = &ScenarioOracle{SuiteOracle: *bl.Oracle, VsStaticBest: 100 * (bl.Oracle.Outcome.Attainment - bl.StaticBest)}
		if o.OracleLateS > 0 {
			c := cfg
			c.InitialPrefill = bl.BestSplit
			if c.Policy, err = lateSchedule(bl.Oracle.Schedule, c.Engines, o.OracleLateS); err != nil {
				return res, bl, err
			}
			r, err := Run(ctx, c, reqs)
			if err != nil {
				return res, bl, fmt.Errorf("oracle %d s late: %w", o.OracleLateS, err)
			}
			oc := outcomeOf(r)
			res.Oracle.Late, res.Oracle.LateS, res.Oracle.LateVsStaticBest = &oc, o.OracleLateS, 100*(oc.Attainment-bl.StaticBest)
		}
	}
	for _, v := range o.Variants {
		c := cfg
		c.Policy = "narwhal"
		c.ControllerProfile, c.Calibrate = v.ControllerProfile, v.Calibrate
		if v.Core != nil {
			cc := *v.Core
			cc.TTFTSLOS, cc.TPOTSLOS = c.TTFTSLOS, c.TPOTSLOS
			c.Core = &cc
		}
		var opts []Option
		var after func()
		if o.Decisions != nil {
			var hook func(controller.Decision)
			hook, after = o.Decisions(sc.Name, v.Name)
			opts = append(opts, WithDecisionHook(hook))
		}
		r, err := Run(ctx, c, reqs, opts...)
		if after != nil {
			after()
		}
		if err != nil {
			return res, bl, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		if r.CoreErrors > 0 {
			return res, bl, fmt.Errorf("variant %s: %d core errors, last: %s", v.Name, r.CoreErrors, r.LastCoreError)
		}
		res.Narwhal[v.Name] = outcomeOf(r)
	}
	res.WallS = time.Since(start).Seconds()
	return res, bl, nil
}

// calibrate searches the rate scale x at which static-best attains the
// scenario's target: from x = 0.6 it brackets the target by steps of
// ×1.3, then interpolates in log x (regula falsi) until within 2 pt or
// suiteMaxEvals static-best evaluations. Where a lighter load stops
// gaining (< 0.5 pt for ×1/1.3) the target becomes 3 pt under the best
// attainment seen (at least 0.80). It keeps the evaluated scale
// whose static-best is within [0.80, 0.95] and closest to the target
// (InRange false when none is). Deterministic: the same scenario gives the
// same scale.
func calibrate(ctx context.Context, sc Scenario, o SuiteOptions) (SuiteBaseline, []Request, error) {
	type point struct {
		x, att float64
		split  int
		reqs   []Request
		ttft   float64
		tpot   float64
	}
	var pts []point
	runs := 0
	split := 0
	eval := func(x float64) (point, error) {
		reqs, ttft, tpot, err := sc.Workload(o.Sources, x)
		if err != nil {
			return point{}, err
		}
		cfg, err := scenarioConfig(sc, ttft, tpot)
		if err != nil {
			return point{}, err
		}
		if split == 0 {
			split = fluidSplit(cfg, reqs)
		}
		att, best, n, err := staticBestLocal(ctx, cfg, reqs, split)
		if err != nil {
			return point{}, err
		}
		runs += n
		split = best
		p := point{x: x, att: att, split: best, reqs: reqs, ttft: ttft, tpot: tpot}
		pts = append(pts, p)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "suite: %s: calibrating: x%.3f → static-best %.2f%% (static:%d), target %.2f%%\n", sc.Name, x, 100*att, best, 100*sc.TargetAttainment)
		}
		return p, nil
	}
	T := sc.TargetAttainment
	// bracket: lo the heaviest load at or above T, hi the lightest load
	// below T and heavier than lo (robust to small non-monotonicity).
	bracket := func() (lo, hi point, ok bool) {
		haveLo, haveHi := false, false
		for _, q := range pts {
			if q.att >= T && (!haveLo || q.x > lo.x) {
				lo, haveLo = q, true
			}
		}
		for _, q := range pts {
			if q.att < T && (!haveLo || q.x > lo.x) && (!haveHi || q.x < hi.x) {
				hi, haveHi = q, true
			}
		}
		return lo, hi, haveLo && haveHi
	}
	p, err := eval(0.6)
	if err != nil {
		return SuiteBaseline{}, nil, err
	}
	maxAtt := p.att
	force := false // one more step after the target moved
	for len(pts) < suiteMaxEvals && (force || math.Abs(p.att-T) > suiteCalTolerance) {
		force = false
		lo, hi, ok := bracket()
		var x float64
		switch {
		case ok:
			// interpolate log x between the bracket on attainment, away
			// from the ends
			a, b := math.Log(lo.x), math.Log(hi.x)
			f := min(max((lo.att-T)/(lo.att-hi.att), 0.15), 0.85)
			x = math.Exp(a + f*(b-a))
		case p.att >= T:
			x = p.x * 1.3
		default:
			x = p.x / 1.3
		}
		prev := p
		if p, err = eval(x); err != nil {
			return SuiteBaseline{}, nil, err
		}
		maxAtt = max(maxAtt, p.att)
		if !ok && prev.att < T && p.att < T && p.att-prev.att < 0.005 {
			// Saturated: a lighter load no longer gains (requests whose
			// prefill alone passes the TTFT SLO miss at any load). Aim 3 pt
			// under the ceiling instead, so the cluster is loaded.
			T, force = max(suiteMinAttainment, maxAtt-0.03), true
		}
	}
	best := -1
	for i, q := range pts { // in range first, then closest to the (effective) target
		in := q.att >= suiteMinAttainment && q.att <= suiteMaxAttainment
		if best < 0 {
			best = i
			continue
		}
		bq := pts[best]
		bin := bq.att >= suiteMinAttainment && bq.att <= suiteMaxAttainment
		if in && !bin || in == bin && math.Abs(q.att-T) < math.Abs(bq.att-T) {
			best = i
		}
	}
	q := pts[best]
	bl := SuiteBaseline{
		RateScale: q.x, TTFTSLOS: q.ttft, TPOTSLOS: q.tpot, Requests: len(q.reqs),
		SimSeconds: float64(q.reqs[len(q.reqs)-1].ArrivalNs) / 1e9,
		StaticBest: q.att, BestSplit: q.split, Evals: runs, Target: T,
		InRange: q.att >= suiteMinAttainment && q.att <= suiteMaxAttainment,
	}
	return bl, q.reqs, nil
}

// fluidSplit is the prefill engine count of a fluid model of the whole
// workload: engines × prefill seconds / (prefill + decode engine-seconds),
// each request's prefill alone and its decode at the batch its context
// allows (sourceCost's rule); the local search starts there.
func fluidSplit(cfg Config, reqs []Request) int {
	prof, _ := LookupProfile(cfg.Profile)
	src := ShapeSource{Shapes: make([][2]int64, len(reqs))}
	for i, r := range reqs {
		src.Shapes[i] = [2]int64{r.InputTokens, r.OutputTokens}
	}
	c := costOf(&src, prof, cfg.TPOTSLOS, math.MaxInt64)
	p := int(math.Round(float64(cfg.Engines) * c.prefill / (c.prefill + c.decode)))
	return min(max(p, 1), cfg.Engines-1)
}

// openingWindowS is the opening traffic an operator sizes the initial
// split for.
const openingWindowS = 600

// openingSplit is the fluid split of the first openingWindowS seconds:
// where an operator who knows the opening traffic's mix and the profile
// would start. Starting from an even split instead, a prefill-heavy mix
// near saturation (Azure code on 32 engines, static-best 29:3) builds a
// prefill backlog during the ramp that the best split, with little spare
// capacity, never drains: that measures the cold start, which the
// benchmark rows already do, not how a policy follows the traffic.
func openingSplit(cfg Config, reqs []Request) int {
	n := len(reqs)
	for i, r := range reqs {
		if r.ArrivalNs >= openingWindowS*1e9 {
			n = i
			break
		}
	}
	return fluidSplit(cfg, reqs[:max(n, 1)])
}

// staticBestLocal finds the best static split by a local search from
// start: it moves to the better neighbour (±1) while one gains and, at a
// local best, also looks ±2 (a plateau of equal attainment, or one noisy
// split, does not stop it early). Attainment over the split is unimodal
// in practice (prefill capacity grows and decode capacity shrinks with
// P), so this finds the full sweep's best with a handful of runs instead
// of engines − 1 (TestStaticBestLocalMatchesSweep). Ties keep fewer
// prefill engines, as static-best does. Returns the attainment, the split
// and the runs made.
func staticBestLocal(ctx context.Context, cfg Config, reqs []Request, start int) (float64, int, int, error) {
	memo := map[int]float64{}
	att := func(p int) (float64, error) {
		if v, ok := memo[p]; ok {
			return v, nil
		}
		c := cfg
		c.Policy = "static:" + strconv.Itoa(p)
		r, err := Run(ctx, c, reqs)
		if err != nil {
			return 0, err
		}
		memo[p] = r.SLOAttainment
		return r.SLOAttainment, nil
	}
	better := func(p int, v float64, q int, w float64) bool { return v > w || v == w && p < q }
	cur := min(max(start, 1), cfg.Engines-1)
	curV, err := att(cur)
	if err != nil {
		return 0, 0, 0, err
	}
	for {
		moved := false
		for _, d := range []int{-1, 1, -2, 2} {
			if (d == -2 || d == 2) && moved {
				break
			}
			p := cur + d
			if p < 1 || p >= cfg.Engines {
				continue
			}
			v, err := att(p)
			if err != nil {
				return 0, 0, 0, err
			}
			if better(p, v, cur, curV) {
				cur, curV, moved = p, v, true
			}
		}
		if !moved {
			return curV, cur, len(memo), nil
		}
	}
}

// DeltaStats summarises differences in percentage points.
type DeltaStats struct {
	N     int     `json:"n"`
	Mean  float64 `json:"mean"`
	P10   float64 `json:"p10"`
	Worst float64 `json:"worst"`
	Below int     `json:"below_zero"`
	// AtLeastMinusHalf counts differences ≥ −0.5 pt (the acceptance's
	// "not worse than threshold by more than half a point").
	AtLeastMinusHalf int `json:"at_least_minus_half"`
}

// NewDeltaStats summarises d (points): mean, the 10th percentile (linear
// interpolation between order statistics, position 0.1·(n−1)), the
// minimum and the counts below 0 and at least −0.5.
func NewDeltaStats(d []float64) DeltaStats {
	s := DeltaStats{N: len(d)}
	if len(d) == 0 {
		return s
	}
	x := append([]float64(nil), d...)
	sort.Float64s(x)
	var sum float64
	for _, v := range x {
		sum += v
		if v < 0 {
			s.Below++
		}
		if v >= -0.5-1e-9 { // exactly −0.5 counts, whatever the rounding of the two fractions' difference
			s.AtLeastMinusHalf++
		}
	}
	s.Mean = sum / float64(len(x))
	s.Worst = x[0]
	pos := 0.1 * float64(len(x)-1)
	i := int(pos)
	s.P10 = x[i]
	if i+1 < len(x) {
		s.P10 += (pos - float64(i)) * (x[i+1] - x[i])
	}
	return s
}

// SuiteRow is one policy's summary over a group of scenarios.
type SuiteRow struct {
	Policy string `json:"policy"`
	Group  string `json:"group"` // "<half>/<shift>": half tune|held|all, shift all|shifting|stationary
	N      int    `json:"scenarios"`
	// MeanAttainment in percent.
	MeanAttainment float64     `json:"mean_attainment"`
	VsStaticBest   DeltaStats  `json:"vs_static_best"`
	VsThreshold    *DeltaStats `json:"vs_threshold,omitempty"`
	// VsOracle: a narwhal variant's attainment minus the hindsight
	// schedule's, in points (only with SuiteOptions.Oracle). The oracle's
	// own rows (Policy "oracle") carry oracle − static-best in
	// VsStaticBest.
	VsOracle *DeltaStats `json:"vs_oracle,omitempty"`
	// VsOpening: a narwhal variant's attainment minus its opening split
	// held for the run (ScenarioResult.Opening), in points: what its
	// moves are worth. The "static_opening" rows carry opening −
	// static-best in VsStaticBest.
	VsOpening    *DeltaStats `json:"vs_static_opening,omitempty"`
	MovesPerHour float64     `json:"moves_per_hour"`
	QuickRevPerH float64     `json:"quick_reversals_per_hour"`
}

// SummarizeSuite computes, per policy (threshold and each narwhal
// variant) and per group (each half and both; all, shifting and
// stationary scenarios), the distribution of the policy's attainment
// minus static-best's and, for narwhal variants, minus threshold's (in
// points), and moves and quick reversals per simulated hour (over the
// trace span). When the results carry the hindsight schedule, an "oracle"
// row (after threshold) gives oracle − static-best, and each narwhal
// variant's VsOracle its attainment minus the oracle's.
func SummarizeSuite(results []ScenarioResult, variants []string) []SuiteRow {
	var rows []SuiteRow
	var opening, oracle, late bool
	for _, r := range results {
		opening = opening || r.Opening != nil
		oracle = oracle || r.Oracle != nil
		late = late || r.Oracle != nil && r.Oracle.Late != nil
	}
	pols := []string{"threshold"}
	for _, p := range []struct {
		name string
		on   bool
	}{{"static_opening", opening}, {"oracle", oracle}, {"oracle_late", late}} {
		if p.on {
			pols = append(pols, p.name)
		}
	}
	pols = append(pols, variants...)
	for _, half := range []string{"tune", "held", "dev", "all"} {
		for _, shift := range []string{"all", "shifting", "stationary"} {
			for _, pol := range pols {
				var vsSB, vsTh, vsOr, vsOp []float64
				var sumAtt, moves, quick, hours float64
				for _, r := range results {
					if half != "all" && r.Scenario.Half != half ||
						shift == "shifting" && !r.Scenario.Shifts() || shift == "stationary" && r.Scenario.Shifts() {
						continue
					}
					oc := r.Baseline.Threshold
					switch pol {
					case "threshold":
					case "static_opening":
						if r.Opening == nil {
							continue
						}
						oc = *r.Opening
					case "oracle":
						if r.Oracle == nil {
							continue
						}
						oc = r.Oracle.Outcome
					case "oracle_late":
						if r.Oracle == nil || r.Oracle.Late == nil {
							continue
						}
						oc = *r.Oracle.Late
					default:
						var ok bool
						if oc, ok = r.Narwhal[pol]; !ok {
							continue
						}
						vsTh = append(vsTh, 100*(oc.Attainment-r.Baseline.Threshold.Attainment))
						if r.Oracle != nil {
							vsOr = append(vsOr, 100*(oc.Attainment-r.Oracle.Outcome.Attainment))
						}
						if r.Opening != nil {
							vsOp = append(vsOp, 100*(oc.Attainment-r.Opening.Attainment))
						}
					}
					vsSB = append(vsSB, 100*(oc.Attainment-r.Baseline.StaticBest))
					sumAtt += 100 * oc.Attainment
					moves += float64(oc.Moves)
					quick += float64(oc.QuickReversals)
					hours += r.Baseline.SimSeconds / 3600
				}
				if len(vsSB) == 0 {
					continue
				}
				row := SuiteRow{Policy: pol, Group: half + "/" + shift, N: len(vsSB), MeanAttainment: sumAtt / float64(len(vsSB)),
					VsStaticBest: NewDeltaStats(vsSB)}
				if hours > 0 {
					row.MovesPerHour, row.QuickRevPerH = moves/hours, quick/hours
				}
				if !baselinePolicy(pol) {
					s := NewDeltaStats(vsTh)
					row.VsThreshold = &s
				}
				if len(vsOr) > 0 {
					s := NewDeltaStats(vsOr)
					row.VsOracle = &s
				}
				if len(vsOp) > 0 {
					s := NewDeltaStats(vsOp)
					row.VsOpening = &s
				}
				rows = append(rows, row)
			}
		}
	}
	return rows
}

// baselinePolicy: a summary row of a yardstick (threshold, the opening
// split held, the hindsight schedule on time or late), not of a narwhal
// variant.
func baselinePolicy(pol string) bool {
	return pol == "threshold" || pol == "static_opening" || pol == "oracle" || pol == "oracle_late"
}

// WriteSuiteTable prints the summary rows as a Markdown table, then the
// acceptance lines of issue 20 for each narwhal variant on the held half.
func WriteSuiteTable(w io.Writer, rows []SuiteRow) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	oracle := false
	for _, r := range rows {
		oracle = oracle || r.Policy == "oracle" || r.Policy == "oracle_late"
	}
	if oracle {
		p("| group (half/traffic) | policy | n | mean SLO %% | − static-best: mean | p10 | worst | < 0 | − threshold: mean | p10 | worst | < 0 | ≥ −0.5 | − oracle: mean | p10 | moves/h | quick rev./h |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	} else {
		p("| group (half/traffic) | policy | n | mean SLO %% | − static-best: mean | p10 | worst | < 0 | − threshold: mean | p10 | worst | < 0 | ≥ −0.5 | moves/h | quick rev./h |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	}
	for _, r := range rows {
		sb := r.VsStaticBest
		p("| %s | %s | %d | %.2f | %+.2f | %+.2f | %+.2f | %d |", r.Group, r.Policy, r.N, r.MeanAttainment, sb.Mean, sb.P10, sb.Worst, sb.Below)
		if t := r.VsThreshold; t != nil {
			p(" %+.2f | %+.2f | %+.2f | %d | %d |", t.Mean, t.P10, t.Worst, t.Below, t.AtLeastMinusHalf)
		} else {
			p(" – | – | – | – | – |")
		}
		if oracle {
			if o := r.VsOracle; o != nil {
				p(" %+.2f | %+.2f |", o.Mean, o.P10)
			} else {
				p(" – | – |")
			}
		}
		p(" %.1f | %.2f |\n", r.MovesPerHour, r.QuickRevPerH)
	}
	byGroup := map[string]SuiteRow{}
	for _, r := range rows {
		byGroup[r.Policy+"@"+r.Group] = r
	}
	p("\nAcceptance (issue 20), held half:\n")
	for _, r := range rows {
		if baselinePolicy(r.Policy) || r.Group != "held/all" {
			continue
		}
		a, ok := AcceptanceOf(rows, r.Policy, "held")
		if !ok {
			continue
		}
		p("- %s: ≥ threshold − 0.5 pt on %.0f %% of scenarios (want ≥ 90 %%): %s; mean vs threshold %+.2f pt (want ≥ +2): %s; "+
			"mean vs static-best on shifting %+.2f pt (want ≥ +3): %s; on stationary %+.2f pt (want ≥ −1): %s; quick reversals %.2f/h (want ≤ 1): %s\n",
			r.Policy, 100*a.WithinShare, verdict(a.Met[0]), a.VsThreshold, verdict(a.Met[1]),
			a.Shifting, verdict(a.Met[2]), a.Stationary, verdict(a.Met[3]), a.QuickRevPerH, verdict(a.Met[4]))
	}
	for _, r := range rows {
		half, ok := strings.CutSuffix(r.Group, "/all")
		if baselinePolicy(r.Policy) || r.VsOpening == nil || !ok || half == "all" {
			continue
		}
		sh, st := byGroup[r.Policy+"@"+half+"/shifting"], byGroup[r.Policy+"@"+half+"/stationary"]
		p("- %s, %s half: its moves are worth %+.2f pt over holding its opening split (shifting %s, stationary %s); the opening split held is %+.2f pt from static-best\n",
			r.Policy, half, r.VsOpening.Mean, openingMean(sh), openingMean(st), byGroup["static_opening@"+r.Group].VsStaticBest.Mean)
	}
	if or, ok := byGroup["oracle@held/shifting"]; ok {
		sb := or.VsStaticBest
		p("- headroom: the hindsight schedule gains %+.2f pt (p10 %+.2f) over static-best on the held half's %d shifting scenarios run: "+
			"the +3 pt target is %s\n", sb.Mean, sb.P10, sb.N, headroomVerdict(sb.Mean))
	}
	if or, ok := byGroup["oracle_late@held/shifting"]; ok {
		sb := or.VsStaticBest
		p("- the same schedules replayed late (--oracle-late) gain %+.2f pt (p10 %+.2f) over static-best on %d: a causal controller's yardstick\n",
			sb.Mean, sb.P10, sb.N)
	}
	return err
}

// Acceptance is issue 20's acceptance 1 for one narwhal variant over one
// half's scenarios (or "all"), from SummarizeSuite's rows.
type Acceptance struct {
	N int
	// WithinShare: the share of scenarios at or above threshold − 0.5 pt
	// (want ≥ 0.9).
	WithinShare float64
	VsThreshold float64 // mean, points (want ≥ +2)
	// Shifting, Stationary: mean against static-best on each kind of
	// traffic, points (want ≥ +3 and ≥ −1); NShifting, NStationary: how
	// many scenarios each mean is over.
	Shifting, Stationary   float64
	NShifting, NStationary int
	QuickRevPerH           float64 // want ≤ 1
	// Met: the five targets in the order above (a group without
	// stationary scenarios meets that one; without shifting ones, not).
	Met [5]bool
}

// AcceptanceOf reads policy's acceptance 1 over half from rows; false
// when rows hold no such policy and half.
func AcceptanceOf(rows []SuiteRow, policy, half string) (Acceptance, bool) {
	var all, sh, st *SuiteRow
	for i, r := range rows {
		if r.Policy != policy {
			continue
		}
		switch r.Group {
		case half + "/all":
			all = &rows[i]
		case half + "/shifting":
			sh = &rows[i]
		case half + "/stationary":
			st = &rows[i]
		}
	}
	if all == nil || all.VsThreshold == nil {
		return Acceptance{}, false
	}
	t := all.VsThreshold
	a := Acceptance{N: all.N, WithinShare: float64(t.AtLeastMinusHalf) / float64(max(t.N, 1)), VsThreshold: t.Mean, QuickRevPerH: all.QuickRevPerH}
	if sh != nil {
		a.Shifting, a.NShifting = sh.VsStaticBest.Mean, sh.N
	}
	if st != nil {
		a.Stationary, a.NStationary = st.VsStaticBest.Mean, st.N
	}
	a.Met = [5]bool{a.WithinShare >= 0.9, a.VsThreshold >= 2, a.NShifting > 0 && a.Shifting >= 3, a.NStationary == 0 || a.Stationary >= -1, a.QuickRevPerH <= 1}
	return a, true
}

// openingMean is a row's mean against its opening split, "–" without one.
func openingMean(r SuiteRow) string {
	if r.VsOpening == nil {
		return "–"
	}
	return fmt.Sprintf("%+.2f", r.VsOpening.Mean)
}

func headroomVerdict(gain float64) string {
	if gain < 3 {
		return fmt.Sprintf("beyond what a hindsight schedule attains (by %.2f pt)", 3-gain)
	}
	return fmt.Sprintf("within it (%.2f pt of room)", gain-3)
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
