// Package actuate carries the controller's moves out on Kubernetes: it
// implements controller.Actuator by draining the engine's pod, optionally
// calling the engine's role-switch endpoint, and patching the pod's
// narwhal.io/role label, then reports back through a MoveDone callback
// (normally (*core.Core).MoveDone).
//
// One move, in order:
//
//  1. check the pod's narwhal.io/role label still equals Move.From
//     (ErrRoleMismatch otherwise: someone else moved it);
//  2. annotate narwhal.io/draining=true, so routers stop sending new work
//     to the engine;
//  3. poll a DrainCheck (e.g. ResidentDrained over the core's engine
//     table, fed by the agent) every DrainPoll until it reports no
//     resident work, or DrainTimeout passes;
//  4. if the pod carries narwhal.io/role-switch-url, POST
//     {"role": "<to>", "from": "<from>"} to it and require a 2xx;
//  5. in one JSON patch set narwhal.io/role=<to> and remove the draining
//     annotation; routers watching the label now send the new role's work.
//     The patch tests the pod's UID and that the label still says <from>:
//     a pod deleted, recreated under the same name or relabelled by
//     someone else during the drain is left alone (ErrPodChanged);
//  6. call done(engineID, nowNs, nil).
//
// Any failure after step 2 removes the draining annotation again (the
// engine keeps its old role) and calls done with the wrapped error. When
// the engine may already have switched (the switch call got no answer,
// or the relabel failed for another reason than the pod having changed),
// the endpoint is first asked to switch back ({"role": "<from>", "from":
// "<to>"}), so the engine holds the role its label says; an endpoint
// must therefore answer 2xx when it already holds the role asked. A
// refusal (non-2xx) means the engine did not switch: no call follows.
//
// Concurrency: Start may be called from any goroutine; it never blocks on
// the API server or the drain: the move runs in its own goroutine. At most
// one move per engine is in flight (ErrBusy). done is called exactly once
// per accepted move, from the move's goroutine. Close cancels moves in
// flight (each reports ErrClosed) and waits for them.
//
// Allocation contract: not on a request path; moves allocate.
//
// Choices where the spec is silent:
//   - The switch endpoint is called before the label flips, so no router
//     sends new-role work to an engine that has not switched.
//   - A drain that times out aborts the move by default (resident work is
//     never cut off); Config.SwitchOnDrainTimeout proceeds instead.
//   - Pod patches are retried on transient API errors (429, 5xx,
//     timeouts, conflicts), at most 6 tries over about 1.5 s: the patch
//     that clears the draining mark is the only thing that ever clears
//     it, and a drained move should not fail on one refused write.
//   - Defaults: DrainTimeout 5 min, DrainPoll 1 s, SwitchTimeout 10 s.
package actuate
