// Package core is Narwhal's embeddable Go API: what a router (or the
// narwhal-core service, or the simulator) calls on every step of a
// request's life, what agents call with engine residency, and the
// controller step that moves engines between the prefill and decode roles.
//
// # Request lifecycle
//
// OfferStarted (body being read) → OfferSized (local estimate, e.g. body
// bytes / 4, with the requested output) or OfferAbandoned → Tokenized
// (exact input, repriced at the original arrival) → Admitted (an engine
// from Roles) or Refused → FirstToken → Completed, Failed or Expired.
// Every timestamp is an int64 Unix-nanosecond parameter.
//
// # Observed phase pressure (our choice where the spec is silent)
//
// Observed prefill pressure is the mean of TTFT / TTFT SLO over the short
// horizon (min_evidence_span_s), recorded by FirstToken. Observed decode
// pressure is the mean of TPOT / TPOT SLO over the same horizon, where
// TPOT = (completion − first token) / (output tokens − 1), recorded by
// Completed for requests with at least two output tokens. The controller
// falls back to them (and to recovery_prefill_ratio) when demand is
// incomplete; with complete demand it uses the observed TPOT to calibrate
// its decode model (decode correction).
//
// Attainment: Completed counts TTFT met when first token − arrival <= TTFT
// SLO and TPOT met when TPOT <= TPOT SLO (always met with one output
// token); Failed and Expired count TTFT met when a first token came in time
// and TPOT never met; Refused counts neither.
//
// # Concurrency
//
// Every method is safe for concurrent use. The per-request calls write
// lock-free bucket structures; Roles is an atomic pointer load. Step calls
// are serialized with each other and with Close.
//
// # Allocation
//
// The per-request calls (OfferStarted … Expired) and Roles do not
// allocate, including when they refuse input (errors are pre-built and
// wrap ErrInvalidInput or ErrUnknownEngine). Step, State, Decisions and
// the engine calls allocate.
//
// # Time
//
// Nothing here reads the wall clock except Run, which calls Step every
// step_s with time.Now. Scrape-time attainment metrics use the time of the
// latest Step.
package core
