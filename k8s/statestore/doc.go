// Package statestore keeps the controller's state in a Kubernetes
// ConfigMap so that a newly elected leader continues from where the last
// one stopped: roles, last move times and pending confirmations, hence
// cooldown and dwell, survive a failover.
//
// The store is deliberately opaque: Save writes a named blob, Load reads
// it back. The controller (core/controller) owns the encoding; the
// wiring code passes its serialized state here on every decision and
// restores it when a term starts.
//
// Concurrency: a Store is safe for concurrent use. Save is a
// read-modify-write of one ConfigMap retried on conflict, so concurrent
// saves of different keys both land and concurrent saves of one key leave
// one of the values whole. With a fence (WithFence) a replica that is no
// longer leader gets ErrFenced instead of overwriting its successor's
// state; the fence is checked before every write attempt, which narrows
// but cannot close the window in which a deposed leader writes (Kubernetes
// has no conditional write on a Lease; cooldown and dwell are monotonic so
// one stale write delays, never hastens, a move).
//
// Allocation contract: not on a request path; Save and Load allocate.
//
// Choices where the spec is silent:
//   - A blob that is valid UTF-8 is kept in the ConfigMap's data (readable
//     with kubectl), anything else in binary_data; Load reads either.
//   - Blobs over MaxBlobBytes are refused with ErrTooLarge (a ConfigMap
//     holds at most 1 MiB in all).
//   - Keys must be valid ConfigMap keys ([-._a-zA-Z0-9]+, at most 253).
//   - Each save stamps the annotation narwhal.io/state-saved-by with the
//     writer's identity, for operators.
package statestore
