package controller

import "math"

// SplitScore is one candidate split scored from a snapshot. Moves > 0
// moves that many decode engines to prefill, < 0 prefill engines to
// decode, 0 is the current split.
type SplitScore struct {
	Moves          int `json:"moves"`
	PrefillEngines int `json:"prefill_engines"`
	DecodeEngines  int `json:"decode_engines"`
	// Pressures are predicted latency / SLO (the worse horizon); decode
	// pressure also covers KV use / physical KV capacity.
	PrefillPressure float64 `json:"prefill_pressure"`
	DecodePressure  float64 `json:"decode_pressure"`
	ShortPrefill    float64 `json:"short_prefill"`
	LongPrefill     float64 `json:"long_prefill"`
	ShortDecode     float64 `json:"short_decode"`
	LongDecode      float64 `json:"long_decode"`
	// KVNeedTokens: the decode pool's resident or predicted KV tokens,
	// whichever is larger; KVCapacityTokens its physical capacity (0 when
	// some engine's capacity is unknown: then KV is not judged).
	KVNeedTokens     float64 `json:"kv_need_tokens"`
	KVCapacityTokens float64 `json:"kv_capacity_tokens"`
	// KVSurgeTokens: with a prefill backlog, the decode pool's KV once
	// the split's prefill pool releases that backlog into it (see
	// backlogSurge); 0 without a backlog.
	KVSurgeTokens float64 `json:"kv_surge_tokens,omitempty"`
	DrainS        float64 `json:"drain_s"`
	// MissShare: with scoring "rollout", the requests predicted to miss
	// TTFT or TPOT per request arriving in the rollout (the mean of the
	// short and the long horizon's demand), counting those that the
	// backlog left at its end will cost (so past 1 when a split cannot
	// catch up); the score is this plus a tie-break per moved engine.
	MissShare float64 `json:"miss_share,omitempty"`
	Score     float64 `json:"score"`
	kvPred    float64 // the long horizon's predicted KV before KVCorrection
}

// MinMoves and MaxMoves bound the candidate splits over live serving
// engines.
func (s *Snapshot) MinMoves() int { return -len(s.pm) }

// MaxMoves is the most decode-to-prefill moves.
func (s *Snapshot) MaxMoves() int { return len(s.dm) }

// Split scores the split that makes j moves from the current one
// (clamped to the candidate range): by the rollout when scoring is
// "rollout" and demand is complete, else by the closed form.
func (s *Snapshot) Split(j int) SplitScore {
	if s.byRollout() {
		return s.rolloutSplit(j)
	}
	return s.closedSplit(j)
}

// byRollout reports whether splits are scored by the rollout: scoring
// "rollout" with complete demand (the observed bases price what they
// measure, in closed form).
func (s *Snapshot) byRollout() bool {
	return s.Config.Scoring == ScoringRollout && s.Basis == BasisOfferedDemand
}

