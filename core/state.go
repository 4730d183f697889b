package core

import (
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

// State is the core's introspection (GET /v1/state).
type State struct {
	AtNs          int64                 `json:"at_ns"`
	Engines       []controller.Engine   `json:"engines"`
	Roles         *controller.RoleTable `json:"roles"`
	DemandHistory buckets.DemandHistory `json:"demand_history"`
	Attainment    AttainmentState       `json:"attainment"`
	// LatestDecision is the latest controller decision (nil before the
	// first step); it carries demand_evidence when it evaluated a
	// decode-to-prefill gate.
	LatestDecision *controller.Decision `json:"latest_decision"`
	// DemandEvidence is the most recent demand_evidence captured by any
	// decision, and EvidenceSeq that decision's sequence (0: none yet).
	DemandEvidence *controller.DemandEvidence `json:"demand_evidence"`
	EvidenceSeq    uint64                     `json:"evidence_seq"`
}

// AttainmentState is SLO attainment over the demand window (the boundary
// bucket included), per outcome.
type AttainmentState struct {
	WindowS   float64                   `json:"window_s"`
	CoveredS  float64                   `json:"covered_s"`
	FromNs    int64                     `json:"from_ns"`
	ToNs      int64                     `json:"to_ns"`
	ByOutcome map[string]buckets.Counts `json:"by_outcome"`
}

// State returns the core's state at nowNs.
func (c *Core) State(nowNs int64) State {
	st := State{AtNs: nowNs, Engines: c.ctrl.Engines(), Roles: c.ctrl.Roles(), DemandHistory: c.demand.Snapshot()}
	w := c.att.Window(nowNs-c.windowNs, nowNs)
	st.Attainment = AttainmentState{WindowS: c.cfg.DemandWindowS, CoveredS: c.att.CoveredS(nowNs), FromNs: w.FromNs, ToNs: w.ToNs,
		ByOutcome: make(map[string]buckets.Counts, buckets.NumOutcomes)}
	for o := buckets.Outcome(0); o < buckets.NumOutcomes; o++ {
		st.Attainment.ByOutcome[o.String()] = w.ByOutcome[o]
	}
	if d, ok := c.ctrl.Latest(); ok {
		st.LatestDecision = &d
	}
	if ev, seq, ok := c.ctrl.LatestEvidence(); ok {
		st.DemandEvidence, st.EvidenceSeq = &ev, seq
	}
	return st
}
