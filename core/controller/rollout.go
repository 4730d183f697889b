package controller

import "math"

// The rollout (scoring "rollout"): each candidate split is simulated
// forward from the snapshot's state, the engines that leave a pool
// stopping at once and joining the other one after their drain plus the
// switch time, and scored by the share of requests predicted to miss
// TTFT or TPOT.
//
// Prefill is a fluid queue of requests (the staying engines' resident
// backlog at the pool's mean rate, plus the horizon's arrival rate),
// served at the pool's rate as it stands at each instant; a request
// arriving at t waits until the pool has served the queue ahead of it
// (engines that join later counted when they join), then its own
// prefill. Around that fluid wait the request's TTFT is spread by its
// own prefill time (normal, from E[L] and E[L²] of the feasible
// requests on the reference profile) and a per-engine queueing wait
// (M/M/1: with probability ρ an exponential of mean S/(1−ρ), ρ capped at
// rolloutRhoCap), so that a split is ranked by how many requests it
// saves, not only by whether the fluid mean crosses the SLO.
//
// Decode holds the sequences that prefill completes (not the offered
// rate): each step takes a + N·m per engine (the profile's decode model
// and its corrections), a sequence leaves after the mean output tokens,
// and the TPOT a request sees is spread by the Poisson imbalance of the
// batch across the engines (sd m·√(N/n)). A sequence that does not fit
// in the pool's physical KV capacity waits (an admission queue, a stall
// as a vLLM or SGLang scheduler makes it) and counts as a miss.
//
// Where the model's mean TTFT at the current split is more than
// prefillContradiction times the measured one while the pool keeps up
// (enough TTFT observations, no queue past the SLO), the prefill work of
// every request is divided by the factor that brings the prediction to
// that bound (measuredPrefillScale; only down): the overflow rule's
// pricing at the largest shape must not make the rollout starve decode
// for a prefill deficit the engines do not show.
//
// A split's score is the mean over the short and the long horizon's
// demand of the requests predicted to miss per request arriving, plus the
// requests that the backlog left at the rollout's end will cost (each
// excess request once at most; see tailMinNet): splits that all miss
// within the horizon are still ranked by how much they leave behind.

const (
	rolloutSteps  = 64
	rolloutMinS   = 30.0
	rolloutMaxS   = 180.0
	rolloutRhoCap = 0.95
	// rolloutMoveTie is the score per moved engine: a tie-break toward
	// fewer moves, far below any miss share that matters.
	rolloutMoveTie = 1e-4
	maxOwnCV       = 3.0
)

// rolloutEvent is an engine joining a pool at At seconds: prefill
// (Prefill true: service rate Mu per horizon) or decode (Cap per
// horizon, fixed step A, KV capacity).
type rolloutEvent struct {
	At        float64
	Prefill   bool
	Mu, Cap   [2]float64
	A, KVCap  float64
	KVUnknown bool
}

// rolloutHorizonS is how far a rollout looks: the long horizon's span
// past the switch time (a move is judged over a demand window after it
// can land), within [rolloutMinS, rolloutMaxS].
func (s *Snapshot) rolloutHorizonS() float64 {
	return max(rolloutMinS, min(rolloutMaxS, s.Long.SpanS+s.SwitchS))
}

// ownPrefillCV is the coefficient of variation of the own prefill time
// of h's feasible requests on profile p (delta method on a + bL + cL²),
// at most maxOwnCV.
func ownPrefillCV(p *Profile, h *HorizonDemand) float64 {
	if !p.HasPrefill || h.FeasibleShare <= 0 {
		return 0
	}
	m := p.Prefill.A + p.Prefill.B*h.FeasibleMeanInput + p.Prefill.C*h.FeasibleMeanInputSq
	v := h.FeasibleMeanInputSq - h.FeasibleMeanInput*h.FeasibleMeanInput
	if m <= 0 || v <= 0 {
		return 0
	}
	sd := math.Abs(p.Prefill.B+2*p.Prefill.C*h.FeasibleMeanInput) * math.Sqrt(v)
	return min(maxOwnCV, sd/m)
}