// closedSplit scores a split in closed form, where the pools stand once
// the moves land.
func (s *Snapshot) closedSplit(j int) SplitScore {
	j = max(s.MinMoves(), min(s.MaxMoves(), j))
	c := &s.cum
	sc := SplitScore{Moves: j, PrefillEngines: s.PrefillEngines + s.IncomingPrefill + j, DecodeEngines: s.DecodeEngines + s.IncomingDecode - j}
	nP, nD := sc.PrefillEngines, sc.DecodeEngines
	// Pool sums after the move.
	backlog := c.backlog
	kvCap, kvUnknown, resKV := c.kvCapD, c.kvUnknownD, c.resKVD
	var muP, capD, aD [2]float64
	for h := 0; h < 2; h++ {
		muP[h], capD[h], aD[h] = s.base[h].muP, s.base[h].capD, s.base[h].aD
	}
	switch {
	case j > 0:
		for h := 0; h < 2; h++ {
			muP[h] += c.dMu[h][j]
			capD[h] -= c.dCap[h][j]
			aD[h] -= c.dA[j]
		}
		kvCap -= c.dKVCap[j]
		kvUnknown -= c.dKVUnknown[j]
		resKV -= c.dRes[j]
		sc.DrainS = c.dDrain[j]
	case j < 0:
		k := -j
		for h := 0; h < 2; h++ {
			muP[h] -= c.pMu[h][k]
			capD[h] += c.pCap[h][k]
			aD[h] += c.pA[k]
		}
		backlog -= c.pBacklog[k]
		kvCap += c.pKV[k]
		kvUnknown += c.pKVUnknown[k]
		sc.DrainS = c.pDrain[k]
	}
	if kvUnknown == 0 && nD > 0 {
		sc.KVCapacityTokens = kvCap
	}
	sc.KVNeedTokens = resKV
	// Offered-demand predictions; with incomplete demand they are a lower
	// bound (the unpriced part is missing) and the observed pressure (or
	// the recovery ratio), scaled by engine counts, can only raise them.
	hz := [2]*HorizonDemand{&s.Short, &s.Long}
	var pp, dp [2]float64
	for h := 0; h < 2; h++ {
		pp[h] = s.prefillPressure(hz[h], nP, muP[h], backlog)
		var kv float64
		dp[h], kv = s.decodePressure(hz[h], deliveredRate(hz[h], nP, muP[h], backlog), nD, capD[h], aD[h])
		if h == 1 {
			sc.kvPred = kv
			sc.KVNeedTokens = max(sc.KVNeedTokens, kv*s.KVCorrection)
		}
	}
	if s.Basis == BasisUnprofiled { // no profile: measurements only
		pp, dp, sc.KVNeedTokens = [2]float64{}, [2]float64{}, resKV
	}
	if s.Basis != BasisOfferedDemand || s.useObserved {
		p := scaleObserved(s.obsP, s.PrefillEngines, nP)
		d := scaleObserved(s.obsD, s.DecodeEngines, nD)
		for h := 0; h < 2; h++ {
			pp[h], dp[h] = max(pp[h], p), max(dp[h], d)
		}
	}
	sc.KVSurgeTokens = s.backlogSurge(backlog, resKV, nP, dp[1])
	sc.ShortPrefill, sc.LongPrefill = pp[0], pp[1]
	sc.ShortDecode, sc.LongDecode = dp[0], dp[1]
	sc.PrefillPressure = max(sc.ShortPrefill, sc.LongPrefill)
	sc.DecodePressure = max(sc.LongDecode, (sc.ShortDecode+sc.LongDecode)/2)
	if sc.KVCapacityTokens > 0 {
		sc.DecodePressure = max(sc.DecodePressure, sc.KVNeedTokens/sc.KVCapacityTokens)
	} else if nD == 0 && sc.KVNeedTokens > 0 {
		sc.DecodePressure = math.Inf(1)
	}
	// The score ranks splits by the worse phase, then the other phase,
	// then drain cost. Pressures above score_cap grow logarithmically in
	// the score (level), so that the hysteresis margin is relative there
	// and no phase past saving ties every split. The drain cost stays
	// absolute: far past score_cap it outweighs a relief of the worse
	// phase of a few percent (one engine of twelve), and the current
	// split scores best (HISTORY.md, session 10: making it relative too
	// lost 11 and 65 pt on two 32- and 16-engine scenarios).
	scoreCap := s.Config.ScoreCap
	worst, other := sc.PrefillPressure, sc.DecodePressure
	if other > worst {
		worst, other = other, worst
	}
	sc.Score = level(worst, scoreCap) + tieWeight*level(other, scoreCap) + s.Config.DrainCostWeight*sc.DrainS
	return sc
}

// backlogSurge is the decode KV a split must hold once its prefill pool
// releases the resident prefill backlog (backlogS engine-seconds) into
// decode: the resident KV plus the backlog's requests (at the current
// pool's per-engine rate) at the mean decode context, all of them when
// the nP engines release the backlog faster than a sequence decodes
// (mean output × the split's predicted TPOT, decodeP its long-horizon
// pressure), else the share resident at once. The delivered-rate
// pricing of decode spreads a backlog over the horizon; a prefill pool
// that catches up releases it within seconds, and the decode pool must
// then hold it (Azure conv at ×8.5, the concatenation's middle trace: a
// 63 s backlog released by an 11th prefill engine took decode from 427k
// to 927k tokens, 87 % of five engines' KV, and TPOT past its SLO).
func (s *Snapshot) backlogSurge(backlogS, resKV float64, nP int, decodeP float64) float64 {
	n0 := s.PrefillEngines + s.IncomingPrefill
	if backlogS <= 0 || nP <= 0 || n0 <= 0 {
		return 0
	}
	reqs := backlogS * s.base[1].muP / float64(n0)
	residence := s.Long.MeanOutput * decodeP * s.Timing.TPOTSLOS
	release := backlogS / float64(nP)
	share := 1.0
	if release > residence {
		share = residence / release
	}
	return resKV + reqs*s.Long.DecodeCtx*share
}

