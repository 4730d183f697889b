package service

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/controller"
)

// EventSink is the request-lifecycle half of the core facade: one call per
// event type of POST /v1/events. *core.Core satisfies it.
type EventSink interface {
	OfferStarted(nowNs int64)
	OfferAbandoned(nowNs int64) error
	OfferSized(arrivalNs, estInput, reqOutput int64) error
	Tokenized(arrivalNs, estInput, exactInput, reqOutput int64) error
	Admitted(nowNs int64, engineID string, input, reqOutput int64) error
	Refused(nowNs int64) error
	RefusedSized(nowNs, arrivalNs int64) error
	FirstToken(nowNs, arrivalNs int64) error
	Completed(nowNs, arrivalNs, firstTokenNs, reqOutput, outputTokens int64) error
	Failed(nowNs, arrivalNs, firstTokenNs int64) error
	Expired(nowNs, arrivalNs, firstTokenNs int64) error
}

// Core is the subset of *core.Core the service calls. Tests substitute a
// fake; production passes the facade itself.
type Core interface {
	EventSink
	UpsertEngine(e controller.Engine) error
	UpdateEngine(id string, nowNs int64, res controller.Resident, kvCapacityTokens int64, live bool) error
	Engines() []controller.Engine
	Roles() *roleTable
	Step(nowNs int64) decision
	Run(ctx context.Context) error
	State(nowNs int64) coreState
	Decisions(sinceSeq uint64, limit int) []decision
	Collectors() []prometheus.Collector
	Close() error
}
