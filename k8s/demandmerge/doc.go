// Package demandmerge merges the demand and SLO-attainment history of many
// router replicas (each embedding a core) into one view for the leader's
// controller.
//
// Router side: an Exporter reads its core's closed buckets through the
// public window query of core/buckets (a one-bucket window per bucket)
// and builds a Delta: a snapshot of every closed bucket whose content
// changed since the last acknowledged delta (a repricing after tokenization
// can change a bucket after it closed, so a bucket may be sent again).
// Each Delta is tagged with the router id, the router's epoch (process
// incarnation) and a sequence number.
//
// Leader side: a Store applies deltas. It keeps, per (router, epoch,
// bucket), the snapshot with the highest sequence number, so a replayed,
// duplicated or reordered delta is applied once and an older snapshot
// never overwrites a newer one; snapshots of different routers and of
// different epochs of one router add up. Each merged bucket follows the
// seed's rules: counts of one shape add; if more than 128 distinct shapes
// result, the 128 most frequent (ties: smaller shape first) stay exact and
// the rest spill into the overflow cohort, which keeps every count and is
// priced by its largest input and largest output; a spilled zero output
// marks decode demand incomplete; a bucket invalidated in any router stays
// invalid. The choice of exact shapes depends only on the content, never
// on arrival order.
//
// Transport: Handler (leader) accepts POSTed JSON deltas, answering 409
// on a follower; Ship (router) posts Next's delta (or a heartbeat) every
// period and acknowledges it. Every answer names the receiving store's
// instance: a new leader starts with a new, empty store, and a router that
// sees the instance change resends every bucket it retains (the resent
// snapshots are idempotent), so a failover loses no retained demand.
//
// Store.History(kind) and Store.Attainment() answer Window, Evidence and
// CoveredS with the semantics of buckets.History and buckets.Attainment
// (boundary bucket whole, retention from the newest bucket, evidence only
// from buckets wholly after the cutoff and not invalidated), so a
// KindView satisfies controller.HistoryReader.
//
// Why snapshots rather than increments: a snapshot is idempotent, so
// at-least-once delivery with retries is enough; increments would need
// exactly-once delivery. A snapshot is at most 128 cells, and only changed
// closed buckets are sent.
//
// Concurrency: a Store is safe for concurrent use (Apply takes a write
// lock; the views take a read lock). An Exporter is used by one goroutine.
//
// Allocation contract: nothing here is on the per-request path. The
// exporter runs once per shipping period, Apply once per received delta;
// both allocate. KindView.Window does not allocate given a dst of enough
// capacity.
//
// Choices where the spec is silent:
//   - Buckets more than one retention behind the merged newest bucket are
//     dropped as stale; buckets more than 24 h ahead of it as far (the
//     single-core ring's bound); with the leader's clock (Config.NowNs,
//     which the service sets) buckets starting more than
//     FutureToleranceNs after it (the service: events.max_future_s) are
//     refused as ahead, the merged store's form of the core's own rule,
//     so one router whose clock runs ahead cannot move the merged newest
//     bucket and leave every other router's buckets stale.
//   - Exporter.Next(closedBeforeNs) scans the demand histories from their
//     newest bucket, and attainment back one retention from
//     closedBeforeNs (buckets.Attainment exposes no newest bucket); pass
//     the current time.
//   - This package sits under k8s/ but imports no client-go: core/ may not
//     import it, so the leader wires a KindView into its controller from
//     the service.
package demandmerge
