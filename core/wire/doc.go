// Package wire defines the JSON messages that narwhal-agent streams to the
// core (and that core/fleet applies): hello, snapshot, liveness event and
// heartbeat. Every message carries the node name, the node epoch and a
// sequence number, so the receiving side can refuse stale and out-of-order
// reports.
//
// Transport: the agent POSTs a Batch (one or more Reports, oldest first) to
// the core's ingest endpoint (/v1/agent/reports) with
// "Authorization: Bearer <token>" over one keep-alive connection; the core
// answers with an Ack. A Batch is the unit of retry: the agent resends
// unacknowledged reports after a reconnect, and the core refuses the ones it
// has already applied by their sequence numbers.
//
// Epoch and sequence: the epoch identifies one run of the agent (its start
// time in Unix ns, so a restart gives a larger one); the sequence number
// starts at 1 in every epoch and grows by one per report. Gaps are allowed
// (the agent's bounded queue drops the oldest reports when the core is
// unreachable); going backwards is not.
//
// Concurrency: the types are plain values; Validate is pure.
// Allocation: Validate allocates only for the error it returns.
package wire
