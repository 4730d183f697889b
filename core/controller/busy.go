package controller

import "math"

// busyAcc is one engine's measured prefill busy share: the busy seconds
// its latency intervals report (LatencyInterval.BusyS) over the seconds
// those intervals cover, both decayed with the short horizon as time
// constant. It counts only intervals reported while the engine serves
// the prefill role, and starts again whenever the engine is seen in
// another role or state, so it never mixes two pools.
type busyAcc struct {
	busyS, spanS float64
}

// observe adds one latency interval of the engine e (caller holds mu).
func (b *busyAcc) observe(e *Engine, tauS float64, li *LatencyInterval) {
	if e.State != StateServing || e.Role != RolePrefill || !e.Live {
		*b = busyAcc{}
		return
	}
	if li.BusyS == nil || li.IntervalS <= 0 || tauS <= 0 {
		return
	}
	decay := math.Exp(-li.IntervalS / tauS)
	b.busyS = b.busyS*decay + *li.BusyS
	b.spanS = b.spanS*decay + li.IntervalS
}

// busyMinSpan: an engine's busy share counts once its intervals cover
// this share of the time constant (decayed seconds).
const busyMinSpan = 0.5

// measuredPrefillWork is the prefill pool's measured work in engines: the
// mean busy share of the live serving prefill engines whose intervals
// cover busyMinSpan of the short horizon, times the number of those
// engines; NaN until at least half of them are covered (caller holds mu).
func (c *Controller) measuredPrefillWork() float64 {
	tauS := float64(c.tm.ShortNs) / 1e9
	n, covered, share := 0, 0, 0.0
	for i := range c.engines {
		e := &c.engines[i]
		if !e.Live || e.State != StateServing || e.Role != RolePrefill {
			continue
		}
		n++
		if b := &c.busy[i]; b.spanS >= busyMinSpan*tauS {
			covered++
			share += b.busyS / b.spanS
		}
	}
	if n == 0 || 2*covered < n {
		return math.NaN()
	}
	return share / float64(covered) * float64(n)
}
