// Package service is narwhal-core's HTTP service: the core facade behind an
// HTTP API for routers not written in Go, plus the agents' ingest endpoint.
//
// # Endpoints
//
//	POST /v1/events         NDJSON lifecycle events (routers' bearer token, auth.token)
//	POST /v1/agent/reports  core/wire batches from narwhal-agent (agents' bearer token, auth.agent_token; core/fleet)
//	GET  /v1/roles          the role table, with an ETag: If-None-Match answers 304 while it is
//	                        unchanged, and with Prefer: wait=N (N ≤ 60 s, below http.write_timeout_s)
//	                        waits for a change (roles.go)
//	GET  /v1/state          the facade's State(now)
//	GET  /v1/decisions      the journal: ?limit=N (1..1000, default 100) the newest N, oldest
//	                        first; ?since=<seq>&limit=N up to N after seq (exclusive), to page forward
//	GET  /metrics           Prometheus: the core's collectors, narwhal_fleet_*, narwhal_http_*,
//	                        narwhal_build_info, narwhal_engine_role/state, narwhal_slo_*, Go and process
//	GET  /                  the status page (package ui; assets under /ui/, series at /ui/api/series)
//	GET  /healthz           the process is up and can record (503 while the clock is behind the
//	                        demand history by more than the demand window, see core.Core.Stuck)
//	GET  /readyz            journal and checkpoint writing, and fresh agent data (or agents.required=false)
//	POST /v1/demand/deltas  with kubernetes.enabled: routers' demand deltas (bearer token; 409 on a follower)
//
// pprof is served only on admin_listen (off by default), never on the API
// listener. With extproc.listen set, a gRPC listener serves Envoy's ext_proc
// filter (routers' bearer token as "authorization" metadata): the requests a
// gateway proxies are reported as their events would be (package
// service/extproc).
//
// # Event schema (POST /v1/events)
//
// The body is newline-delimited JSON: one flat object per line, blank lines
// ignored. Every event has "type" and "ts_ns" (when it happened, Unix ns on
// the router's clock). Per type (required, [optional]):
//
//	offer_started    ts_ns                                    -> OfferStarted(ts)
//	offer_abandoned  ts_ns                                    -> OfferAbandoned(ts)
//	sized            ts_ns est_input_tokens [arrival_ns=ts_ns requested_output_tokens=0]
//	                                                          -> OfferSized(arrival, est, req_out)
//	tokenized        ts_ns arrival_ns est_input_tokens input_tokens [requested_output_tokens=0]
//	                                                          -> Tokenized(arrival, est, input, req_out)
//	admitted         ts_ns engine input_tokens [requested_output_tokens=0]
//	                                                          -> Admitted(ts, engine, input, req_out)
//	refused          ts_ns [arrival_ns]                       -> Refused(ts); with arrival_ns (the request
//	                                                             was sized) RefusedSized(ts, arrival)
//	first_token      ts_ns arrival_ns                         -> FirstToken(ts, arrival)
//	completed        ts_ns arrival_ns first_token_ns output_tokens [requested_output_tokens=0]
//	                                                          -> Completed(ts, arrival, first_token, req_out, output)
//	failed, expired  ts_ns arrival_ns [first_token_ns=0]      -> Failed/Expired(ts, arrival, first_token)
//	                                                          (expired also for a request whose client
//	                                                             went away: a timeout, a closed stream)
//
// Example:
//
//	{"type":"sized","ts_ns":1764450000000000000,"est_input_tokens":812,"requested_output_tokens":256}
//
// A line is refused (and changes nothing) when it is not exactly one JSON
// object; a field is unknown, duplicated, or not used by its type; a
// required field is missing; an integer field holds anything but an integer
// that fits int64 (floats, exponents, NaN, strings, null are refused); a
// token count is negative or above events.max_tokens; ts_ns is not
// positive, more than events.max_past_s before or events.max_future_s after
// the server's clock; arrival_ns is after ts_ns or more than
// events.max_request_s before it; first_token_ns is nonzero and outside
// [arrival_ns, ts_ns], or zero on a completed event with output tokens;
// engine is empty, longer than 253 bytes, or holds invalid UTF-8 or control
// characters; the line is longer than http.max_line_bytes; or the core
// refuses the call (an admitted event naming an engine the core does not
// know gives ErrUnknownEngine).
//
// Lines are applied in order, one by one; a batch is not atomic. The reply
// (JSON, IngestReply) counts accepted and refused lines, lists accepted
// lines as ranges and each refused line with its reason (the first 1000).
// Status: 200 when every line was accepted, 422 when at least one was
// refused (the others were applied; a line stamped more than
// core.future_tolerance_s ahead of the server's clock is refused with
// "timestamp ahead of the core's clock" and counted in
// narwhal_core_evidence_ahead_refused_total), 413 when the body exceeds
// http.max_body_bytes (nothing applied), 401 for a missing or wrong
// token (nothing applied), 405 for other methods. With an Idempotency-Key
// header (see below): 400 for a malformed key, 409 while a request with
// the key is being applied, 422 with only an "error" field (no
// "accepted") when the key came with another body; none applies anything.
//
// # Configuration
//
// Config is read by Load: defaults, then the YAML file (--config or
// NARWHAL_CONFIG; unknown fields are errors), then NARWHAL_<PATH>
// environment variables, then --<path> flags, e.g. core.step_s is
// `core: {step_s: 1}`, NARWHAL_CORE_STEP_S=1 or --core.step_s=1. The core
// section is the facade's core.Config. Validation errors name the field by
// its path, the value and the rule ("core.step_s must be > 0 and <=
// 31536000, got -1"). data_dir holds the decision journal, a write-ahead
// log (journal.jsonl, rotated past journal.max_segment_bytes into
// journal-<seq>.jsonl, journal.keep_segments kept), and state.json, a
// checkpoint carrying the journal sequence it includes (see
// controller.OpenJournal): after any crash the state is the checkpoint
// plus the journal records after it. A failing journal write or
// checkpoint is retried every journal.retry_s and fails /readyz until it
// succeeds (narwhal_journal_write_errors_total,
// narwhal_state_save_errors_total); meanwhile a decision's moves wait
// for its record (their engines draining), so a full disk never shows a
// role the journal lacks (service/diskfull runs this on a real tmpfs).
//
// # Kubernetes (kubernetes.enabled)
//
// With kubernetes.enabled the replica is one of N behind a Lease
// (package service/kube: kube.NewServer, or kube.New + CoreOptions + Bind;
// cmd/narwhal-core builds the in-cluster client). This package loads and
// validates the section but links no Kubernetes client (a router that
// embeds the service without a cluster, and the fuzz targets over its
// inputs, build without client-go). The kubernetes section is
// k8s/clusterconfig.Config inline plus demand_url (default
// http(s)://narwhal-core-leader.<namespace>.svc:<listen port>/v1/demand/deltas)
// and ship_every_s (default 2); namespace and pod_name default to
// POD_NAMESPACE and POD_NAME. The section is validated only when enabled.
//
//   - The core is built with the cluster's pod actuator and with
//     core.WithDemandReaders over a k8s/demandmerge.Store: the controller
//     steps on the merged arrivals and outputs of every replica. Pending
//     unsized offers and observed TTFT/TPOT pressure stay the leader's
//     own; /v1/state shows the replica's own demand.
//   - Serve does not run the core's control loop; it runs cluster.Run
//     (discovery from pods, election; the leader restores the state from
//     the ConfigMap, steps, saves after every decision, drains and
//     relabels pods) and a loop that ships this replica's own closed
//     buckets (demandmerge.Exporter over Core.Demand and Core.Attainment)
//     to demand_url every ship_every_s, with the service's bearer token.
//   - POST /v1/demand/deltas applies deltas to the store on the leader
//     and answers 409 on a follower. Metrics add narwhal_leader_*,
//     narwhal_k8s_* and narwhal_demand_merge_*.
//   - Static engines (engines:) and data_dir still work, but the engines
//     normally come from pods and the state from the ConfigMap (the
//     ConfigMap's state wins when a term starts).
//
// # Limits and credentials
//
// Defaults fit the shipped 1 Gi memory limit (measured in
// benchmarks/README.md): http.max_connections=4096 open connections (one
// beyond is answered 503 and closed at once; lowered at start to keep 256
// descriptors of RLIMIT_NOFILE for the journal and checkpoint, so
// persistence keeps working however many clients connect);
// http.max_inflight_body_bytes=128 MiB of write bodies read at once (each
// request reserves its Content-Length, or max_body_bytes=8 MiB when
// unknown, after authentication; one that does not fit gets 503 with
// Retry-After: 1 and nothing is applied, and over HTTP/1 its body is then
// read into nothing up to that reservation, within read_timeout_s, so
// that a client still sending sees the 503 instead of a reset; not after
// "Expect: 100-continue", whose client sends no body then);
// http.idle_timeout_s=30 for idle
// keep-alive connections. Routers and agents hold different tokens
// (auth.token, auth.agent_token; they must differ): the routers' token
// cannot overwrite an engine's KV capacity or liveness, and the agents'
// token cannot write events. A token comes from auth.*_file or the
// environment (NARWHAL_AUTH_TOKEN, NARWHAL_AUTH_AGENT_TOKEN); a flag
// carrying one is refused (it would show in the process list). The
// Bearer scheme is matched case-insensitively. A token file holds one
// token per line, each accepted, and is read again every
// auth.token_reload_s=10, so a rotated Secret is taken without a restart:
// list the new token above the old, move the writers over, then drop the
// old line (docs/operator.md). A reload that is unreadable, empty or
// shares a token with the other file keeps the tokens accepted before
// (narwhal_auth_token_reloads_total{result="error"}). With tls.cert_file
// and tls.key_file the API listener speaks TLS 1.2 or later; the pair is
// read again every tls.reload_s=10, and new connections get a renewed
// certificate (cert-manager renews into the same Secret); a pair that
// does not load keeps the one served (narwhal_tls_reloads_total,
// narwhal_tls_certificate_not_after_seconds, alert
// NarwhalTLSCertificateExpiring). agents.max_nodes=4096 and
// agents.max_engines=16384 bound the registry; a node silent for
// agents.forget_after_s=600 is forgotten, and so (without
// kubernetes.enabled) is an engine no agent has listed and that has not
// been live for as long, unless the engines list names it; an epoch more than
// agents.max_epoch_ahead_s=600 ahead of the core's clock is refused.
//
// # Choices where the spec is silent
//
//   - Unknown fields are refused, not ignored: a misspelt field would
//     otherwise silently drop data. The schema is versioned by the /v1 path.
//     Field names and the type value must be written plainly (no \u
//     escapes); engine ids may use any JSON escape.
//   - Timestamps are checked against the server's clock only for ts_ns;
//     arrival_ns and first_token_ns are checked against ts_ns, so a long
//     request's completion is accepted while a replayed stale batch is not.
//   - The token is compared as SHA-256 digests with
//     crypto/subtle.ConstantTimeCompare, so neither content nor length
//     leaks through timing. With no token configured, writes are refused
//     at start-up unless auth.allow_unauthenticated is set.
//   - Retries: events carry no request id, so a batch resent after a
//     lost answer (a timeout, a router restart, a proxy's retry) was
//     counted twice. A POST /v1/events may carry Idempotency-Key
//     (draft-ietf-httpapi-idempotency-key-header): one header line,
//     1..255 printable ASCII bytes, bare or as a structured-field string
//     ("..."), else 400. The first request with a key applies the batch
//     and keeps the key, the body's SHA-256 (never the body) and the
//     answer. A repeat with the same body gets that status and JSON again
//     with Idempotent-Replayed: true and applies nothing
//     (narwhal_events_replays_total); with another body it gets 422, and
//     while the first is being applied 409 (Retry-After: 1); neither
//     applies anything. A request without the header is handled as
//     before: resent, it is applied again. A key is kept
//     events.idempotency_retention_s after
//     its first request (0, the default: events.max_past_s +
//     events.max_future_s, so a retry after the key expired is refused
//     line by line as too old instead of counted twice), within
//     events.idempotency_max_keys and 32 MiB of keys and answers (the
//     oldest applied keys go first, counted in
//     narwhal_events_idempotency_keys_dropped_total; their retries are
//     applied again). Keys live in the replica's memory: a retry after a
//     restart, or one that reaches another replica, is applied again.
//     /v1/events has one principal, the routers' token (auth.token,
//     shared by every router; the agents' token cannot write events), so
//     keys share one namespace: a router uses a fresh random key (a UUID)
//     per batch and reuses it only to resend the same bytes.
//   - Skewed router clocks: events carry no request id, so each event is
//     measured on its own stamps. TTFT and TPOT are differences of one
//     event's arrival_ns, first_token_ns and ts_ns, so the router that
//     sends a request's first_token, completed, failed or expired event
//     must stamp its arrival on the same clock (in practice: a request's
//     events come from the router that received it). A later event from
//     a router behind the arrival's clock lies before arrival_ns and is
//     refused; one from a router ahead is accepted with the skew added to
//     its TTFT. Each router's events land at its own stamps: one d behind
//     keeps its demand in the window d less long; one ahead by more than
//     core.future_tolerance_s (default one demand bucket, 1 s) is refused
//     however much events.max_future_s allows, so the effective future
//     limit is the smaller of the two. A clock stepped back within the
//     demand window loses nothing; past it, records are refused until the
//     clock catches up (core: Stuck), and a request in flight across a
//     step back has a completion stamped before its arrival, refused.
//     Both limits are inclusive: ts_ns exactly max_past_s before or
//     max_future_s after the server's clock is accepted.
//   - Static engines (engines: in the config file) are registered only if
//     the core does not know them yet, and a configured role is only the
//     initial role: when data_dir's saved state knows the engine, the saved
//     role (and last move time) wins, so a restart keeps the controller's
//     moves, cooldown and dwell.
//
// # Concurrency
//
// Server and Ingest are safe for concurrent use; requests run on net/http's
// goroutines and call the core concurrently (the facade is concurrency
// safe). Serve runs the control loop and the agent staleness sweep on their
// own goroutines and stops them before closing the core.
//
// # Allocation
//
// Decoder.Decode allocates nothing for a valid line whose engine name it has
// seen before (interned; tested with testing.AllocsPerRun). A batch costs a
// pooled body buffer, the reply, and one error string per refused line.
// A request without Idempotency-Key allocates nothing for the key (one
// header map lookup; tested); a keyed one adds the key, its entry and the
// encoded answer the store keeps.
package service
