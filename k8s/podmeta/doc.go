// Package podmeta is the contract between Narwhal and the engine pods'
// metadata: the labels and annotations Narwhal reads to discover an engine
// and writes to move it, and the functions that turn a Pod into a
// controller.Engine.
//
// Labels (selectable, hence short values):
//
//	narwhal.io/role       prefill | decode   the engine's current role; written by the actuator, watched by routers
//	narwhal.io/engine-id  engine id          optional; default: the pod name
//	narwhal.io/model      model              optional; the annotation of the same name wins
//	narwhal.io/gpu        GPU kind           optional, e.g. H100; the annotation of the same name wins
//
// Annotations (free-form values):
//
//	narwhal.io/model            full model name, e.g. meta-llama/Llama-3.1-8B-Instruct
//	narwhal.io/gpu              GPU kind
//	narwhal.io/draining         "true" while the actuator drains the pod before a role switch
//	narwhal.io/role-switch-url  optional URL the actuator POSTs {"role": "<new role>"} to
//
// Concurrency: every function is pure and safe for concurrent use.
//
// Allocation contract: not on a request path; EngineFromPod allocates.
//
// Choices where the spec is silent:
//   - An engine is live when its pod is Running, Ready and not being
//     deleted; the node is the pod's spec.nodeName.
//   - A pod without a valid narwhal.io/role label is not an engine
//     (ErrNoRole): the controller cannot place an engine with no role.
//   - A pod carrying narwhal.io/draining=true is reported not live (it
//     takes no new work on any replica); the row's state is always
//     serving, because the move state (draining, switching, target role)
//     is owned by the leader's controller, which keeps it across upserts
//     of a serving row.
package podmeta
