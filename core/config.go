package core

import (
	"errors"
	"fmt"
	"math"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/ring"
)

// ErrInvalidConfig is returned (wrapped) by Config.Validate and New.
var ErrInvalidConfig = errors.New("invalid config")

// Config is the core's configuration. JSON and YAML keys are snake_case.
type Config struct {
	// StepS is the controller step in seconds.
	StepS float64 `json:"step_s" yaml:"step_s"`
	// DemandWindowS is the long demand horizon (and the evidence max span).
	DemandWindowS float64 `json:"demand_window_s" yaml:"demand_window_s"`
	// MinEvidenceSpanS is the short demand horizon and the evidence span
	// a consolidation needs.
	MinEvidenceSpanS float64 `json:"min_evidence_span_s" yaml:"min_evidence_span_s"`
	// MonitorIntervalS is the width of an SLO-attainment bucket.
	MonitorIntervalS float64 `json:"monitor_interval_s" yaml:"monitor_interval_s"`
	// TTFTSLOS and TPOTSLOS are the latency SLOs in seconds.
	TTFTSLOS float64 `json:"ttft_slo_s" yaml:"ttft_slo_s"`
	TPOTSLOS float64 `json:"tpot_slo_s" yaml:"tpot_slo_s"`
	// FutureToleranceS: evidence stamped more than this after the core's
	// clock is refused (ErrAheadOfClock) and never moves the newest
	// bucket. 0 (the default) means one demand bucket width.
	FutureToleranceS float64 `json:"future_tolerance_s" yaml:"future_tolerance_s"`
	// PendingTimeoutS: an offer started and not sized, refused or
	// abandoned within this long is ended by the next Step and counted as
	// an unsized observation. The narwhal-core service sets it from
	// events.pending_timeout_s.
	PendingTimeoutS float64 `json:"pending_timeout_s" yaml:"-"`
	// Controller holds the movement gates and scoring knobs.
	Controller controller.Config `json:"controller" yaml:"controller"`
}

// DefaultConfig: 1 s step, 60 s demand window, 10 s evidence span and
// attainment buckets, and the SLOs DistServe uses for OPT-13B chat (the
// default built-in profile): TTFT 0.25 s, TPOT 0.1 s. Evidence may run
// one demand bucket ahead of the core's clock; pending offers time out
// after 30 s (the service's default body read timeout).
func DefaultConfig() Config {
	return Config{
		StepS:            1,
		DemandWindowS:    60,
		MinEvidenceSpanS: 10,
		MonitorIntervalS: 10,
		TTFTSLOS:         0.25,
		TPOTSLOS:         0.1,
		PendingTimeoutS:  30,
		Controller:       controller.DefaultConfig(),
	}
}

// maxSpanS bounds every duration (a year) so that nanoseconds never
// overflow.
const maxSpanS = 365 * 24 * 3600

// Validate returns an error naming the first bad field, its value and the
// rule, e.g. "step_s must be > 0, got -1".
func (c Config) Validate() error {
	bad := func(field string, v float64, rule string) error {
		return fmt.Errorf("%w: %s must be %s, got %v", ErrInvalidConfig, field, rule, v)
	}
	pos := func(v float64) bool { return !math.IsNaN(v) && v > 0 && v <= maxSpanS }
	switch {
	case !pos(c.StepS):
		return bad("step_s", c.StepS, "> 0 and <= 31536000")
	case !pos(c.DemandWindowS):
		return bad("demand_window_s", c.DemandWindowS, "> 0 and <= 31536000")
	case c.DemandWindowS < c.StepS:
		return bad("demand_window_s", c.DemandWindowS, fmt.Sprintf(">= step_s (%v)", c.StepS))
	case !pos(c.MinEvidenceSpanS):
		return bad("min_evidence_span_s", c.MinEvidenceSpanS, "> 0 and <= 31536000")
	case c.MinEvidenceSpanS > c.DemandWindowS:
		return bad("min_evidence_span_s", c.MinEvidenceSpanS, fmt.Sprintf("<= demand_window_s (%v)", c.DemandWindowS))
	case !pos(c.MonitorIntervalS):
		return bad("monitor_interval_s", c.MonitorIntervalS, "> 0 and <= 31536000")
	case !pos(c.TTFTSLOS):
		return bad("ttft_slo_s", c.TTFTSLOS, "> 0 and <= 31536000")
	case !pos(c.TPOTSLOS):
		return bad("tpot_slo_s", c.TPOTSLOS, "> 0 and <= 31536000")
	case math.IsNaN(c.FutureToleranceS) || c.FutureToleranceS < 0 || c.FutureToleranceS >= c.DemandWindowS:
		return bad("future_tolerance_s", c.FutureToleranceS, fmt.Sprintf(">= 0 and < demand_window_s (%v)", c.DemandWindowS))
	case !pos(c.PendingTimeoutS):
		return bad("pending_timeout_s", c.PendingTimeoutS, "> 0 and <= 31536000")
	}
	// Every history is a ring of at most ring.MaxSlots buckets: the
	// outputs history keeps four demand windows of demand buckets, the
	// attainment four windows of monitor intervals.
	width := float64(buckets.BucketWidth(secNs(c.StepS), secNs(c.MinEvidenceSpanS))) / 1e9
	if maxW := width * (ring.MaxSlots - 2) / 4; c.DemandWindowS > maxW {
		return bad("demand_window_s", c.DemandWindowS, fmt.Sprintf("<= %v (four windows in at most %d buckets of %v s)", maxW, ring.MaxSlots, width))
	}
	if maxW := c.MonitorIntervalS * (ring.MaxSlots - 2) / 4; c.DemandWindowS > maxW {
		return bad("demand_window_s", c.DemandWindowS, fmt.Sprintf("<= %v (four windows in at most %d attainment buckets of monitor_interval_s)", maxW, ring.MaxSlots))
	}
	if err := c.Controller.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// futureToleranceNs is future_tolerance_s, 0 meaning one demand bucket.
func (c Config) futureToleranceNs() int64 {
	if c.FutureToleranceS == 0 {
		return buckets.BucketWidth(secNs(c.StepS), secNs(c.MinEvidenceSpanS))
	}
	return secNs(c.FutureToleranceS)
}

func secNs(s float64) int64 { return int64(math.Round(s * 1e9)) }