// tieWeight weighs the better phase in a split's score: it only breaks
// ties of the worse phase.
const tieWeight = 0.01

// level is a pressure as it enters a score: itself up to capP, then
// capP·(1 + ln(x/capP)) (continuous, strictly increasing, finite for
// finite x).
func level(x, capP float64) float64 {
	if x <= capP {
		return x
	}
	return capP * (1 + math.Log(x/capP))
}

// rhoSat is the utilization where the queueing formulas stop: beyond it
// a pool is saturated, and its latency is extrapolated linearly in the
// excess load over the horizon (work piles up at (ρ − 1) seconds per
// second per engine), so that saturated splits are still ranked by how
// much of the deficit they remove instead of all being infinite.
const rhoSat = 0.99

// scaleObserved scales an observed pressure measured with n0 engines to n
// engines. With no engine now, the observation stands for one engine (and
// at least saturation: nothing is being served).
func scaleObserved(obs float64, n0, n int) float64 {
	if n0 == 0 {
		if obs == 0 {
			return 0
		}
		obs, n0 = max(obs, 1), 1
	}
	if n == 0 {
		if obs == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return obs * float64(n0) / float64(n)
}

// prefillPressure: predicted TTFT / TTFT SLO of a pool of n engines with
// total service rate muSum (requests/s) and resident backlog seconds, as
// an M/D/1-like queue: mean service time × (1 + ρ/(2(1−ρ))) + backlog / n.
func (s *Snapshot) prefillPressure(h *HorizonDemand, n int, muSum, backlogS float64) float64 {
	if n <= 0 {
		if h.RatePerS > 0 || backlogS > 0 {
			return math.Inf(1)
		}
		return 0
	}
	ttft := backlogS / float64(n)
	if h.RatePerS > 0 {
		if muSum <= 0 {
			return math.Inf(1)
		}
		rho := h.RatePerS / muSum
		excess := 0.0
		if rho > rhoSat {
			rho, excess = rhoSat, rho-rhoSat
		}
		sv := float64(n) / muSum
		ttft += sv * s.feasibleRatio[hIndex(s, h)]
		// Waiting-time quantile of an M/M/1 queue per engine:
		// P(W > t) = ρ·exp(−t(1−ρ)/S), so the q-quantile is
		// S/(1−ρ)·ln(ρ/(1−q)) when ρ > 1−q.
		if q := s.Config.LatencyQuantile; rho > 1-q {
			ttft += sv / (1 - rho) * math.Log(rho/(1-q))
		}
		ttft += excess * max(h.SpanS, 1)
	}
	return ttft / s.Timing.TTFTSLOS
}

// deliveredRate is the request rate a split's decode pool receives over
// horizon h: the offered rate plus the resident prefill backlog drained
// over the horizon, but never more than the split's prefill pool serves
// (muSum requests/s). A decode pool behind a saturated prefill pool only
// sees what prefill completes; pricing it at the offered rate over-
// predicts its TPOT and KV by the prefill deficit, and then the split
// that starves prefill looks best for decode.
func deliveredRate(h *HorizonDemand, nP int, muSum, backlogS float64) float64 {
	if nP <= 0 || muSum <= 0 {
		return 0
	}
	r := h.RatePerS
	if backlogS > 0 {
		r += backlogS * muSum / float64(nP) / max(h.SpanS, 1)
	}
	return min(r, muSum)
}

// decodePressure: predicted TPOT / TPOT SLO of a pool of n engines. A
// step takes a + m·B (m per sequence at the horizon's mean context), so a
// token rate r spread over the pool gives TPOT = ā / (1 − r/Σ(1/m)),
// times the decode correction. Also returns the predicted KV tokens
// (Little: r·TPOT sequences × mean context).
func (s *Snapshot) decodePressure(h *HorizonDemand, rate float64, n int, capSum, aSum float64) (float64, float64) {
	r := rate * h.MeanOutput
	if k := s.OutputScale; k > 0 {
		r *= k
	}
	if n <= 0 {
		if r > 0 {
			return math.Inf(1), math.Inf(1)
		}
		return 0, 0
	}
	if capSum <= 0 {
		if r > 0 {
			return math.Inf(1), math.Inf(1)
		}
		return 0, 0
	}
	rho := s.decodeUtil(r, capSum)
	excess := 0.0
	if rho > rhoSat {
		rho, excess = rhoSat, rho-rhoSat
	}
	tpot := s.decodeFloor(aSum, n) / (1 - rho) * (1 + excess*max(h.SpanS, 1))
	return tpot / s.Timing.TPOTSLOS, r * tpot * h.DecodeCtx
}

// decodeUtil is the decode model's utilization at a token rate r over a
// pool of per-sequence capacity capSum; decodeFloor its TPOT at no load
// (the pool's mean fixed step, corrected). decodePressure is
// decodeFloor / (1 − decodeUtil) below saturation; calibrateOutputs
// inverts it.
func (s *Snapshot) decodeUtil(r, capSum float64) float64 {
	return r * s.DecodeLoadCorrection / capSum
}

func (s *Snapshot) decodeFloor(aSum float64, n int) float64 {
	return aSum / float64(n) * s.DecodeCorrection
}

// NeededDecodeEngines is the smallest decode pool (over this snapshot's
// split order) whose decode pressure on horizon h (0 short, 1 long) is at
// or under the target; all live serving engines when none is. Rollout
// scores over more than fullScanSplits candidates are searched by
// bisection (fewer decode engines never lower the decode pressure).
func (s *Snapshot) NeededDecodeEngines(h int) int {
	ok := func(j int) (int, bool) { return s.decodeWithinTarget(j, h) }
	lo, hi := s.MinMoves(), s.MaxMoves()
	if !s.byRollout() || hi-lo+1 <= fullScanSplits {
		for j := hi; j >= lo; j-- {
			if n, good := ok(j); good {
				return n
			}
		}
		return s.PrefillEngines + s.DecodeEngines
	}
	n, good := ok(lo)
	if !good {
		return s.PrefillEngines + s.DecodeEngines
	}
	for lo < hi { // ok(lo) holds; find the largest such j
		mid := lo + (hi-lo+1)/2
		if m, g := ok(mid); g {
			lo, n = mid, m
		} else {
			hi = mid - 1
		}
	}
	return n
}

// decodeWithinTarget scores the split of j moves and reports its decode
// engines and whether its decode pressure on horizon h (KV included) is
// at or under the target.
func (s *Snapshot) decodeWithinTarget(j, h int) (int, bool) {
	sc := s.Split(j)
	p := sc.ShortDecode
	if h == 1 {
		p = sc.LongDecode
	}
	if sc.KVCapacityTokens > 0 {
		p = max(p, sc.KVNeedTokens/sc.KVCapacityTokens)
	}
	return sc.DecodeEngines, p <= s.Config.TargetPressure
}

// fullScanSplits: up to this many candidate splits (fleets of up to 32
// live serving engines) every split is scored. Beyond it the rollout,
// about 20 µs a split, searches coarse to fine so that a step stays
// within its 1 ms budget at 512 engines (benchmarks/README.md); the
// closed form, O(1) a split, always scores every one.
const fullScanSplits = 33

// Best returns the split with the lowest score (ties: fewest moves, then
// prefer the current direction order) and the current split. Over more
// than fullScanSplits rollout candidates it scores the single moves and
// a grid of 16 across the range, then the two splits half a step either
// side of the best so far, halving the step down to single engines.
func (s *Snapshot) Best() (best, current SplitScore) {
	current = s.Split(0)
	best = current
	lo, hi := s.MinMoves(), s.MaxMoves()
	consider := func(j int) {
		if j == 0 || j < lo || j > hi {
			return
		}
		sc := s.Split(j)
		if sc.Score < best.Score || (sc.Score == best.Score && abs(j) < abs(best.Moves)) {
			best = sc
		}
	}
	if !s.byRollout() || hi-lo+1 <= fullScanSplits {
		for j := lo; j <= hi; j++ {
			consider(j)
		}
		return best, current
	}
	step := (hi - lo + 15) / 16
	consider(-1)
	consider(1)
	for j := lo; j < hi; j += step {
		consider(j)
	}
	consider(hi)
	for step > 1 {
		c, next := best.Moves, (step+1)/2
		for j := c - step + next; j < c+step; j += next {
			if j != c {
				consider(j)
			}
		}
		step = next
	}
	return best, current
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func hIndex(s *Snapshot, h *HorizonDemand) int {
	if h == &s.Long {
		return 1
	}
	return 0
}
