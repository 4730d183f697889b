package engine

import "math"

// BacklogHalfLifeS is the half-life, in seconds, of the prefill drain
// rate PrefillRate learns: recent enough to follow a change of prompt
// mix within a minute, long enough that one scrape interval with a
// handful of prefills does not swing it.
const BacklogHalfLifeS = 30.0

// Sources of a Backlog's price.
const (
	// BacklogRecent: the engine's prefills of the last minutes (decayed
	// sums over successive scrapes).
	BacklogRecent = "recent"
	// BacklogLifetime: the engine's cumulative figures since it started
	// (no recent prefill: the agent just started, the engine restarted,
	// or it was idle for several half-lives).
	BacklogLifetime = "lifetime"
	// BacklogBusy: the engine times no prefill (SGLang without
	// sglang:queue_time_seconds), so its drain rate is the requests that
	// reached their first token per second over the intervals in which
	// requests waited at both ends (busy throughout).
	BacklogBusy = "busy_throughput"
	// BacklogUnpriced: the engine has timed no prefill (or exposes no
	// prefill histogram); the backlog is reported as 0 seconds.
	BacklogUnpriced = "none"
)

// Backlog is one engine's prefill backlog in seconds of the engine's own
// time, as the core's controller reads controller.Resident.
type Backlog struct {
	// QueuedPrefillS: the waiting requests at the drain rate.
	QueuedPrefillS float64 `json:"queued_prefill_s"`
	// RunningPrefillS: the running requests at the drain rate, half done
	// on average.
	RunningPrefillS float64 `json:"running_prefill_s"`
	// RequestsPerS is the drain rate used: prefills per second; 0 unpriced.
	RequestsPerS float64 `json:"requests_per_s"`
	// Source is BacklogRecent, BacklogLifetime, BacklogBusy or
	// BacklogUnpriced.
	Source string `json:"source"`
}

// PrefillRate learns how fast one engine drains prefill work, from its
// own prefill histogram (vLLM request_prefill_time; SGLang time to first
// token less queue time) read at successive scrapes. The zero value is
// ready; it is not safe for concurrent use.
//
// Over decayed sums of N prefills timed, S their summed prefill seconds
// and W the wall seconds they were timed in, the drain rate is
// max(N/W, N/S) prefills per second: N/W is what the engine achieved
// (its capacity whenever it was busy throughout, which it is while a
// queue stands), N/S what it would achieve running prefills one at a
// time; both are lower bounds of its capacity, so the larger is the
// closer one and the priced backlog errs long rather than short of
// the time the engine needs to clear it. Per-request seconds already carry
// the engine's prompt mix (and its quadratic attention cost), which a
// token rate times a mean prompt length would not.
//
// An engine that reports when requests reach their first token but not
// how long their prefill took (SGLang releases without
// sglang:queue_time_seconds, whose time to first token is mostly
// queueing) is priced at its busy throughput instead (ObserveBusy): the
// first tokens per second over intervals in which requests were waiting
// at both scrapes. An engine with a standing queue works throughout, so
// what it completed is what it can do; idle intervals are left out
// because they would price a later queue at the idle rate.
type PrefillRate struct {
	n, s, w float64
	// bn, bw: first tokens and wall seconds over busy intervals, decayed
	// by the busy seconds that follow.
	bn, bw float64
}

// ObserveBusy adds what the first-token count gained from prev to cur,
// read intervalS seconds apart, to the busy throughput. Call it only for
// intervals in which requests waited at both scrapes. Counters that
// went down forget it; missing figures change nothing.
func (r *PrefillRate) ObserveBusy(prev, cur *LatencyCounters, intervalS float64) {
	if prev == nil || cur == nil || !(intervalS > 0) || math.IsInf(intervalS, 0) || prev.FirstTokens < 0 || cur.FirstTokens < 0 {
		return
	}
	dn := cur.FirstTokens - prev.FirstTokens
	if dn < 0 {
		r.bn, r.bw = 0, 0
		return
	}
	d := math.Exp2(-intervalS / BacklogHalfLifeS)
	r.bn, r.bw = r.bn*d+dn, r.bw*d+intervalS
}

// Observe adds what the prefill counters gained from prev to cur, read
// intervalS seconds apart. Counters that went down (the engine
// restarted) forget what was learned; missing figures change nothing.
func (r *PrefillRate) Observe(prev, cur *LatencyCounters, intervalS float64) {
	if prev == nil || cur == nil || !(intervalS > 0) || math.IsInf(intervalS, 0) {
		return
	}
	if prev.PrefillCount < 0 || cur.PrefillCount < 0 || prev.PrefillSeconds < 0 || cur.PrefillSeconds < 0 {
		return
	}
	dn, ds := cur.PrefillCount-prev.PrefillCount, cur.PrefillSeconds-prev.PrefillSeconds
	if dn < 0 || ds < 0 {
		*r = PrefillRate{}
		return
	}
	d := math.Exp2(-intervalS / BacklogHalfLifeS)
	r.n, r.s, r.w = r.n*d+dn, r.s*d+ds, r.w*d+intervalS
}

// Reset forgets what was learned.
func (r *PrefillRate) Reset() { *r = PrefillRate{} }

// Price turns waiting and running request counts (negative: unknown,
// taken as 0) into prefill seconds: at the recent rate when at least one
// prefill's weight remains in the decayed sums, else at cur's lifetime
// rate (count / seconds), else, when the engine times no prefill at all,
// at the busy throughput (at least one first token's weight), else
// unpriced (0 seconds).
func (r *PrefillRate) Price(waiting, running int64, cur *LatencyCounters) Backlog {
	b := Backlog{Source: BacklogUnpriced}
	switch {
	case r.n >= 1 && r.s > 0:
		b.RequestsPerS, b.Source = r.n/r.s, BacklogRecent
		if r.w > 0 {
			b.RequestsPerS = max(b.RequestsPerS, r.n/r.w)
		}
	case cur != nil && cur.PrefillCount >= 1 && cur.PrefillSeconds > 0:
		b.RequestsPerS, b.Source = cur.PrefillCount/cur.PrefillSeconds, BacklogLifetime
	case (cur == nil || cur.PrefillCount < 0) && r.bn >= 1 && r.bw > 0:
		b.RequestsPerS, b.Source = r.bn/r.bw, BacklogBusy
	}
	if !(b.RequestsPerS > 0) || math.IsInf(b.RequestsPerS, 0) {
		return Backlog{Source: BacklogUnpriced}
	}
	b.QueuedPrefillS = float64(max(waiting, 0)) / b.RequestsPerS
	b.RunningPrefillS = float64(max(running, 0)) / b.RequestsPerS / 2
	return b
}
