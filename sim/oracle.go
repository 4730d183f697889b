package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The hindsight schedule ("oracle" policy): a search, with the whole
// workload known in advance, for the split to hold in each window of
// OracleWindowS seconds. It answers a question static-best cannot: what a
// controller that foresaw the traffic, and still had to drain and switch
// engines like any other, could attain from the same initial split. The
// search is local, so its result is a schedule that exists, not the
// optimum: it bounds from below what foresight attains.
//
// The search starts from the best static split (static-best's, reached
// by a move at 0 s) and makes passes over the windows: in each window it
// tries the held split ±1 and ±2 engines (the schedule's later windows
// unchanged), each scored by one run of the scheduled policy over the
// whole workload (requests meeting both SLOs), and keeps the best change
// that gains. It stops after a pass without a gain or OraclePasses passes.
// The final schedule is in Result.Schedule, reproducible with
// --policy scheduled:<Schedule>.
const (
	OracleWindowS = 60
	OraclePasses  = 6
)

func runOracle(ctx context.Context, cfg Config, reqs []Request, o options) (*Result, error) {
	start := time.Now()
	sb, err := runStaticBest(ctx, cfg, reqs, o) // its progress lines are the oracle's first
	if err != nil {
		return nil, err
	}
	if o.progress != nil {
		fmt.Fprintf(o.progress, "oracle: starting from static-best static:%d slo_attainment=%.4f\n", *sb.BestSplit, sb.SLOAttainment)
	}
	best, split, _, err := oracleSearch(ctx, cfg, reqs, o, *sb.BestSplit, "oracle")
	if err != nil {
		return nil, err
	}
	if o.progress != nil {
		fmt.Fprintf(o.progress, "oracle: slo_attainment=%.4f (static-best %.4f)\n", best.SLOAttainment, sb.SLOAttainment)
	}
	out := *best
	out.Policy = "oracle"
	out.Schedule = strings.TrimPrefix(oracleSchedule(cfg, split), "scheduled:")
	out.WallSeconds = time.Since(start).Seconds()
	return &out, nil
}

// oracleSearch is the hindsight search from the schedule holding start
// in every window: it returns the best run found, its split per window
// and the runs made. label prefixes its progress lines (at most one per
// 5 s, and one per pass, on o.progress).
func oracleSearch(ctx context.Context, cfg Config, reqs []Request, o options, start int, label string) (*Result, []int, int, error) {
	nw := int(reqs[len(reqs)-1].ArrivalNs/int64(OracleWindowS*1e9)) + 1
	split := make([]int, nw)
	for k := range split {
		split[k] = start
	}
	first, err := runPolicies(ctx, cfg, reqs, o, []string{oracleSchedule(cfg, split)}, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	best, runs := first[0], 1
	met := func(r *Result) float64 { return r.SLOAttainment * float64(r.Requests) }
	lastNote := time.Now()
	for pass := 0; pass < OraclePasses; pass++ {
		gained := false
		for k := 0; k < nw; k++ {
			if o.progress != nil && time.Since(lastNote) >= 5*time.Second {
				fmt.Fprintf(o.progress, "%s: pass %d, window %d of %d: slo_attainment=%.4f\n", label, pass+1, k+1, nw, best.SLOAttainment)
				lastNote = time.Now()
			}
			var cands [][]int
			var pols []string
			for _, d := range []int{-2, -1, 1, 2} {
				if p := split[k] + d; p >= 1 && p < cfg.Engines {
					s := append([]int(nil), split...)
					s[k] = p
					cands = append(cands, s)
					pols = append(pols, oracleSchedule(cfg, s))
				}
			}
			res, err := runPolicies(ctx, cfg, reqs, o, pols, nil)
			if err != nil {
				return nil, nil, 0, err
			}
			runs += len(res)
			for i := range cands {
				if met(res[i]) > met(best) {
					best, split, gained = res[i], cands[i], true
				}
			}
		}
		if o.progress != nil {
			fmt.Fprintf(o.progress, "%s: pass %d: slo_attainment=%.4f\n", label, pass+1, best.SLOAttainment)
		}
		if !gained {
			break
		}
	}
	return best, split, runs, nil
}

// oracleSchedule is the scheduled policy holding split[k] from k windows
// on, starting from cfg's initial split (a move at 0 s when they differ).
func oracleSchedule(cfg Config, split []int) string {
	cur := cfg.InitialPrefill
	if cur == 0 {
		cur = cfg.Engines / 2
	}
	var moves []string
	for k, p := range split {
		if p != cur {
			moves = append(moves, strconv.Itoa(p)+"@"+strconv.Itoa(k*OracleWindowS))
			cur = p
		}
	}
	if len(moves) == 0 {
		return "static:" + strconv.Itoa(cur)
	}
	return "scheduled:" + strings.Join(moves, ",")
}