// transitEvents fills s.transit with the engines already in transition,
// joining their target pool at the switch time after their move began
// (the same for every candidate split: prepare computes it once).
func (s *Snapshot) transitEvents() {
	s.transit = s.transit[:0]
	hz := [2]*HorizonDemand{&s.Short, &s.Long}
	for i := range s.Engines {
		e := &s.Engines[i]
		if e.State == StateServing || !e.Live || (e.TargetRole != RolePrefill && e.TargetRole != RoleDecode) {
			continue
		}
		p := s.profileOf(e)
		at := s.SwitchS
		if e.LastMoveNs > 0 {
			at = max(0, s.SwitchS-float64(s.AtNs-e.LastMoveNs)/1e9)
		}
		r := rolloutEvent{At: at, Prefill: e.TargetRole == RolePrefill, A: p.Decode.A, KVCap: float64(e.KVCapacityTokens), KVUnknown: e.KVCapacityTokens <= 0}
		for h := 0; h < 2; h++ {
			r.Mu[h], r.Cap[h] = prefillRate(p, hz[h]), decodeCap(p, hz[h])
		}
		s.transit = append(s.transit, r)
	}
}

// rolloutEvents fills s.events with the engines joining a pool under the
// split of j moves, sorted by time: engines already in transition
// (s.transit) and the split's movers (at their drain time plus the
// switch time).
func (s *Snapshot) rolloutEvents(j int) []rolloutEvent {
	ev := append(s.events[:0], s.transit...)
	c := &s.cum
	for k := 0; k < j; k++ { // decode engines to prefill
		r := rolloutEvent{At: s.Engines[s.dm[k]].DrainS + s.SwitchS, Prefill: true}
		for h := 0; h < 2; h++ {
			r.Mu[h] = c.dMu[h][k+1] - c.dMu[h][k]
		}
		ev = append(ev, r)
	}
	for k := 0; k < -j; k++ { // prefill engines to decode
		r := rolloutEvent{At: s.Engines[s.pm[k]].DrainS + s.SwitchS, A: c.pA[k+1] - c.pA[k],
			KVCap: c.pKV[k+1] - c.pKV[k], KVUnknown: c.pKVUnknown[k+1] > c.pKVUnknown[k]}
		for h := 0; h < 2; h++ {
			r.Cap[h] = c.pCap[h][k+1] - c.pCap[h][k]
		}
		ev = append(ev, r)
	}
	for i := 1; i < len(ev); i++ { // insertion sort: a few dozen at most
		for k := i; k > 0 && ev[k].At < ev[k-1].At; k-- {
			ev[k], ev[k-1] = ev[k-1], ev[k]
		}
	}
	s.events = ev
	return ev
}

// rolloutResult is one horizon's rollout of one split.
type rolloutResult struct {
	miss   float64 // share of the rollout's requests missing TTFT or TPOT
	ttft   float64 // worst predicted TTFT / SLO
	tpot   float64 // worst predicted TPOT / SLO
	kvPeak float64 // largest decode KV (tokens)
}

