package controller

import "math"

// Measured prefill work (W). On the incomplete-demand bases the spec
// prices an arrivals overflow cohort at its largest input and marks decode
// demand incomplete; the predictions are then upper bounds, saturated
// ones, not estimates, and a prefill deficit that the engines measure can
// go unanswered (each split with fewer decode engines predicts decode
// hundreds of times past its SLO). The engines measure what they are
// offered whatever the shape cap and the profile error: the prefill busy
// time of the engines in the prefill role (LatencyInterval.PrefillSeconds,
// through ObserveLatency) plus the growth of their resident backlog
// (queued + running prefill seconds) is the prefill work offered per
// second, in engine-seconds per second. Both are taken over the long
// horizon (per-step queue growth is noise of several seconds per second
// either way). An engine in transition does not count: its busy time is
// not added and its backlog is not in the pool's.
//
// The rule (sizeFromWork): on the observed_pressure and recovery bases,
// with W measured over at least half the long horizon, decode measured
// within target_pressure (observed TPOT from min_observations, resident
// KV of the decode pool) and ceil(W) above the prefill pool (with the
// engines moving to it), W sizes the prefill pool:
//   - every split's prefill pressure is priced at the measured work per
//     request (W over the long horizon's request rate) through the same
//     queue form (workRate), instead of the overflow-priced prediction;
//   - a split that adds prefill engines up to ceil(W) prices decode by
//     its measurement (workDecode): the observed decode ratio scaled by
//     engine counts and by the load its prefill pool delivers, min(W,
//     n)/busy, and resident KV scaled by the same load; where that passes
//     target_pressure the prediction stands, so the move stops where
//     decode would measure short;
//   - its released backlog is measured too (workSurge).
//
// The pool is sized at utilisation 1 (ceil(W)); 0.9 cost the tune half's
// d07a flash crowd 16.8 pt.

// workSample is the prefill pool's cumulative busy time and its resident
// backlog at one step.
type workSample struct {
	atNs  int64
	busy  float64
	queue float64
}

// workHistCap bounds the samples; they are kept at least long/workSpread
// apart, so that the ring spans more than the long horizon.
const (
	workHistCap = 24
	workSpread  = 16
)

// recordWork keeps this step's sample as the newest (replacing its
// predecessor until that is long/workSpread from the one before). Caller
// holds mu.
func (c *Controller) recordWork(nowNs int64, queue float64) {
	smp := workSample{atNs: nowNs, busy: c.prefBusy, queue: queue}
	if c.workN >= 2 && nowNs-c.workHist[(c.workN-2)%workHistCap].atNs < c.tm.LongNs/workSpread {
		c.workHist[(c.workN-1)%workHistCap] = smp
		return
	}
	c.workHist[c.workN%workHistCap] = smp
	c.workN++
}

// measuredWork is W and the busy part of it (engine-seconds per second)
// from the oldest retained sample within the long horizon to now, once
// that spans at least half of it; ok false before. Caller holds mu.
func (c *Controller) measuredWork(nowNs int64, queue float64) (w, busy float64, ok bool) {
	var old *workSample
	for i := 1; i <= min(c.workN, workHistCap); i++ {
		smp := &c.workHist[(c.workN-i)%workHistCap]
		if smp.atNs < nowNs-c.tm.LongNs {
			break
		}
		old = smp
	}
	if old == nil || nowNs-old.atNs < c.tm.LongNs/2 {
		return 0, 0, false
	}
	dt := float64(nowNs-old.atNs) / 1e9
	busy = max(0, (c.prefBusy-old.busy)/dt)
	return max(0, busy+(queue-old.queue)/dt), busy, true
}

// sizeFromWork decides whether W sizes the prefill pool in this snapshot
// (see the file comment) and sets MeasuredPrefillEngines.
func (s *Snapshot) sizeFromWork() {
	s.sizeByWork, s.MeasuredPrefillEngines = false, 0
	if !s.workKnown || (s.Basis != BasisRecovery && s.Basis != BasisObservedPressure) {
		return
	}
	need := int(math.Ceil(s.MeasuredPrefillWork - 1e-9))
	decodeOK := s.ObservedDecode.Count >= s.Config.MinObservations && s.ObservedDecode.Mean <= s.Config.TargetPressure &&
		s.cum.kvUnknownD == 0 && s.ResidentDecodeKV <= s.Config.TargetPressure*s.cum.kvCapD
	if need <= s.PrefillEngines+s.IncomingPrefill || !decodeOK {
		return
	}
	s.sizeByWork, s.MeasuredPrefillEngines = true, need
}

// workRate is the prefill service rate (requests/s) of nP engines at the
// measured work per request; ok false when W does not size the pool.
func (s *Snapshot) workRate(nP int) (float64, bool) {
	if !s.sizeByWork || s.MeasuredPrefillWork <= 0 || s.Long.RatePerS <= 0 {
		return 0, false
	}
	return float64(nP) * s.Long.RatePerS / s.MeasuredPrefillWork, true
}

// workDecode is the decode pressure and KV need of a split of nP prefill
// and nD decode engines (KV capacity kvCap) from measurements; ok false
// where it does not apply (W does not size the pool, nP beyond it, or
// decode past target_pressure there).
func (s *Snapshot) workDecode(nP, nD int, kvCap float64) (dp, kv float64, ok bool) {
	if !s.sizeByWork || nP > s.MeasuredPrefillEngines || nD <= 0 {
		return 0, 0, false
	}
	g := 1.0
	if s.measuredBusy > 0 {
		g = max(1, min(s.MeasuredPrefillWork, float64(nP))/s.measuredBusy)
	}
	dp = scaleObserved(s.obsD, s.DecodeEngines, nD) * g
	kv = s.cum.resKVD * g
	if dp > s.Config.TargetPressure || (kvCap > 0 && kv > s.Config.TargetPressure*kvCap) {
		return 0, 0, false
	}
	return dp, kv, true
}

// workSurge is backlogSurge from measurements: the backlog's requests at
// the measured work per request, each holding the mean resident context
// of a decode sequence (the long horizon's decode context without one).
func (s *Snapshot) workSurge(backlogS, kv float64, nP int, decodeP float64) float64 {
	if backlogS <= 0 || nP <= 0 || s.MeasuredPrefillWork <= 0 {
		return 0
	}
	reqs := backlogS * s.Long.RatePerS / s.MeasuredPrefillWork
	ctx := s.Long.DecodeCtx
	if s.cum.resSeqsD > 0 {
		ctx = s.cum.resKVD / s.cum.resSeqsD
	}
	residence := s.Long.MeanOutput * decodeP * s.Timing.TPOTSLOS
	release := backlogS / float64(nP)
	share := 1.0
	if release > residence {
		share = residence / release
	}
	return kv + reqs*ctx*share
}
