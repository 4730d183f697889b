package controller

// This file holds the controller's public value types that the core facade,
// the service, the simulator and the Kubernetes actuator exchange with it.
// Fields may be added; none may be renamed or removed without updating every
// user.

import "encoding/json"

// Role is the phase an engine serves.
type Role uint8

const (
	RoleNone Role = iota
	RolePrefill
	RoleDecode
)

// String returns "prefill", "decode" or "none".
func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "none"
}

// ParseRole is the inverse of String; ok is false for anything else.
func ParseRole(s string) (Role, bool) {
	switch s {
	case "prefill":
		return RolePrefill, true
	case "decode":
		return RoleDecode, true
	}
	return RoleNone, false
}

// MarshalJSON writes the role's name.
func (r Role) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

// UnmarshalJSON reads a role's name ("" and "none" give RoleNone).
func (r *Role) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" || s == "none" {
		*r = RoleNone
		return nil
	}
	v, ok := ParseRole(s)
	if !ok {
		return &json.UnsupportedValueError{Str: s}
	}
	*r = v
	return nil
}

// EngineState is where an engine is in its role's life.
type EngineState uint8

const (
	// StateServing: takes new work in its role.
	StateServing EngineState = iota
	// StateDraining: chosen to move; takes no new work, finishes its
	// resident work.
	StateDraining
	// StateSwitching: drained, switching to its new role.
	StateSwitching
)

// String returns "serving", "draining" or "switching".
func (s EngineState) String() string {
	switch s {
	case StateDraining:
		return "draining"
	case StateSwitching:
		return "switching"
	}
	return "serving"
}

// MarshalJSON writes the state's name.
func (s EngineState) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Resident is the work already placed on one engine.
type Resident struct {
	// QueuedPrefillS: prefill seconds waiting in the engine's queue.
	QueuedPrefillS float64 `json:"queued_prefill_s"`
	// RunningPrefillS: prefill seconds being computed now.
	RunningPrefillS float64 `json:"running_prefill_s"`
	// DecodeSeqs: sequences resident in decode.
	DecodeSeqs int64 `json:"decode_seqs"`
	// KVTokens: KV cache tokens in use.
	KVTokens int64 `json:"kv_tokens"`
}

// Engine is one row of the engine table.
type Engine struct {
	ID    string      `json:"id"`
	Node  string      `json:"node"`
	Model string      `json:"model"`
	GPU   string      `json:"gpu"` // GPU kind, e.g. "A100-80G", "H100"; with Model selects the profile
	Role  Role        `json:"role"`
	State EngineState `json:"state"`
	Live  bool        `json:"live"`
	// KVCapacityTokens is the physical KV cache limit in tokens (from the
	// agent); 0 means unknown.
	KVCapacityTokens int64    `json:"kv_capacity_tokens"`
	Resident         Resident `json:"resident"`
	// LastMoveNs is when the engine last changed role (Unix ns); 0 never.
	LastMoveNs int64 `json:"last_move_ns"`
	// TargetRole is the role it is moving to while draining or switching.
	TargetRole Role `json:"target_role,omitempty"`
	// TP is the engine's tensor-parallel degree (0 unknown: any profile
	// of the model and GPU; the prior then assumes 1).
	TP int `json:"tp,omitempty"`
}

// Move is one engine changing role.
type Move struct {
	EngineID string `json:"engine_id"`
	From     Role   `json:"from"`
	To       Role   `json:"to"`
	// DecisionSeq is the journal sequence of the decision that made it.
	DecisionSeq uint64 `json:"decision_seq"`
	// AtNs is when the decision made it (Unix ns).
	AtNs int64 `json:"at_ns"`
}

// Actuator carries a move out in the world: drain the engine, switch its
// role, and report back through Controller.MoveDone (synchronously or
// later, from any goroutine). Start must not block on the drain.
type Actuator interface {
	Start(m Move) error
}
