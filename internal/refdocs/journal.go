package refdocs

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Journal renders docs/journal.md: every JSON field of a decision record,
// one table per object type, with the fields' doc comments.
func Journal(root string) ([]byte, error) {
	cm := newComments(root)
	var b bytes.Buffer
	b.WriteString(generatedHeader)
	b.WriteString(`# The decision journal

Every controller step writes one decision record: holds, blocked moves and
moves alike. They are the lines of ` + "`data_dir/journal.jsonl`" + ` (one JSON object
per line, reloaded at start), the items of ` + "`GET /v1/decisions`" + ` and
` + "`latest_decision`" + ` in ` + "`GET /v1/state`" + `, and the rows of the status page.
Every float is rounded to 6 decimals (infinities written as ±1e12); the
controller judged the full-precision values. docs/operator.md
("Reading a decision") walks through one; docs/design.md derives the model.

Closed sets: ` + "`decision_basis`" + ` is one of ` + "`" + strings.Join(controller.Bases, "`, `") + "`" + `;
` + "`action`" + ` one of ` + "`hold`, `move`, `blocked`" + `; ` + "`blocked_gate`" + ` and a gate
result's ` + "`gate`" + ` one of ` + "`" + strings.Join(controller.Gates, "`, `") + "`" + ` (in
evaluation order: the first failing gate is the blocked one).

`)
	seen := map[reflect.Type]bool{}
	queue := []reflect.Type{reflect.TypeOf(controller.Decision{})}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if seen[t] {
			continue
		}
		seen[t] = true
		fmt.Fprintf(&b, "## %s\n\n| field | type | description |\n|---|---|---|\n", t.Name())
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			desc, err := cm.field(t, f.Name)
			if err != nil {
				return nil, err
			}
			if desc == "" || strings.HasPrefix(desc, "(") { // none, or only the type's doc
				if h := journalHints[t.Name()+"."+name]; h != "" {
					desc = h
				} else if h := journalHints[name]; h != "" {
					desc = h
				}
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, typeName(f.Type), desc)
			if et := structOf(f.Type); et != nil && !seen[et] {
				queue = append(queue, et)
			}
		}
		b.WriteString("\n")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// structOf is the struct type a field holds (directly, by pointer or as
// list elements), nil for scalars.
func structOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct {
		return t
	}
	return nil
}