// rolloutSplit scores the split of j moves by the rollout of both
// horizons' demand; pressures are the worst predicted latency / SLO over
// the rollout, floored by the observed pressure as the closed form does.
func (s *Snapshot) rolloutSplit(j int) SplitScore {
	j = max(s.MinMoves(), min(s.MaxMoves(), j))
	c := &s.cum
	sc := SplitScore{Moves: j, PrefillEngines: s.PrefillEngines + s.IncomingPrefill + j, DecodeEngines: s.DecodeEngines + s.IncomingDecode - j}
	kvCap, kvUnknown, resKV := c.kvCapD, c.kvUnknownD, c.resKVD
	switch {
	case j > 0:
		kvCap -= c.dKVCap[j]
		kvUnknown -= c.dKVUnknown[j]
		resKV -= c.dRes[j]
		sc.DrainS = c.dDrain[j]
	case j < 0:
		kvCap += c.pKV[-j]
		kvUnknown += c.pKVUnknown[-j]
		sc.DrainS = c.pDrain[-j]
	}
	if kvUnknown == 0 && sc.DecodeEngines > 0 {
		sc.KVCapacityTokens = kvCap
	}
	ev := s.rolloutEvents(j)
	hz := [2]*HorizonDemand{&s.Short, &s.Long}
	var pp, dp, miss [2]float64
	kvPeak := 0.0
	for h := 0; h < 2; h++ {
		r := s.rollout(h, hz[h], j, ev)
		pp[h], dp[h], miss[h] = r.ttft, r.tpot, r.miss
		if h == 1 {
			kvPeak = r.kvPeak
		}
	}
	sc.KVNeedTokens = max(resKV, kvPeak)
	if s.useObserved {
		p := scaleObserved(s.obsP, s.PrefillEngines, sc.PrefillEngines)
		d := scaleObserved(s.obsD, s.DecodeEngines, sc.DecodeEngines)
		for h := 0; h < 2; h++ {
			pp[h], dp[h] = max(pp[h], p), max(dp[h], d)
		}
	}
	sc.ShortPrefill, sc.LongPrefill = pp[0], pp[1]
	sc.ShortDecode, sc.LongDecode = dp[0], dp[1]
	sc.PrefillPressure = max(pp[0], pp[1])
	sc.DecodePressure = max(dp[1], (dp[0]+dp[1])/2)
	if sc.KVCapacityTokens > 0 {
		sc.DecodePressure = max(sc.DecodePressure, sc.KVNeedTokens/sc.KVCapacityTokens)
	} else if sc.DecodeEngines == 0 && sc.KVNeedTokens > 0 {
		sc.DecodePressure = math.Inf(1)
	}
	// Both horizons' demand weigh equally: the short one leads a shift,
	// the long one holds its noise down (the closed form's decode blend).
	sc.MissShare = (miss[0] + miss[1]) / 2
	sc.Score = sc.MissShare + rolloutMoveTie*float64(abs(j))
	return sc
}

