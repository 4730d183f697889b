package controller

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is returned (wrapped) by Config.Validate and New.
var ErrInvalidConfig = errors.New("invalid config")

// Config holds the controller's gates and scoring knobs. Field names in
// JSON/YAML are snake_case; Validate names a field by its tag.
type Config struct {
	// MinPrefillEngines and MinDecodeEngines are the role floors: a move
	// never leaves fewer live serving engines in its source role.
	MinPrefillEngines int `json:"min_prefill_engines" yaml:"min_prefill_engines"`
	MinDecodeEngines  int `json:"min_decode_engines" yaml:"min_decode_engines"`
	// CooldownS: seconds since the last move anywhere before the next.
	CooldownS float64 `json:"cooldown_s" yaml:"cooldown_s"`
	// DwellS: seconds since an engine's own last move before it moves
	// again. The default, 120, outlasts a 60-s switch plus the short
	// horizon that must measure the move before it is judged.
	DwellS float64 `json:"dwell_s" yaml:"dwell_s"`
	// ConfirmSteps: consecutive steps a move must be chosen before it is made.
	ConfirmSteps int `json:"confirm_steps" yaml:"confirm_steps"`
	// ReversalConfirmSteps: consecutive steps a move must be chosen when
	// it reverses the direction of the last move (a reversal means the
	// last move answered a transient; it must prove itself longer).
	ReversalConfirmSteps int `json:"reversal_confirm_steps" yaml:"reversal_confirm_steps"`
	// TargetPressure: a phase whose pressure (predicted latency / SLO) is
	// at or under this needs no relief; the controller moves only when the
	// current split's worse phase is above it.
	TargetPressure float64 `json:"target_pressure" yaml:"target_pressure"`
	// SourceLimit: a move is considered only while its source role's
	// pressure after the move stays under this.
	SourceLimit float64 `json:"source_limit" yaml:"source_limit"`
	// HysteresisMargin: the best split must beat the current split's score
	// by more than this.
	HysteresisMargin float64 `json:"hysteresis_margin" yaml:"hysteresis_margin"`
	// KVHeadroom: fraction of the decode pool's physical KV capacity that
	// its resident and predicted KV tokens may fill after a move.
	KVHeadroom float64 `json:"kv_headroom" yaml:"kv_headroom"`
	// KVLeadS: a decode pool whose resident KV, growing at its rate of the
	// last 5 s, would pass kv_headroom of its capacity within this many
	// seconds, and grow by at least half of that limit on the way, is short
	// of decode already (see the package documentation). 0 turns it off.
	KVLeadS float64 `json:"kv_lead_s" yaml:"kv_lead_s"`
	// MinEvidenceArrivals: arrivals wholly after the evidence cutoff that a
	// decode-to-prefill consolidation needs (with MinEvidenceSpanS of the
	// timing).
	MinEvidenceArrivals int64 `json:"min_evidence_arrivals" yaml:"min_evidence_arrivals"`
	// PendingTolerance: unsized offers still being read that are tolerated
	// before demand counts as incomplete.
	PendingTolerance int64 `json:"pending_tolerance" yaml:"pending_tolerance"`
	// DefaultOutputTokens: output estimate for a request without requested
	// output when no learned estimate exists.
	DefaultOutputTokens int64 `json:"default_output_tokens" yaml:"default_output_tokens"`
	// MinObservations: latency observations needed before observed
	// pressure calibrates the decode model (decode correction).
	MinObservations int64 `json:"min_observations" yaml:"min_observations"`
	// DrainCostWeight: score penalty per second of resident work that the
	// moving engines must drain.
	DrainCostWeight float64 `json:"drain_cost_weight" yaml:"drain_cost_weight"`
	// LatencyQuantile: the quantile of TTFT the prefill prediction
	// targets (requests must meet the SLO, not their mean): the M/M/1
	// waiting-time quantile per engine.
	LatencyQuantile float64 `json:"latency_quantile" yaml:"latency_quantile"`
	// ScoreCap: above this pressure a phase enters a split's score
	// logarithmically (cap·(1+ln(p/cap))), so that a far-over phase still
	// ranks splits (no ties) while the hysteresis margin becomes relative.
	ScoreCap float64 `json:"score_cap" yaml:"score_cap"`
	// MaxMovesPerStep: the most engines one decision moves (all in the
	// same direction, each through every gate). A large deficit is closed
	// in one decision instead of one engine per cooldown.
	MaxMovesPerStep int `json:"max_moves_per_step" yaml:"max_moves_per_step"`
	// PredictionArrivals: with fewer requests than this in the short
	// window, a predicted prefill deficit does not move an engine until
	// the prefill pool measures a shortage (a queue past the TTFT SLO, or
	// observed TTFT past target_pressure): a few arrivals are a few
	// prompts' sizes. 0 turns it off.
	PredictionArrivals float64 `json:"prediction_arrivals" yaml:"prediction_arrivals"`
	// JournalRing: decisions kept in memory.
	JournalRing int `json:"journal_ring" yaml:"journal_ring"`
	// Scoring: how a candidate split is scored with complete demand.
	// "rollout" (the default): the pools simulated forward over a demand
	// window past the switch, drains and switch delays included, the
	// score being the predicted share of requests missing TTFT or TPOT
	// (rollout.go). "closed_form": steady-state queueing where the pools
	// stand once the moves land (score.go).
	Scoring string `json:"scoring" yaml:"scoring"`
	// MissMargin: with scoring "rollout", the share of requests the best
	// split must save over the current one to move (the rollout's
	// hysteresis; hysteresis_margin is the closed form's).
	MissMargin float64 `json:"miss_margin" yaml:"miss_margin"`
	// SwitchS: seconds a role switch takes after the engine's drain, as
	// the rollout assumes until completed moves measure it (then the
	// measured mean of the recent moves stands).
	SwitchS float64 `json:"switch_s" yaml:"switch_s"`
	// StarvationS: a phase measured past its SLO this many seconds on end
	// (counted from when the pools settled after the last move), while
	// the other phase measures within source_limit even one engine
	// smaller, gets one engine where the model holds: the starvation
	// rule in the package documentation (on overflow-priced demand it
	// acts on the first settled step). 0 turns it off.
	StarvationS float64 `json:"starvation_s" yaml:"starvation_s"`
}

