package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The suite's headroom (SuiteOptions.Oracle): per scenario, the hindsight
// schedule (oracle.go) searched from the scenario's static-best, on the
// same engines, rate scale and SLOs. It starts at static-best's split (no
// opening move), so its schedule with no change is exactly static-best's
// run and oracle − static-best is what a controller that foresaw the
// traffic, and still paid every drain and switch, gains over the best
// fixed split. narwhal − oracle is what narwhal leaves of that headroom.
// The search is local, so the headroom is a lower bound.

// SuiteOracle is a scenario's hindsight schedule: its outcome, the
// schedule (for --policy scheduled:<Schedule>, from static:StartSplit),
// the runs the search made and the key it was computed under.
type SuiteOracle struct {
	Key        string  `json:"key"`
	StartSplit int     `json:"start_split"`
	Outcome    Outcome `json:"outcome"`
	Schedule   string  `json:"schedule"`
	Runs       int     `json:"runs"`
}

// suiteOracleVersion is part of every oracle cache key: bump it when the
// search changes.
const suiteOracleVersion = 1

// oracleKey identifies an oracle result: the scenario's baseline key (its
// definition, switch time included, and the engine model's version), the
// split it starts from and the search's window, passes and version. A
// change to any recomputes it.
func oracleKey(baselineKey string, bestSplit int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s|start%d|w%d|p%d|v%d", baselineKey, bestSplit, OracleWindowS, OraclePasses, suiteOracleVersion)))
	return hex.EncodeToString(h[:])[:16]
}

// suiteOracle searches the hindsight schedule of one scenario from
// static-best's split bl.BestSplit.
func suiteOracle(ctx context.Context, name string, cfg Config, reqs []Request, bl SuiteBaseline, progress io.Writer) (*SuiteOracle, error) {
	start := time.Now()
	cfg.InitialPrefill = bl.BestSplit
	best, split, runs, err := oracleSearch(ctx, cfg, reqs, options{progress: progress}, bl.BestSplit, "suite: "+name+": oracle")
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	oc := outcomeOf(best)
	oc.WallS = time.Since(start).Seconds()
	return &SuiteOracle{Key: oracleKey(bl.Key, bl.BestSplit), StartSplit: bl.BestSplit, Outcome: oc,
		Schedule: strings.TrimPrefix(oracleSchedule(cfg, split), "scheduled:"), Runs: runs}, nil
}

// ScenarioOracle is a scenario's hindsight schedule as the suite reports
// it: SuiteOracle and its attainment minus static-best's, in points.
type ScenarioOracle struct {
	SuiteOracle
	VsStaticBest float64 `json:"vs_static_best"`
	// Late: the same schedule replayed LateS seconds late
	// (SuiteOptions.OracleLateS), and its attainment minus static-best's.
	Late             *Outcome `json:"late,omitempty"`
	LateS            int      `json:"late_s,omitempty"`
	LateVsStaticBest float64  `json:"late_vs_static_best,omitempty"`
}

// lateSchedule is the policy that replays a cached schedule (SuiteOracle.
// Schedule: "P@T,..." or "static:P") on engines engines lateS seconds
// late: every move at T + lateS. A schedule of no move stays static; one
// the scheduled policy would refuse is an error.
func lateSchedule(schedule string, engines, lateS int) (string, error) {
	if strings.HasPrefix(schedule, "static:") {
		return schedule, nil
	}
	spec, err := parsePolicy("scheduled:"+schedule, engines)
	if err != nil {
		return "", fmt.Errorf("cached oracle schedule: %w", err)
	}
	moves := make([]string, len(spec.moves))
	for i, m := range spec.moves {
		moves[i] = strconv.Itoa(m.target) + "@" + strconv.FormatFloat(float64(m.atNs)/1e9+float64(lateS), 'f', -1, 64)
	}
	return "scheduled:" + strings.Join(moves, ","), nil
}

// WriteOracleTable prints, per scenario with an oracle, static-best, the
// oracle, narwhal (the variant named) and their differences in points.
func WriteOracleTable(w io.Writer, results []ScenarioResult, variant string) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p("| scenario | static-best %% | oracle %% | oracle − static-best | %s %% | %s − oracle | oracle moves | oracle runs |\n", variant, variant)
	p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		if r.Oracle == nil {
			continue
		}
		n, ok := r.Narwhal[variant]
		if !ok {
			continue
		}
		o := r.Oracle.Outcome
		p("| %s | %.2f | %.2f | %+.2f | %.2f | %+.2f | %d | %d |\n", r.Scenario.Name, 100*r.Baseline.StaticBest, 100*o.Attainment,
			r.Oracle.VsStaticBest, 100*n.Attainment, 100*(n.Attainment-o.Attainment), o.Moves, r.Oracle.Runs)
	}
	return err
}