// rollout simulates horizon h's demand (index hi) over the split of j
// moves, with ev its joining engines sorted by time.
func (s *Snapshot) rollout(hi int, h *HorizonDemand, j int, ev []rolloutEvent) rolloutResult {
	c := &s.cum
	// The pools at t = 0: serving engines less the movers.
	k := s.prefillScale[hi]
	muP, nP := s.srv[hi].muP, s.PrefillEngines
	capD, aD, nD := s.srv[hi].capD, s.srv[hi].aD, s.DecodeEngines
	kvCap, kvUnknown := s.srvKVCap, s.srvKVUnknown
	backlog, seqs, kv := c.backlog, c.resSeqsD, c.resKVD
	if j > 0 {
		capD -= c.dCap[hi][j]
		aD -= c.dA[j]
		nD -= j
		kvCap -= c.dKVCap[j]
		kvUnknown -= c.dKVUnknown[j]
		seqs -= c.dSeqs[j]
		kv -= c.dRes[j]
	} else if j < 0 {
		muP -= c.pMu[hi][-j]
		nP += j
		backlog -= c.pBacklog[-j]
	}
	muP *= k
	// The staying engines' backlog in requests, at the pool's mean rate.
	queue := 0.0
	if s.PrefillEngines > 0 && s.srv[hi].muP > 0 {
		queue = max(0, backlog) * k * s.srv[hi].muP / float64(s.PrefillEngines)
	}
	tau, tauD := s.Timing.TTFTSLOS, s.Timing.TPOTSLOS
	lambda := h.RatePerS
	out := h.MeanOutput
	if s.OutputScale > 0 {
		out *= s.OutputScale
	}
	ctx := h.DecodeCtx * s.KVCorrection
	feasible := h.FeasibleShare
	cv := s.ownCV[hi]
	q := s.Config.LatencyQuantile
	dt := s.rolloutHorizonS() / rolloutSteps

	var res rolloutResult
	var offered, missT, missD, waiting, delivered float64
	// ttftMiss of the step before and its arguments: while the queue
	// is empty and no engine joins, a step repeats them exactly (most
	// steps of a rollout), and the tails (three Erfc, one Exp) are the
	// rollout's main cost. A NaN slack matches no step: the first
	// computes.
	lastSlack := math.NaN()
	var lastOwn, lastRho, lastSvc, lastMiss, lastQ float64
	next := 0
	for i := 0; i < rolloutSteps; i++ {
		t := float64(i) * dt
		for ; next < len(ev) && ev[next].At <= t; next++ {
			e := &ev[next]
			if e.Prefill {
				muP += k * e.Mu[hi]
				nP++
				continue
			}
			capD += e.Cap[hi]
			aD += e.A
			nD++
			kvCap += e.KVCap
			if e.KVUnknown {
				kvUnknown++
			}
		}
		// Prefill: this step's arrivals wait for the queue ahead of them,
		// then their own prefill.
		a := lambda * dt
		offered += a
		wait := drainTime(queue, t, muP, ev[next:], hi, k)
		var own, svc, rho float64 // own: mean own prefill; svc: mean service of all requests
		if nP > 0 && muP > 0 {
			svc = float64(nP) / muP
			own = svc * s.feasibleRatio[hi]
			rho = min(lambda/muP, rolloutRhoCap)
		} else {
			svc, own = math.Inf(1), math.Inf(1)
		}
		if a > 0 {
			slack := tau - wait
			if !rolloutReuseTail || slack != lastSlack || own != lastOwn || rho != lastRho || svc != lastSvc {
				lastSlack, lastOwn, lastRho, lastSvc = slack, own, rho, svc
				lastMiss = ttftMiss(slack, feasible, own, cv*own, rho, svc)
				// the queueing wait's quantile past the mean, where it has one
				lastQ = 0
				if rho > 1-q && !math.IsInf(svc, 0) {
					lastQ = svc / (1 - rho) * math.Log(rho/(1-q))
				}
			}
			missT += a * lastMiss
			ttft := wait + own + lastQ
			res.ttft = max(res.ttft, ttft/tau)
		}
		done := min(queue+a, muP*dt)
		if nP == 0 {
			done = 0
		}
		queue += a - done

		// Decode: sequences leave after the mean output, then this
		// step's completed prefills are admitted while KV lasts.
		var tpot, perSeq float64
		if nD > 0 && capD > 0 {
			perSeq = s.DecodeLoadCorrection / capD
			tpot = s.decodeFloor(aD, nD) + seqs*perSeq
		}
		if seqs > 0 && tpot > 0 && out > 0 {
			leave := min(seqs, seqs*dt/(out*tpot))
			kv -= kv * leave / seqs
			seqs -= leave
		} else if out <= 0 {
			seqs, kv = 0, 0
		}
		space := math.Inf(1)
		if kvUnknown == 0 && ctx > 0 {
			space = max(0, (kvCap-kv)/ctx)
		}
		if nD == 0 || capD <= 0 {
			space = 0
		}
		admit := min(waiting+done, space)
		waiting += done - admit
		seqs += admit
		kv += admit * ctx
		res.kvPeak = max(res.kvPeak, kv+waiting*ctx)
		if done > 0 {
			stalled := min(done, waiting) / done
			p := 1.0
			if nD > 0 && capD > 0 {
				tpot = s.decodeFloor(aD, nD) + seqs*perSeq
				sd := perSeq * float64(nD) * math.Sqrt(seqs/float64(nD))
				p = normalTail(tauD-tpot, sd)
				res.tpot = max(res.tpot, tpot/tauD)
			} else {
				res.tpot = math.Inf(1)
			}
			missD += done * (stalled + (1-stalled)*p)
			delivered += done
		}
	}
	if offered > 0 {
		pt := missT / offered
		res.miss = min(1, pt+missD/offered*(1-pt))
		// The backlog the rollout leaves: arrivals after it miss until
		// the pools work it off, so that splits that all miss within the
		// horizon are still ranked by how many requests they lose.
		var tail float64
		if lambda > 0 {
			excess, net := queue, 0.0
			if nP > 0 && muP > 0 {
				own := float64(nP) / muP * s.feasibleRatio[hi]
				excess, net = max(0, queue-max(0, tau-own)*muP), muP-lambda
			}
			tail += lambda * excess / max(net, tailMinNet*lambda)
		}
		if in := delivered / (float64(rolloutSteps) * dt); in > 0 && out > 0 {
			excess, net := waiting+seqs, 0.0
			if nD > 0 && capD > 0 {
				perSeq := s.DecodeLoadCorrection / capD
				floor := s.decodeFloor(aD, nD)
				excess = waiting + max(0, seqs-max(0, tauD-floor)/perSeq)
				net = seqs/(out*(floor+seqs*perSeq)) - in
			}
			tail += in * excess / max(net, tailMinNet*in)
		}
		res.miss += tail / offered
	}
	return res
}

