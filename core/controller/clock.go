package controller

// A step whose time lies before times the controller holds: the clock
// stepped back (an NTP step, a restored VM), or the state came from a
// leader whose clock ran ahead (Restore, the journal's replay). Left
// alone, cooldown and dwell would wait for the clock to catch up with
// the last move (a skew of ten minutes: ten minutes without a move), the
// consolidation evidence would wait for its cutoff, and the KV and
// prefill-queue rings would fold every new sample into one stamped in
// the future. Each step therefore reads any held time after its own as
// its own time, and drops those two rings when their newest sample is
// after it (they refill within a short window); a move remembered by
// move memory keeps its full hold from now at most.

// clampFuture applies that at nowNs and returns how many times it
// moved. Caller holds mu.
func (c *Controller) clampFuture(nowNs int64) int {
	n := 0
	clamp := func(t *int64) {
		if *t > nowNs {
			*t = nowNs
			n++
		}
	}
	clamp(&c.lastMoveNs)
	clamp(&c.starveSince) // the starvation rule counts again from now
	for i := range c.engines {
		clamp(&c.engines[i].LastMoveNs)
	}
	for i := range c.risks {
		clamp(&c.risks[i].AtNs)
	}
	for id, ms := range c.moveStart {
		if ms.atNs > nowNs {
			ms.atNs = nowNs
			c.moveStart[id] = ms
			n++
		}
	}
	for _, cs := range c.calib {
		clamp(&cs.pre.lastNs)
		clamp(&cs.dec.lastNs)
	}
	if c.kvN > 0 && c.kvHist[(c.kvN-1)%kvHistCap].atNs > nowNs {
		c.kvN = 0
		n++
	}
	if c.qN > 0 && c.qHist[(c.qN-1)%qHistCap].atNs > nowNs {
		c.qN = 0
		n++
	}
	m := &c.memory
	clamp(&m.audit.atNs)
	clamp(&m.audit.lastNs)
	for i := range m.entries {
		if lim := nowNs + int64(memoryHoldS*1e9); m.entries[i].untilNs > lim {
			m.entries[i].untilNs = lim
			n++
		}
	}
	return n
}
