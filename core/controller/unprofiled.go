package controller

// BasisUnprofiled (decision_basis "observed_pressure_unprofiled"): a live
// serving engine has no usable profile (no measured profile and no prior
// for its model, GPU and TP). No latency is predicted: each phase's
// pressure is its observed ratio to the SLO (prefill: the recovery
// ratio, which counts the measured queue) scaled by engine counts
// (n0/n), decode also resident KV over capacity; the profile_coverage
// gate passes. Every other gate holds as on the other bases, so the
// controller moves an engine only once measurements (min_observations
// latencies, a queue, resident KV) say a phase is short, one engine per
// cooldown unless the destination is measured past its SLO.
const BasisUnprofiled = "observed_pressure_unprofiled"

// hasUnprofiled: some live serving engine has no profile.
func (s *Snapshot) hasUnprofiled() bool {
	for i := range s.Engines {
		if e := &s.Engines[i]; e.serving() && !e.HasProfile {
			return true
		}
	}
	return false
}