// Scoring values (Config.Scoring).
const (
	ScoringClosedForm = "closed_form"
	ScoringRollout    = "rollout"
)

// DefaultConfig returns the defaults documented in doc.go.
func DefaultConfig() Config {
	return Config{
		MinPrefillEngines:    1,
		MinDecodeEngines:     1,
		CooldownS:            10,
		DwellS:               120,
		ConfirmSteps:         3,
		ReversalConfirmSteps: 5,
		TargetPressure:       0.8,
		SourceLimit:          0.65,
		HysteresisMargin:     0.1,
		KVHeadroom:           0.9,
		KVLeadS:              15,
		MinEvidenceArrivals:  20,
		PendingTolerance:     0,
		DefaultOutputTokens:  256,
		MinObservations:      10,
		DrainCostWeight:      0.01,
		LatencyQuantile:      0.5,
		ScoreCap:             1,
		MaxMovesPerStep:      4,
		PredictionArrivals:   60,
		JournalRing:          1024,
		Scoring:              ScoringRollout,
		MissMargin:           0.03,
		SwitchS:              30,
		StarvationS:          120,
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate returns an error naming the first bad field (prefixed
// "controller."), its value and the rule.
func (c Config) Validate() error {
	bad := func(field string, v any, rule string) error {
		return fmt.Errorf("%w: controller.%s must be %s, got %v", ErrInvalidConfig, field, rule, v)
	}
	switch {
	case c.MinPrefillEngines < 0:
		return bad("min_prefill_engines", c.MinPrefillEngines, ">= 0")
	case c.MinDecodeEngines < 0:
		return bad("min_decode_engines", c.MinDecodeEngines, ">= 0")
	case !finite(c.CooldownS) || c.CooldownS < 0:
		return bad("cooldown_s", c.CooldownS, ">= 0")
	case !finite(c.DwellS) || c.DwellS < 0:
		return bad("dwell_s", c.DwellS, ">= 0")
	case c.ConfirmSteps < 1:
		return bad("confirm_steps", c.ConfirmSteps, ">= 1")
	case c.ReversalConfirmSteps < 0:
		return bad("reversal_confirm_steps", c.ReversalConfirmSteps, ">= 0")
	case !finite(c.TargetPressure) || c.TargetPressure <= 0:
		return bad("target_pressure", c.TargetPressure, "> 0")
	case !finite(c.SourceLimit) || c.SourceLimit <= 0:
		return bad("source_limit", c.SourceLimit, "> 0")
	case !finite(c.HysteresisMargin) || c.HysteresisMargin < 0:
		return bad("hysteresis_margin", c.HysteresisMargin, ">= 0")
	case !finite(c.KVHeadroom) || c.KVHeadroom <= 0 || c.KVHeadroom > 1:
		return bad("kv_headroom", c.KVHeadroom, "in (0, 1]")
	case !finite(c.KVLeadS) || c.KVLeadS < 0 || c.KVLeadS > 3600:
		return bad("kv_lead_s", c.KVLeadS, "in [0, 3600]")
	case c.MinEvidenceArrivals < 0:
		return bad("min_evidence_arrivals", c.MinEvidenceArrivals, ">= 0")
	case c.PendingTolerance < 0:
		return bad("pending_tolerance", c.PendingTolerance, ">= 0")
	case c.DefaultOutputTokens <= 0:
		return bad("default_output_tokens", c.DefaultOutputTokens, "> 0")
	case c.MinObservations < 1:
		return bad("min_observations", c.MinObservations, ">= 1")
	case !finite(c.DrainCostWeight) || c.DrainCostWeight < 0:
		return bad("drain_cost_weight", c.DrainCostWeight, ">= 0")
	case !finite(c.LatencyQuantile) || c.LatencyQuantile < 0 || c.LatencyQuantile >= 1:
		return bad("latency_quantile", c.LatencyQuantile, "in [0, 1)")
	case !finite(c.ScoreCap) || c.ScoreCap <= c.TargetPressure:
		return bad("score_cap", c.ScoreCap, fmt.Sprintf("> target_pressure (%v)", c.TargetPressure))
	case c.MaxMovesPerStep < 1:
		return bad("max_moves_per_step", c.MaxMovesPerStep, ">= 1")
	case !finite(c.PredictionArrivals) || c.PredictionArrivals < 0:
		return bad("prediction_arrivals", c.PredictionArrivals, ">= 0")
	case c.JournalRing < 1:
		return bad("journal_ring", c.JournalRing, ">= 1")
	case c.Scoring != ScoringClosedForm && c.Scoring != ScoringRollout:
		return bad("scoring", fmt.Sprintf("%q", c.Scoring), fmt.Sprintf("%q or %q", ScoringClosedForm, ScoringRollout))
	case !finite(c.MissMargin) || c.MissMargin < 0 || c.MissMargin >= 1:
		return bad("miss_margin", c.MissMargin, "in [0, 1)")
	case !finite(c.SwitchS) || c.SwitchS < 0 || c.SwitchS > 3600:
		return bad("switch_s", c.SwitchS, "in [0, 3600]")
	case !finite(c.StarvationS) || c.StarvationS < 0 || c.StarvationS > 86400:
		return bad("starvation_s", c.StarvationS, "in [0, 86400]")
	}
	return nil
}

// Timing is what the controller takes from the core's top-level config.
type Timing struct {
	StepNs int64
	// ShortNs is the short demand horizon (the minimum evidence span);
	// LongNs the long one (the demand window, also the evidence max span).
	ShortNs, LongNs int64
	TTFTSLOS        float64
	TPOTSLOS        float64
}

func (t Timing) validate() error {
	switch {
	case t.StepNs <= 0:
		return fmt.Errorf("%w: step must be > 0 ns, got %d", ErrInvalidConfig, t.StepNs)
	case t.ShortNs <= 0 || t.LongNs < t.ShortNs:
		return fmt.Errorf("%w: horizons must satisfy 0 < short <= long, got %d, %d ns", ErrInvalidConfig, t.ShortNs, t.LongNs)
	case !finite(t.TTFTSLOS) || t.TTFTSLOS <= 0:
		return fmt.Errorf("%w: ttft slo must be > 0 s, got %v", ErrInvalidConfig, t.TTFTSLOS)
	case !finite(t.TPOTSLOS) || t.TPOTSLOS <= 0:
		return fmt.Errorf("%w: tpot slo must be > 0 s, got %v", ErrInvalidConfig, t.TPOTSLOS)
	}
	return nil
}

// margin is the hysteresis a decision on snapshot s whose current split
// scores cur uses: hysteresis_margin for closed-form scores; for rollout
// scores miss_margin of the requests the current split is predicted to
// lose, at least of all requests (past 1, a score counts the backlog a
// split leaves, whose size the model extrapolates: a move must save a
// share of it, not a fixed count).
func (c Config) margin(s *Snapshot, cur float64) float64 {
	if s.byRollout() {
		return c.MissMargin * max(1, cur)
	}
	return c.HysteresisMargin
}
