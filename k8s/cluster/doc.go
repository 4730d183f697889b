// Package cluster wires the Kubernetes pieces around one narwhal-core
// replica (a router with an embedded core, or the narwhal-core service):
// engine discovery from pods (k8s/discover), leader election on a Lease
// (k8s/leader), controller state in a ConfigMap (k8s/statestore) and pod
// actuation (k8s/actuate).
//
// Every replica discovers engines and serves reads. Only the leader steps
// its controller: when a term starts it restores the controller state
// saved by the previous leader, takes the engines' roles from their pods
// again, labels its own pod narwhal.io/leader=true
// (the narwhal-core-leader Service selects it, e.g. for demand deltas),
// then steps every StepInterval and saves the state after every decision
// and before every move.
// When the term ends it stops stepping and removes the label; Run
// removes it first thing too, so a container that crashed while leading
// and restarted in the same pod does not leave the leader Service
// selecting two pods.
//
// Usage:
//
//	k, _ := cluster.New(client, cfg, logger)
//	c, _ := core.New(coreCfg, core.WithActuator(k.Actuator()))
//	k.Bind(c, c.Controller(), time.Duration(coreCfg.StepS*float64(time.Second)))
//	go k.Run(ctx) // instead of c.Run(ctx)
//
// Concurrency: Bind before Run; Run once. IsLeader from any goroutine.
//
// Allocation contract: nothing here is on a request path.
//
// Choices where the spec is silent:
//   - A state that cannot be read because the API server fails is
//     retried every RetryPeriodS while the term lasts, and the leader does
//     not step until it has it: deciding without it could break cooldown
//     and dwell. A state that cannot be decoded is logged and ignored.
//   - A move starts on the pods only once the state that records it (the
//     decision's sequence, the cooldown, the engine in its target role)
//     is saved: otherwise the step's save could land after the relabel,
//     or never, and a leader dying in between left a state without the
//     move; the next leader then reused the decision's sequence and moved
//     again inside the cooldown. A save that fails refuses the move (the
//     controller puts the engine back; the cooldown the decision started
//     holds).
//   - Moves in flight when a term ends are not cancelled: the pod patches
//     are idempotent and conditional on the pod's role label.
//   - The pod's role label, not the saved state, gives an engine's role
//     when a term starts: right after the restore (which gives a moving
//     engine its target role) the leader waits for discovery's first
//     list and upserts every engine again as its pod says
//     (discover.Resync). A leader that died after its decision but before
//     the relabel, or that aborted the move on its way out, left the
//     label at the source role; one that relabelled, the target.
//   - A draining mark (narwhal.io/draining) that an engine pod carries
//     when a term starts, and still carries (same pod UID) once any move
//     an earlier leader started must have ended (drain_timeout_s + 2 ×
//     switch_timeout_s + lease_duration_s + renew_deadline_s), is
//     removed unless this replica is moving that engine: a leader killed
//     mid-move leaves it, and it would keep the engine not live for good.
//     An engine with a role-switch URL is first asked to hold its label's
//     role (the dead leader may have switched it before the relabel); a
//     failed call is logged and the mark removed anyway.
package cluster