// journalHints describe the fields whose declaration carries no comment
// (a field that gains one uses it instead). Names are JSON names; the
// same name means the same thing wherever it appears.
var journalHints = map[string]string{
	"seq":                     "Sequence number: 1 for the first decision, +1 per step, continued across restarts.",
	"at_ns":                   "When (Unix ns; virtual time in the simulator and the demo).",
	"decision_basis":          "What the pressures were computed from (closed set above).",
	"action":                  "hold, move or blocked (a move was proposed and a gate stopped it).",
	"reason":                  "The decision in words, e.g. \"both phases within target pressure\".",
	"moves":                   "The engines moved by this decision.",
	"blocked_gate":            "The first gate that failed, on a blocked decision.",
	"gates":                   "Every gate's verdict on the proposed move, in evaluation order.",
	"snapshot":                "The frozen inputs the decision scored.",
	"current":                 "The current split (once moves in flight land) and its predicted pressures.",
	"best":                    "The best-scoring split.",
	"proposed":                "The split the decision moves (or would have moved) to.",
	"improvement":             "Current score minus the best split's score.",
	"recovery_prefill_ratio":  "max(observed prefill pressure, (running + queued prefill s) / (prefill engines × TTFT SLO)); prefill pressure on the recovery basis.",
	"queued_prefill_s":        "Queued prefill seconds on the prefill engines (agents' reports).",
	"observed_prefill_ratio":  "Observed TTFT / TTFT SLO over the short horizon.",
	"observed_decode_ratio":   "Observed TPOT / TPOT SLO over the short horizon.",
	"confirmations":           "Consecutive steps that chose the same direction (the confirmation gate needs confirm_steps, or reversal_confirm_steps to reverse the last move).",
	"gate":                    "The gate's name.",
	"pass":                    "Whether the gate allowed at least one engine.",
	"value":                   "What the gate measured (its unit depends on the gate).",
	"limit":                   "The gate's limit for value.",
	"detail":                  "The verdict in words.",
	"engine_id":               "The engine that moves.",
	"from":                    "Its role before the move.",
	"to":                      "Its role after the move.",
	"engines":                 "Live serving engines scored.",
	"prefill_engines":         "Engines in the prefill role.",
	"decode_engines":          "Engines in the decode role.",
	"in_transition":           "Engines draining or switching (scored in their target role).",
	"pending_unsized":         "Request bodies still being read (demand_history.unsized.pending).",
	"incomplete":              "Demand is incomplete (unsized offers past pending_tolerance, or an overflow cohort without requested output).",
	"incomplete_reason":       "Why demand is incomplete.",
	"short":                   "Demand over the short horizon (min_evidence_span_s).",
	"long":                    "Demand over the long horizon (demand_window_s).",
	"outputs":                 "The output-length estimate (built once per step, used for both horizons).",
	"decode_correction":       "Observed / modelled TPOT, scaling the TPOT (clamped to [0.5, 2]; 1 when the load correction applies).",
	"decode_load_correction":  "Scales the per-sequence decode cost from observed TPOT (clamped to [0.5, 2]).",
	"kv_correction":           "Resident / predicted KV at the current split, scaling predicted KV (in [0.5, 1]; up to 3 while resident KV is past target_pressure of the decode capacity).",
	"output_scale":            "Scale of the mean output calibrated to measured TPOT (at most 1).",
	"observed_prefill":        "Observed TTFT / SLO over the short horizon.",
	"observed_decode":         "Observed TPOT / SLO over the short horizon.",
	"resident_decode_kv":      "KV tokens resident on the decode engines.",
	"estimate_build":          "How many output estimates the controller has built (one per step).",
	"SplitScore.moves":        "Engines that move to reach this split.",
	"prefill_pressure":        "Predicted TTFT / SLO (the worse horizon).",
	"decode_pressure":         "Predicted TPOT / SLO (the larger of the long horizon and the mean of both), at least KV need / capacity.",
	"short_prefill":           "Prefill pressure over the short horizon.",
	"long_prefill":            "Prefill pressure over the long horizon.",
	"short_decode":            "Decode pressure over the short horizon.",
	"long_decode":             "Decode pressure over the long horizon.",
	"drain_s":                 "Seconds of resident work the moving engines must drain.",
	"score":                   "The split's score (lower is better): level(worse phase) + 0.01·level(other) + drain_cost_weight · drain_s; with scoring \"rollout\" and complete demand, miss_share + 0.0001 per moved engine.",
	"from_ns":                 "Start of the horizon (Unix ns).",
	"to_ns":                   "End of the horizon (Unix ns).",
	"span_s":                  "Seconds covered.",
	"requests":                "Requests that arrived in the horizon.",
	"rate_per_s":              "Arrival rate.",
	"mean_input":              "Mean prompt tokens.",
	"mean_input_sq":           "Mean squared prompt tokens (the quadratic attention term).",
	"mean_output":             "Mean expected output tokens.",
	"decode_ctx":              "Mean decode context, weighted by output tokens.",
	"max_input":               "Largest prompt.",
	"max_ctx_per_seq":         "Largest context of one sequence.",
	"overflow":                "Requests in overflow cohorts (priced at the cohort's largest shape).",
	"unsized":                 "Offers that ended before they were sized.",
	"invalid_buckets":         "Buckets whose boundary evidence a reprice invalidated.",
	"decode_incomplete":       "An overflow cohort has zero requested output (decode demand incomplete).",
	"feasible_share":          "Share of requests whose prompt can meet the TTFT SLO at all.",
	"feasible_mean_input":     "Mean prompt tokens of those requests.",
	"feasible_mean_input_sq":  "Mean squared prompt tokens of those requests.",
	"learned":                 "Whether the discount was learned from completed requests (false while the outputs history holds overflow).",
	"discount":                "Actual / requested output tokens.",
	"unbounded_mean":          "Mean output of requests sent without max_tokens.",
	"observations":            "Completed requests the estimate was built from.",
	"count":                   "Observations.",
	"mean":                    "Mean ratio.",
	"max":                     "Largest ratio.",
	"arrivals":                "Arrivals counted after the evidence cutoff.",
	"required_span_s":         "Span the evidence needs (min_evidence_span_s).",
	"required_arrivals":       "Arrivals the evidence needs (min_evidence_arrivals).",
	"max_span_s":              "The evidence span's cap (demand_window_s).",
	"closed":                  "Enough evidence: span and arrivals both reached.",
	"risk_kind":               "The latest risk event: a move or a decode breach.",
	"risk_age_s":              "Seconds since that event.",
	"risk_events":             "Risk events within the demand window.",
	"short_decode_engines":    "Smallest decode pool meeting target_pressure on the short horizon.",
	"long_decode_engines":     "The same on the long horizon.",
	"trend_ratio":             "Short over long arrival rate.",
	"envelope_decode_engines": "The larger of the two: decode engines a consolidation must keep.",
	"direction":               "decode_to_prefill, prefill_to_decode, or empty on a hold.",
	"demand_evidence":         "The consolidation evidence, captured on every decode-to-prefill gate evaluation (blocked or not).",
	"kv_need_tokens":          "The decode pool's resident or predicted KV tokens, whichever is larger.",
	"kv_capacity_tokens":      "Its physical KV capacity (0 when unknown: KV is then not judged).",
}