// rolloutReuseTail: a rollout step whose TTFT tail arguments are the
// step before's reuses its tail (see rollout); tests switch it off to
// compare.
var rolloutReuseTail = true

// measuredPrefillScale is the factor k ≥ 1 by which the rollout divides
// the prefill work of a horizon's requests when its prediction for the
// current split is above the measured mean TTFT: a pool of n engines
// serving muP requests/s at a load ρ = rate/muP has a mean TTFT of
// S/(1−ρ) (M/M/1 per engine, S = n/muP); with the work divided by k it
// is (S/k)/(1−ρ/k) = S/(k−ρ), so k = ρ + S/measured meets the
// measurement. Only down (k ≥ 1), at most maxPrefillScale, and only
// while the pool measurably keeps up (caller: enough observations, no
// queue past the SLO): the reference page's overflow rule prices a
// cohort at its largest shape, which at a short TTFT SLO over-prices
// prefill many times over while the pool keeps up (HISTORY.md), and the
// rollout then starves decode to feed a prefill deficit that does not
// exist.
func measuredPrefillScale(rate, muP float64, engines int, measuredS float64) float64 {
	if engines <= 0 || muP <= 0 || rate <= 0 || measuredS <= 0 || math.IsInf(muP, 0) {
		return 1
	}
	svc := float64(engines) / muP
	rho := rate / muP
	target := prefillContradiction * measuredS
	if pred := svc / (1 - min(rho, rolloutRhoCap)); pred <= target {
		return 1
	}
	return max(1, min(maxPrefillScale, rho+svc/target))
}

// prefillContradiction: how far (×) the predicted mean TTFT at the
// current split may exceed the measured one before measuredPrefillScale
// corrects it (to that bound, not to the measurement). Tune half, mean
// vs static-best (scoring rollout, +0.30 without): 1 −1.92, 4 −0.12,
// 5 +0.27, 6 +0.28, 7 +0.35, 8 +0.24, 10 +0.21; the comparable-segments
// row's worst seed vs 10598f3 −1.46 without, −0.43 at 4–7, −1.27 at 10.
// 6: the middle of the plateau.
const prefillContradiction = 6.0

// maxPrefillScale bounds measuredPrefillScale.
const maxPrefillScale = 100.0

