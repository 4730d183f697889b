package service

import (
	"fmt"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// Limits bound what an event may say. Zero fields are invalid; see
// DefaultLimits.
type Limits struct {
	// MaxTokens bounds every token count (inclusive).
	MaxTokens int64
	// MaxPastNs: ts_ns may be at most this far before the server's clock.
	MaxPastNs int64
	// MaxFutureNs: ts_ns may be at most this far after the server's clock.
	MaxFutureNs int64
	// MaxRequestNs: arrival_ns may be at most this far before ts_ns.
	MaxRequestNs int64
}

// DefaultLimits: the core's token limit (buckets.MaxTokens, 16 Mi − 1: a
// larger count would reach the core and be refused there), ts within
// [now − 10 min, now + 30 s], requests up to 1 h long.
func DefaultLimits() Limits {
	return Limits{
		MaxTokens:    buckets.MaxTokens,
		MaxPastNs:    600e9,
		MaxFutureNs:  30e9,
		MaxRequestNs: 3600e9,
	}
}

// Validate checks ev's values against the limits and the server's clock
// nowNs. It never changes ev.
func (l Limits) Validate(ev *Event, nowNs int64) error {
	for _, t := range [...]struct {
		bit uint16
		v   int64
	}{
		{fieldEstInput, ev.EstInputTokens},
		{fieldInput, ev.InputTokens},
		{fieldReqOutput, ev.RequestedOutputTokens},
		{fieldOutput, ev.OutputTokens},
	} {
		if ev.has&t.bit == 0 {
			continue
		}
		if t.v < 0 {
			return fieldError(ErrOutOfRange, fieldName(t.bit), "must be >= 0, got %d", t.v)
		}
		if t.v > l.MaxTokens {
			return fieldError(ErrOutOfRange, fieldName(t.bit), "must be <= %d, got %d", l.MaxTokens, t.v)
		}
	}
	if ev.TsNs <= 0 {
		return fieldError(ErrOutOfRange, "ts_ns", "must be > 0 (Unix nanoseconds), got %d", ev.TsNs)
	}
	if d := nowNs - ev.TsNs; d > l.MaxPastNs {
		return fieldError(ErrClockSkew, "ts_ns", "is %s in the past of the server's clock, limit %s (got %d)", fmtS(d), fmtS(l.MaxPastNs), ev.TsNs)
	}
	if d := ev.TsNs - nowNs; d > l.MaxFutureNs {
		return fieldError(ErrClockSkew, "ts_ns", "is %s in the future of the server's clock, limit %s (got %d)", fmtS(d), fmtS(l.MaxFutureNs), ev.TsNs)
	}
	if ev.has&fieldArrival != 0 {
		if ev.ArrivalNs <= 0 {
			return fieldError(ErrOutOfRange, "arrival_ns", "must be > 0 (Unix nanoseconds), got %d", ev.ArrivalNs)
		}
		if ev.ArrivalNs > ev.TsNs {
			return fieldError(ErrOutOfRange, "arrival_ns", "must be <= ts_ns %d, got %d", ev.TsNs, ev.ArrivalNs)
		}
		if d := ev.TsNs - ev.ArrivalNs; d > l.MaxRequestNs {
			return fieldError(ErrOutOfRange, "arrival_ns", "is %s before ts_ns, limit %s (got %d)", fmtS(d), fmtS(l.MaxRequestNs), ev.ArrivalNs)
		}
	}
	if ev.FirstTokenNs != 0 {
		if ev.FirstTokenNs < ev.ArrivalNs || ev.FirstTokenNs > ev.TsNs {
			return fieldError(ErrOutOfRange, "first_token_ns", "must be 0 (none) or within [arrival_ns %d, ts_ns %d], got %d", ev.ArrivalNs, ev.TsNs, ev.FirstTokenNs)
		}
	}
	if ev.Type == EventCompleted && ev.FirstTokenNs == 0 && ev.OutputTokens > 0 {
		return fieldError(ErrOutOfRange, "first_token_ns", "must be set when output_tokens is %d", ev.OutputTokens)
	}
	return nil
}

func fmtS(ns int64) string { return fmt.Sprintf("%gs", float64(ns)/1e9) }
