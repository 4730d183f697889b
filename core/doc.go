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
// from Roles) or Refused (RefusedSized once sized) → FirstToken → Completed, Failed or Expired.
// Every timestamp is an int64 Unix-nanosecond parameter. A request whose
// client went away before its last token (a proxy's or an SDK's timeout,
// a closed stream) is Expired, with its first token's time if one came:
// it missed its SLOs at the client's deadline, not by an engine's fault
// (the simulator's --client-timeout reports its cancellations so).
//
// # Pending offers (our reading of "request bodies still being read")
//
// demand_history.unsized.pending counts OfferStarted calls not yet ended.
// An offer ends with OfferSized (whether or not its values are accepted:
// the body has been read), OfferAbandoned, Refused (a request refused
// before it was sized; a refusal after OfferSized is RefusedSized, which
// ends none: the sized call did), or, when none of them comes (a router that
// crashed mid-body), at the first Step at least pending_timeout_s after a
// step that saw it started; the narwhal-core service sets the timeout from
// events.pending_timeout_s, by default its own body read timeout, after
// which the body is not being read by anyone. A timed-out offer counts as
// an unsized observation at that step (narwhal_core_pending_offers_expired_total).
// Offers carry no identity, so an end is matched to the oldest pending
// offer, and under traffic the ends of other routers' offers are matched
// to the crashed router's one. So the timeout ends, of the offers pending
// at the step it measures from, those still pending by that matching, and
// at least as many as were pending at every step since (at most all
// pending): an offer counted at every step of a whole timeout is gone,
// even when the ends of newer offers were credited to it. A body read that
// itself spans every step of pending_timeout_s is ended too (by default
// the service's read timeout has ended it already).
//
// # Observed phase pressure (our choice where the spec is silent)
//
// Observed prefill pressure is the mean of TTFT / TTFT SLO over the short
// horizon (min_evidence_span_s), recorded by FirstToken, and by Expired for
// a request that got no first token and waited past the TTFT SLO (its
// wait / TTFT SLO, a lower bound of its TTFT: where clients give up, the
// requests that were served are the lucky ones). Observed decode
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
//
// Histories expire only from recorded evidence (the spec's "pruning
// advances from the newest recorded bucket"): Step and Run never advance
// them, however late the step; a step reads windows that end at its time.
//
// The core's clock is WithClock's (SetClock; the service passes its own),
// else the wall clock once Run starts, else the latest Step's time plus
// one step_s (the next step's due time), and nothing before the first
// Step. A record stamped more than future_tolerance_s (default one demand
// bucket) after it is refused with ErrAheadOfClock, records nothing, and
// is counted (AheadRefused, narwhal_core_evidence_ahead_refused_total):
// what is refused cannot move the newest bucket and expire a window. The
// check is one load and a compare; the clock is read only when a
// timestamp passes its last reading plus the tolerance.
//
// A clock that steps back: histories only move forward (expiry is exact
// and lock-free because a ring's epochs never decrease), so a record
// older than a history's retention is refused. Within the demand window
// the records land in buckets already seen and nothing is lost. Past it
// every record is refused until the clock catches up; each Step keeps how
// far the newest arrivals bucket lies after it (ClockBehindNs,
// narwhal_core_clock_behind_history_seconds), and Stuck reports it past
// the demand window (narwhal_core_clock_stuck, which the
// NarwhalClockBehindHistory alert reads, so the alert needs no copy of
// the window), logged once as an error. The core does not rewrite
// its histories' timeline itself (the Kubernetes demand store merges
// every router's histories by their timestamps, which a private offset
// would shift): a restart records at once, the controller's roles and
// move times coming back from its state (a saved time up to a day ahead
// is read as the first step's time), and the service's /healthz fails
// while Stuck so that the kubelet restarts it.
package core