// tailMinNet: the net service rate (share of the arrival rate) below
// which a pool is assumed to work its rollout backlog off anyway, so that
// a larger backlog always counts more misses. At 1 the backlog's excess
// requests each count once, fewer when the pool outpaces its arrivals by
// more than their rate (the requests behind them meet the SLO sooner).
// Tune half, mean vs static-best: 0.05 −0.08, 0.2 +0.05, 1 +0.30, 3 +0.36
// (one scenario fewer within 0.5 pt of threshold).
const tailMinNet = 1.0

// drainTime is how long a pool serving mu requests/s at t, with engines
// joining as ev says (ev sorted, all after t), takes to serve queue
// requests; +Inf when it never does. k scales the joining engines' rates
// (the snapshot's prefillScale).
func drainTime(queue, t, mu float64, ev []rolloutEvent, hi int, k float64) float64 {
	if queue <= 0 {
		return 0
	}
	at := t
	for _, e := range ev {
		if mu > 0 && at+queue/mu <= e.At {
			break
		}
		if !e.Prefill {
			continue
		}
		queue -= mu * (e.At - at)
		at = e.At
		mu += k * e.Mu[hi]
	}
	if mu <= 0 {
		return math.Inf(1)
	}
	return at + queue/mu - t
}

// ttftMiss is the probability that a request misses a TTFT budget of
// slack seconds past its fluid wait: the infeasible share misses anyway;
// a feasible one takes an own prefill ~ N(own, sd) and, with probability
// rho, an exponential queueing wait of mean svc/(1−rho).
func ttftMiss(slack, feasible, own, sd, rho, svc float64) float64 {
	if math.IsInf(own, 0) || math.IsInf(slack, -1) {
		return 1
	}
	theta := (1 - rho) / svc
	p := (1-rho)*normalTail(slack-own, sd) + rho*emgTail(slack-own, sd, theta)
	return (1 - feasible) + feasible*max(0, min(1, p))
}

// normalTail is P(X > mean + y) for X ~ N(mean, sd²), i.e. the chance
// that a normal spread past a slack y: Φ(−y/sd); a step at 0 when sd is 0.
func normalTail(y, sd float64) float64 {
	if sd <= 0 {
		if y < 0 {
			return 1
		}
		return 0
	}
	return 0.5 * math.Erfc(y/(sd*math.Sqrt2))
}

// emgTail is P(X + E > mean + y) for X ~ N(mean, sd²) and E exponential
// of rate theta (an exponentially modified Gaussian).
func emgTail(y, sd, theta float64) float64 {
	if theta <= 0 || math.IsInf(theta, 1) {
		return normalTail(y, sd)
	}
	if sd <= 0 {
		if y < 0 {
			return 1
		}
		return math.Exp(-theta * y)
	}
	if y < -8*sd {
		return 1
	}
	z := y / sd
	// Φc(z) + exp(−θy + θ²sd²/2)·Φ(z − θ sd)
	tail := 0.5*math.Erfc(z/math.Sqrt2) + math.Exp(-theta*y+theta*theta*sd*sd/2)*0.5*math.Erfc(-(z-theta*sd)/math.Sqrt2)
	return max(0, min(1, tail))
}

// prefillRate is the requests/s one engine of profile p serves at h's
// mean prefill time; decodeCap its decode capacity in sequences per
// second of step (1 / per-sequence cost at h's context).
func prefillRate(p *Profile, h *HorizonDemand) float64 {
	if !p.HasPrefill || h.Requests == 0 {
		return 0
	}
	sv := p.Prefill.A + p.Prefill.B*h.MeanInput + p.Prefill.C*h.MeanInputSq
	if sv <= 0 {
		return 0
	}
	return 1 / sv
}

func decodeCap(p *Profile, h *HorizonDemand) float64 {
	if !p.HasDecode {
		return 0
	}
	m := p.Decode.PerSeq + p.Decode.PerCtxToken*h.DecodeCtx
	if m <= 0 {
		return math.Inf(1)
	}
	return 1 / m
}
