// Package discover finds engines from Kubernetes pods selected by a label
// selector and keeps a sink's engine table (normally *core.Core) in step:
// a new or changed pod upserts its engine, a deleted pod (or one that
// loses its role label or leaves the selector) removes it.
//
// What a pod's labels and annotations mean is defined in k8s/podmeta.
// Every replica runs a Discoverer, so followers learn role changes made by
// the leader's actuator through the narwhal.io/role label: that is how
// routers "watch the labels".
//
// Concurrency: Run drives one informer and calls the sink from the
// informer's single handler goroutine; Resync waits for the handler (and
// the handler for it), so sink calls are serialized. The query methods
// (Engines, PodFor, Len, HasSynced) are safe from any goroutine.
//
// Allocation contract: not on a request path; events and queries
// allocate.
//
// Choices where the spec is silent:
//   - Two pods claiming one engine id: the first keeps it, the second is
//     ignored with a warning until the first goes away; then the second
//     takes the id over at once (from the informer's cache: it may have
//     no event of its own to come). A pod relabelled to an id another pod
//     holds releases the id it had and waits the same way.
//   - Sink errors are logged and counted
//     (narwhal_k8s_discovery_sink_errors_total); the next event for that
//     pod tries again, and so does the informer's resync when
//     Config.ResyncPeriod sets one (the core's cluster wiring sets none:
//     the core refuses an engine for what the pod says, which a resync
//     would not change).
//   - A pod whose role label is missing or invalid is treated as absent.
//   - Discovery owns id, node, model, GPU, role and liveness (pod Running,
//     Ready, not deleting, not draining). When the sink implements
//     EngineLister, residency, KV capacity and last move time are carried
//     over from the sink's row, so a pod event does not zero what the
//     agent reported. The agent's liveness reports still override Live
//     between pod events.
//   - A pod event that changes nothing discovery owns is not passed on.
//     A sink whose rows were changed by someone else (a controller that
//     restored a saved state: k8s/cluster at the start of a leadership
//     term) calls Resync, which upserts every engine again as its pod
//     last said.
package discover
