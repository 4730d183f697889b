// Package leader elects one narwhal-core replica as the controller's leader
// with a Kubernetes Lease (client-go tools/leaderelection, Lease lock).
//
// Every router replica embeds a core and keeps ingesting demand and serving
// the read API; only the replica holding the Lease lets its controller
// decide and actuate. The elector campaigns again after it loses the lease,
// so a replica that was briefly partitioned becomes a follower rather than
// exiting.
//
// Concurrency: Run blocks until its context ends and must be called once.
// IsLeader and Leader may be called from any goroutine at any time; they
// are lock-free loads. onStartedLeading runs in its own goroutine with a
// context that is cancelled when leadership ends; onStoppedLeading runs
// after that context is cancelled, once per lost term, and only for terms
// that started.
//
// Allocation contract: IsLeader does not allocate. Election itself talks to
// the API server and allocates freely; it is not on any request path.
//
// Choices where the spec is silent:
//   - The lease is never released on shutdown by default (ReleaseOnCancel
//     false): a leader whose context ends may still have an actuation in
//     flight, so the successor waits out the lease instead of racing it.
//     Config.ReleaseOnCancel turns release on for orderly rollouts.
//   - IsLeader is true only between the start and the end of a term as
//     reported by client-go's callbacks, not whenever the last observed
//     record names this identity (client-go's own IsLeader keeps answering
//     true after its context is cancelled).
//   - Durations default to 15 s lease, 10 s renew deadline, 2 s retry, the
//     values Kubernetes' own controllers use.
package leader
