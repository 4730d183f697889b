package service

import (
	"errors"
	"fmt"
)

// EventType names one step of a request's life as a router reports it.
type EventType uint8

const (
	// EventInvalid is the zero value; never accepted.
	EventInvalid EventType = iota
	// EventOfferStarted: the router started reading a request body.
	EventOfferStarted
	// EventOfferAbandoned: the offer ended before it was sized.
	EventOfferAbandoned
	// EventSized: the body was parsed; input size is a local estimate.
	EventSized
	// EventTokenized: exact input tokens are known; the arrival is
	// repriced at its original arrival time.
	EventTokenized
	// EventAdmitted: the request was placed on an engine.
	EventAdmitted
	// EventRefused: the router predictively refused the request.
	EventRefused
	// EventFirstToken: the first output token was produced.
	EventFirstToken
	// EventCompleted: the request finished normally.
	EventCompleted
	// EventFailed: the request failed.
	EventFailed
	// EventExpired: the request hit its deadline.
	EventExpired
	numEventTypes
)

var eventTypeNames = [numEventTypes]string{
	EventInvalid:        "invalid",
	EventOfferStarted:   "offer_started",
	EventOfferAbandoned: "offer_abandoned",
	EventSized:          "sized",
	EventTokenized:      "tokenized",
	EventAdmitted:       "admitted",
	EventRefused:        "refused",
	EventFirstToken:     "first_token",
	EventCompleted:      "completed",
	EventFailed:         "failed",
	EventExpired:        "expired",
}

// String returns the type's wire name.
func (t EventType) String() string {
	if t < numEventTypes {
		return eventTypeNames[t]
	}
	return "invalid"
}

// parseEventType maps a wire name to its type; 0 allocations.
func parseEventType(b []byte) EventType {
	switch string(b) {
	case "offer_started":
		return EventOfferStarted
	case "offer_abandoned":
		return EventOfferAbandoned
	case "sized":
		return EventSized
	case "tokenized":
		return EventTokenized
	case "admitted":
		return EventAdmitted
	case "refused":
		return EventRefused
	case "first_token":
		return EventFirstToken
	case "completed":
		return EventCompleted
	case "failed":
		return EventFailed
	case "expired":
		return EventExpired
	}
	return EventInvalid
}

// Field bits: which fields a decoded line carried.
const (
	fieldType uint16 = 1 << iota
	fieldTs
	fieldArrival
	fieldFirstToken
	fieldEstInput
	fieldInput
	fieldReqOutput
	fieldOutput
	fieldEngine
)

var fieldNames = [...]struct {
	bit  uint16
	name string
}{
	{fieldType, "type"},
	{fieldTs, "ts_ns"},
	{fieldArrival, "arrival_ns"},
	{fieldFirstToken, "first_token_ns"},
	{fieldEstInput, "est_input_tokens"},
	{fieldInput, "input_tokens"},
	{fieldReqOutput, "requested_output_tokens"},
	{fieldOutput, "output_tokens"},
	{fieldEngine, "engine"},
}

func fieldName(bit uint16) string {
	for _, f := range fieldNames {
		if f.bit == bit {
			return f.name
		}
	}
	return "?"
}

// required and allowed fields per event type. Every type requires type and
// ts_ns; fields outside "allowed" are refused so that a misplaced field (a
// router bug) is reported rather than silently ignored.
var (
	requiredFields = [numEventTypes]uint16{
		EventOfferStarted:   fieldType | fieldTs,
		EventOfferAbandoned: fieldType | fieldTs,
		EventSized:          fieldType | fieldTs | fieldEstInput,
		EventTokenized:      fieldType | fieldTs | fieldArrival | fieldEstInput | fieldInput,
		EventAdmitted:       fieldType | fieldTs | fieldEngine | fieldInput,
		EventRefused:        fieldType | fieldTs,
		EventFirstToken:     fieldType | fieldTs | fieldArrival,
		EventCompleted:      fieldType | fieldTs | fieldArrival | fieldFirstToken | fieldOutput,
		EventFailed:         fieldType | fieldTs | fieldArrival,
		EventExpired:        fieldType | fieldTs | fieldArrival,
	}
	allowedFields = [numEventTypes]uint16{
		EventOfferStarted:   fieldType | fieldTs,
		EventOfferAbandoned: fieldType | fieldTs,
		EventSized:          fieldType | fieldTs | fieldArrival | fieldEstInput | fieldReqOutput,
		EventTokenized:      fieldType | fieldTs | fieldArrival | fieldEstInput | fieldInput | fieldReqOutput,
		EventAdmitted:       fieldType | fieldTs | fieldEngine | fieldInput | fieldReqOutput,
		EventRefused:        fieldType | fieldTs | fieldArrival,
		EventFirstToken:     fieldType | fieldTs | fieldArrival,
		EventCompleted:      fieldType | fieldTs | fieldArrival | fieldFirstToken | fieldReqOutput | fieldOutput,
		EventFailed:         fieldType | fieldTs | fieldArrival | fieldFirstToken,
		EventExpired:        fieldType | fieldTs | fieldArrival | fieldFirstToken,
	}
)

// Event is one decoded line of POST /v1/events. Timestamps are Unix
// nanoseconds; token counts are tokens. Fields a type does not use are 0.
type Event struct {
	Type EventType
	// TsNs is when the event happened on the router's clock.
	TsNs int64
	// ArrivalNs is when the request's offer started. For "sized" it
	// defaults to TsNs.
	ArrivalNs int64
	// FirstTokenNs is when the first token was produced; 0 for none.
	FirstTokenNs          int64
	EstInputTokens        int64
	InputTokens           int64
	RequestedOutputTokens int64
	OutputTokens          int64
	// Engine is the engine id ("admitted" only).
	Engine string

	has uint16
}

// Has reports whether the named wire field was present on the line.
func (e *Event) Has(field string) bool {
	for _, f := range fieldNames {
		if f.name == field {
			return e.has&f.bit != 0
		}
	}
	return false
}

// Sentinel errors for refused lines; every refusal wraps one of them.
var (
	// ErrMalformed: the line is not one JSON object of the schema's
	// value types.
	ErrMalformed = errors.New("malformed event")
	// ErrUnknownType: "type" names no event type.
	ErrUnknownType = errors.New("unknown event type")
	// ErrUnknownField: a field not in the schema, or not used by the type.
	ErrUnknownField = errors.New("unknown field")
	// ErrMissingField: a field the type requires is absent.
	ErrMissingField = errors.New("missing field")
	// ErrOutOfRange: a token count or timestamp is negative, absurd, or
	// inconsistent with the other timestamps.
	ErrOutOfRange = errors.New("value out of range")
	// ErrClockSkew: ts_ns is too far in the past or future of the
	// server's clock.
	ErrClockSkew = errors.New("timestamp outside the accepted window")
	// ErrLineTooLong: the line exceeds the configured line limit.
	ErrLineTooLong = errors.New("line too long")
	// ErrRejected: the core refused the event (e.g. unknown engine).
	ErrRejected = errors.New("rejected by core")
)

// fieldError names the field and the problem.
func fieldError(sentinel error, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", sentinel, field, fmt.Sprintf(format, args...))
}
