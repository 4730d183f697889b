package sim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteSummary prints the result as a small table.
func WriteSummary(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	pol := res.Policy
	if res.BestSplit != nil {
		pol = fmt.Sprintf("%s (static:%d)", pol, *res.BestSplit)
	}
	rows := [][2]string{
		{"policy", pol},
		{"profile", fmt.Sprintf("%s × %d engines", res.Profile, res.Engines)},
		{"requests", fmt.Sprintf("%d (%d completed)", res.Requests, res.Completed)},
		{"SLO attainment", fmt.Sprintf("%.2f%% (TTFT ≤ %gs: %.2f%%, TPOT ≤ %gs: %.2f%%)",
			100*res.SLOAttainment, res.TTFTSLOS, 100*res.TTFTAttainment, res.TPOTSLOS, 100*res.TPOTAttainment)},
		{"goodput", fmt.Sprintf("%.3f req/s", res.GoodputRPS)},
		{"TTFT p50 / p90", fmt.Sprintf("%.3fs / %.3fs", res.TTFTP50S, res.TTFTP90S)},
		{"TPOT p50 / p90", fmt.Sprintf("%.4fs / %.4fs", res.TPOTP50S, res.TPOTP90S)},
		{"moves", fmt.Sprintf("%d (%d reversals, %d within 60 s)", res.Moves, res.Reversals, res.QuickReversals)},
		{"mean engines", fmt.Sprintf("prefill %.2f, decode %.2f", res.MeanPrefillEngines, res.MeanDecodeEngines)},
		{"simulated", fmt.Sprintf("%.0fs of trace (%.0fs to drain), %d events, %.2fs wall", res.TraceSeconds, res.SimSeconds, res.Events, res.WallSeconds)},
	}
	if len(res.PerTrace) > 0 {
		var b []byte
		for _, t := range res.PerTrace {
			b = fmt.Appendf(b, "#%d %.2f%% of %d  ", t.Trace+1, 100*t.SLOAttainment, t.Requests)
		}
		rows = append(rows, [2]string{"per trace", string(b)})
	}
	if res.Schedule != "" {
		rows = append(rows, [2]string{"schedule", res.Schedule})
	}
	if res.CoreErrors > 0 {
		rows = append(rows, [2]string{"core errors", fmt.Sprintf("%d (last: %s)", res.CoreErrors, res.LastCoreError)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if len(res.Splits) > 0 {
		fmt.Fprintf(tw, "splits\t")
		for _, s := range res.Splits {
			fmt.Fprintf(tw, "%d:%.1f%% ", s.Prefill, 100*s.SLOAttainment)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("sim: summary: %w", err)
	}
	return nil
}
