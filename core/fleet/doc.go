// Package fleet applies the agents' reports (core/wire) to the core's engine
// table on the core side.
//
// A Registry keeps, per node, the current epoch, the last applied sequence
// number and when the node last reported (by the core's clock, passed in).
// A report from an older epoch is refused as stale (ErrStaleEpoch); one whose
// sequence number is not above the last applied one in the same epoch is
// refused as a replay or out of order (ErrReplay). A larger epoch is a
// restarted agent: it is accepted and its sequence starts over. An epoch
// more than Limits.MaxEpochAheadNs after the core's clock (epochs are the
// agent's start time in Unix ns) is refused (ErrFutureEpoch) and never
// adopted, so one forged or broken report cannot lock the node's real
// agent out. A lower epoch is accepted once the node is stale (an agent
// restarted with its clock set back).
//
// Reports change the engine table through EngineSink, which *core.Core
// satisfies: UpsertEngine when the registry first sees an engine (or its
// model/GPU kind changes), UpdateEngine for every snapshot and liveness
// event. The agent's role is an initial role only: it goes into the upsert
// of an engine the core does not have yet; for an engine the core already
// has (seen through an optional Engines() method, which *core.Core has)
// the upsert carries RoleNone so the controller's role stands. (After a
// core restart the controller's restored role wins only when the agent
// sends no role; deploy examples leave it empty.)
// Sweep marks every engine of a node that has not reported for staleAfterNs
// as not live, once; the node's next snapshot makes them live again.
//
// Choices where the spec is silent: freshness is judged on the core's
// clock at receipt, never on the agent's (clocks drift); an engine that a
// node stops listing in its snapshots is marked not live (the sink has no
// removal: the service forgets such an engine after agents.forget_after_s,
// asking Listed); an engine id claimed by a second node while the first is fresh
// is refused for the second (ids must be fleet-unique); an empty token
// disables authentication (for tests and loopback only; the service should
// always pass one).
//
// Bounds: at most Limits.MaxNodes nodes (a new one beyond is refused,
// ErrFull) and MaxEngines engines; a node silent for ForgetAfterNs is
// forgotten, so invented node names cost bounded memory that comes back.
// Whether the core already knows an engine is one lookup in its role table
// (O(1) per engine registered).
//
// Concurrency: all methods are safe for concurrent use. Nodes and engine
// owners live in xsync.MapOf maps; each node has its own mutex, held while
// its report is applied (sink calls included), so one node's reports apply
// in order and nodes do not wait for each other. A node never takes
// another node's lock: an engine taken over from a stale node is dropped
// from the old node's record lazily.
// Allocation: ingest is not a hot path (a few reports per node per second);
// it allocates for JSON decoding.
package fleet
