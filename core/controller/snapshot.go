package controller

import (
	"math"
	"slices"
	"strings"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// HistoryReader is the read side of one demand history that the
// controller needs; *buckets.History satisfies it.
type HistoryReader interface {
	Window(fromNs, toNs int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window)
	Evidence(cutoffNs, toNs int64) buckets.Evidence
}

// OverflowReader is implemented by outputs readers that tell cheaply
// whether any retained bucket holds overflow observations
// (*buckets.History does); other readers are asked through Window over
// everything they retain.
type OverflowReader interface {
	HasOverflow() bool
}

// retainedOverflow reports whether the outputs history r retains overflow
// observations anywhere (not only in the window the discount is learned
// from). scratch is a reusable cell buffer.
func retainedOverflow(r HistoryReader, scratch *[]buckets.Cell) bool {
	if o, ok := r.(OverflowReader); ok {
		return o.HasOverflow()
	}
	var w buckets.Window
	*scratch, w = r.Window(0, math.MaxInt64, (*scratch)[:0])
	return w.Overflow.Count > 0
}

// PhaseObservation is observed latency pressure of one phase over the
// short horizon: count, mean and max of latency / SLO, and how many of
// those ratios were above 1.
type PhaseObservation struct {
	Count int64 `json:"count"`
	// Over: observations past the SLO (latency / SLO above 1).
	Over int64   `json:"over"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// MissShare is the measured share of the phase's requests past their SLO
// (Over / Count; 0 with no observation): the tail a mean within target
// can hide.
func (o PhaseObservation) MissShare() float64 { return buckets.MissShare(o.Over, o.Count) }

// Inputs is what one step reads from the live core. The readers are read
// once, during the freeze; nothing in the snapshot points back into them.
type Inputs struct {
	Arrivals HistoryReader
	Outputs  HistoryReader
	// PendingUnsized counts offers whose bodies are still being read.
	PendingUnsized int64
	// ObservedPrefill: TTFT / TTFT SLO; ObservedDecode: TPOT / TPOT SLO.
	ObservedPrefill PhaseObservation
	ObservedDecode  PhaseObservation
}

// HorizonDemand is offered work over one horizon, as moments of the
// request shapes (values only).
type HorizonDemand struct {
	FromNs   int64   `json:"from_ns"`
	ToNs     int64   `json:"to_ns"`
	SpanS    float64 `json:"span_s"`
	Requests float64 `json:"requests"`
	RatePerS float64 `json:"rate_per_s"`
	// MeanInput and MeanInputSq are E[L] and E[L²] of input tokens.
	MeanInput   float64 `json:"mean_input"`
	MeanInputSq float64 `json:"mean_input_sq"`
	// MeanOutput is the estimated output tokens per request (requested
	// output through the learned discount).
	MeanOutput float64 `json:"mean_output"`
	// DecodeCtx is the mean context per sequence over its decode,
	// weighted by output tokens: E[o·(L+o/2)] / E[o].
	DecodeCtx        float64 `json:"decode_ctx"`
	MaxInput         int64   `json:"max_input"`
	MaxCtxPerSeq     int64   `json:"max_ctx_per_seq"`
	Overflow         int64   `json:"overflow"`
	Unsized          int64   `json:"unsized"`
	InvalidBuckets   int     `json:"invalid_buckets"`
	DecodeIncomplete bool    `json:"decode_incomplete"`
	// FeasibleShare is the share of requests whose own prefill (on the
	// reference profile) fits in the TTFT SLO; the TTFT prediction is
	// about them (the others miss whatever the split) while all requests
	// load the engines. FeasibleMeanInput(Sq) are their moments.
	FeasibleShare       float64 `json:"feasible_share"`
	FeasibleMeanInput   float64 `json:"feasible_mean_input"`
	FeasibleMeanInputSq float64 `json:"feasible_mean_input_sq"`
}

// OutputEstimate turns requested output tokens into expected output
// tokens. It is built once per step from the outputs history and used for
// both horizons.
type OutputEstimate struct {
	// Learned is false while any retained bucket of the outputs history
	// holds overflow (until those observations expire) or the last window
	// has no observations; then Discount is 1 and UnboundedMean the configured
	// default.
	Learned bool `json:"learned"`
	// Reason says why learning is off: OutputsOverflow or
	// OutputsNoObservations.
	Reason string `json:"reason,omitempty"`
	// Discount is Σactual / Σrequested over completed requests that gave a
	// requested output (capped at 1).
	Discount float64 `json:"discount"`
	// UnboundedMean is the mean actual output of requests without one.
	UnboundedMean float64 `json:"unbounded_mean"`
	Observations  int64   `json:"observations"`
	Overflow      int64   `json:"overflow"`
}

// Estimate returns the expected output tokens for a requested output.
func (e *OutputEstimate) Estimate(requested int64) float64 {
	if requested <= 0 {
		return e.UnboundedMean
	}
	return float64(requested) * e.Discount
}

// EngineView is an engine as frozen in a snapshot.
type EngineView struct {
	ID               string      `json:"id"`
	Role             Role        `json:"role"`
	TargetRole       Role        `json:"target_role"`
	State            EngineState `json:"state"`
	Live             bool        `json:"live"`
	KVCapacityTokens int64       `json:"kv_capacity_tokens"`
	Resident         Resident    `json:"resident"`
	LastMoveNs       int64       `json:"last_move_ns"`
	// Profile indexes Snapshot.Profiles; HasProfile is false when the
	// engine's (model, GPU) had none and the default profile scores it.
	Profile    int     `json:"profile"`
	HasProfile bool    `json:"has_profile"`
	DrainS     float64 `json:"drain_s"`
	// PendingOutputTokens: for a live serving decode engine, the output
	// its resident sequences are still expected to generate (see
	// Snapshot.PendingOutputTokens); 0 for other engines.
	PendingOutputTokens float64 `json:"pending_output_tokens"`
}

func (e *EngineView) serving() bool { return e.Live && e.State == StateServing }

// Basis values (decision_basis), a closed set.
const (
	// BasisOfferedDemand: demand is complete; splits are scored from the
	// offered work of both horizons and the profiles.
	BasisOfferedDemand = "offered_demand"
	// BasisObservedPressure: demand is incomplete and no recovery ratio
	// applies (no queued prefill or no prefill engine); splits are scored
	// from observed phase pressure scaled by engine counts.
	BasisObservedPressure = "observed_pressure"
	// BasisRecovery: demand is incomplete, queued_prefill_s > 0 and a
	// prefill engine exists; prefill pressure is recovery_prefill_ratio.
	BasisRecovery = "recovery"
	// BasisNoEngines: no live serving engine; the controller holds.
	BasisNoEngines = "no_engines"
)

// Bases lists every decision_basis value.
var Bases = []string{BasisOfferedDemand, BasisObservedPressure, BasisRecovery, BasisNoEngines, BasisUnprofiled}

// Snapshot is a decision's frozen input: values only. Scores computed
// from it do not change when live buckets, engines or profiles change.
type Snapshot struct {
	AtNs   int64  `json:"at_ns"`
	Timing Timing `json:"-"`
	Config Config `json:"-"`
	// Profiles are copies of the profile coefficients in use.
	Profiles []Profile    `json:"-"`
	Engines  []EngineView `json:"-"`

	Short HorizonDemand  `json:"short"`
	Long  HorizonDemand  `json:"long"`
	Out   OutputEstimate `json:"outputs"`
	// OutputScale: the factor on the mean output (both horizons) that
	// calibrates the decode price (an upper bound, or a learned estimate
	// while the mix holds) to measured TPOT (see calibrateOutputs); 0
	// when none applies.
	OutputScale float64 `json:"output_scale"`
	// DecodeCorrection scales the decode model by observed / modelled TPOT
	// at the current residency (1 without enough observations).
	DecodeCorrection float64 `json:"decode_correction"`
	// DecodeLoadCorrection scales the per-sequence decode cost by observed
	// / modelled at the current residency (1 without enough observations or
	// resident sequences); when it applies DecodeCorrection is 1.
	DecodeLoadCorrection float64 `json:"decode_load_correction"`
	// KVCorrection scales predicted decode KV by resident / predicted at
	// the current split while no engine is moving to decode: in [0.5, 1]
	// once the decode engines hold minLoadSeqs sequences each; up to
	// kvCorrectionMax when the resident KV is past target_pressure of the
	// pool's known capacity and above the prediction (1 otherwise).
	// Resident KV is a measurement of the present; the prediction
	// compounds the rate, output and TPOT estimates.
	KVCorrection    float64          `json:"kv_correction"`
	ObservedPrefill PhaseObservation `json:"observed_prefill"`
	ObservedDecode  PhaseObservation `json:"observed_decode"`
	PendingUnsized  int64            `json:"pending_unsized"`

	// Over live serving prefill engines.
	QueuedPrefillS  float64 `json:"queued_prefill_s"`
	RunningPrefillS float64 `json:"running_prefill_s"`
	PrefillEngines  int     `json:"prefill_engines"`
	DecodeEngines   int     `json:"decode_engines"`
	InTransition    int     `json:"in_transition"`
	// IncomingPrefill and IncomingDecode: live engines draining or
	// switching toward that role; splits are scored with them in it.
	IncomingPrefill  int     `json:"incoming_prefill"`
	IncomingDecode   int     `json:"incoming_decode"`
	ResidentDecodeKV float64 `json:"resident_decode_kv"`
	// PendingOutputTokens is the snapshot's pending output estimate (our
	// reading of the page's "pending output estimates"): the output still
	// to be generated by the sequences resident on live serving decode
	// engines, decode_seqs × half the long horizon's expected output per
	// request (a resident sequence is, on average, half way through; the
	// expected output is the step's output estimate, learned or not). It
	// is a value frozen with the snapshot; decode engines' drain costs
	// are its per-sequence share times the TPOT SLO.
	PendingOutputTokens float64 `json:"pending_output_tokens"`
	// SwitchS: seconds a role switch takes after its drain (measured
	// from completed moves, else the switch_s setting); the rollout adds
	// it to a mover's drain time.
	SwitchS float64 `json:"switch_s"`

	Incomplete       bool    `json:"incomplete"`
	IncompleteReason string  `json:"incomplete_reason,omitempty"`
	Basis            string  `json:"decision_basis"`
	RecoveryRatio    float64 `json:"recovery_prefill_ratio"`
	EstimateBuild    uint64  `json:"estimate_build"`
	// Evidence is the arrivals evidence wholly after EvidenceCutoffNs.
	Evidence         buckets.Evidence `json:"evidence"`
	EvidenceCutoffNs int64            `json:"evidence_cutoff_ns"`
	riskNow          bool
	// prefillWork: the prefill pool's measured work in engines
	// (measuredPrefillWork), NaN when not measured.
	prefillWork float64

	// Derived scoring tables (from the values above only).
	pm, dm []int32 // live serving prefill / decode engines by drain cost
	cum    cumulative
	base   [2]poolBase
	obsP   float64 // observed-basis prefill pressure at the current split
	obsD   float64
	// prefillBehind: the prefill pool measures a queue past the TTFT
	// SLO ((running + queued prefill s) / (engines × SLO) > 1), a
	// measured deficit like an observed latency past the SLO.
	prefillBehind bool
	// queueShort: the queued prefill over prefill engines × TTFT SLO,
	// its minimum over the short window's steps (recordQueue).
	queueShort float64
	// useObserved: with complete demand, observed pressure (enough
	// observations) still floors the prediction.
	useObserved bool
	// refProfile: the profile of the first prefill engine (else the
	// default); feasibleRatio: mean own prefill time of feasible requests
	// over that of all requests, per horizon.
	refProfile    int
	feasibleRatio [2]float64
	// Rollout tables: the serving pools without engines in transition
	// (srv, srvKVCap, srvKVUnknown), the coefficient of variation of a
	// feasible request's own prefill time per horizon, and reused event
	// buffers.
	srv          [2]poolBase
	srvKVCap     float64
	srvKVUnknown int32
	ownCV        [2]float64
	// prefillScale: per horizon, the rollout's prefill rate multiplier
	// where the model contradicts the measured TTFT (measuredPrefillScale).
	prefillScale [2]float64
	transit      []rolloutEvent // engines in transition (transitEvents)
	events       []rolloutEvent
}

// poolBase: per horizon, sums over the current pools.
type poolBase struct {
	muP, capD, aD float64
}

// cumulative: prefix sums over movers in cost order; index k = first k.
type cumulative struct {
	pMu, pCap         [2][]float64
	pA, pBacklog, pKV []float64
	pKVUnknown        []int32
	pDrain            []float64
	dMu, dCap         [2][]float64
	dA, dKVCap, dRes  []float64
	dKVUnknown        []int32
	dDrain            []float64
	dSeqs             []float64
	resSeqsD          float64
	backlog           float64
	kvCapD            float64
	kvUnknownD        int32
	resKVD            float64
}

func (s *Snapshot) profileOf(e *EngineView) *Profile { return &s.Profiles[e.Profile] }

// clone returns a deep copy (buffers not shared).
func (s *Snapshot) clone() *Snapshot {
	n := *s
	n.Profiles = slices.Clone(s.Profiles)
	n.Engines = slices.Clone(s.Engines)
	n.pm, n.dm = nil, nil
	n.cum = cumulative{}
	n.events, n.transit = nil, nil
	n.prepare()
	return &n
}

// moments accumulates request-shape moments from window reads.
type moments struct {
	n, sl, sl2, so, soc float64
	// Requests that can meet the TTFT SLO at all (input <= feasibleMax).
	feasibleMax       int64
	nf, slf, sl2f     float64
	maxIn, maxCtx     int64
	overflow, unsized int64
	invalid           int
	incomplete        bool
}

func (m *moments) add(l, req, count int64, est *OutputEstimate) {
	c := float64(count)
	o := est.Estimate(req)
	lf := float64(l)
	m.n += c
	m.sl += c * lf
	m.sl2 += c * lf * lf
	if l <= m.feasibleMax {
		m.nf += c
		m.slf += c * lf
		m.sl2f += c * lf * lf
	}
	m.so += c * o
	m.soc += c * o * (lf + o/2)
	m.maxIn = max(m.maxIn, l)
	ctx := l + int64(math.Ceil(o))
	if req > 0 {
		ctx = l + req
	}
	m.maxCtx = max(m.maxCtx, ctx)
}

// addWindow adds one window read: its exact cells and its overflow cohort
// priced at the cohort's largest input and requested output.
func (m *moments) addWindow(cells []buckets.Cell, w buckets.Window, est *OutputEstimate) {
	for i := range cells {
		if cells[i].Count > 0 {
			m.add(cells[i].Shape.Input, cells[i].Shape.Output, cells[i].Count, est)
		}
	}
	if w.Overflow.Count > 0 {
		m.add(w.Overflow.MaxInput, w.Overflow.MaxOutput, w.Overflow.Count, est)
	}
	m.overflow += w.Overflow.Count
	m.unsized += w.Unsized
	m.invalid += w.InvalidBuckets
	m.incomplete = m.incomplete || w.DecodeIncomplete()
}

// fill writes the horizon from the moments; fromNs is where the data
// starts (the boundary bucket's start).
func (m *moments) fill(h *HorizonDemand, fromNs, toNs int64) {
	*h = HorizonDemand{FromNs: fromNs, ToNs: toNs, SpanS: float64(toNs-fromNs) / 1e9,
		MaxInput: m.maxIn, MaxCtxPerSeq: m.maxCtx, Overflow: m.overflow, Unsized: m.unsized,
		InvalidBuckets: m.invalid, DecodeIncomplete: m.incomplete, Requests: m.n}
	if h.SpanS > 0 {
		h.RatePerS = m.n / h.SpanS
	}
	if m.n > 0 {
		h.MeanInput = m.sl / m.n
		h.MeanInputSq = m.sl2 / m.n
		h.MeanOutput = m.so / m.n
	}
	if m.so > 0 {
		h.DecodeCtx = m.soc / m.so
	}
	if m.nf > 0 {
		h.FeasibleShare = m.nf / m.n
		h.FeasibleMeanInput = m.slf / m.nf
		h.FeasibleMeanInputSq = m.sl2f / m.nf
	}
}

// Why output discounts are not learned (OutputEstimate.Reason).
const (
	// OutputsOverflow: the outputs history holds overflow (the spec turns
	// learning off until it expires); requested outputs and the default
	// unbounded mean stand in, which over-predict decode.
	OutputsOverflow = "overflow"
	// OutputsNoObservations: nothing has completed yet.
	OutputsNoObservations = "no_observations"
)

// buildOutputEstimate learns output discounts from the outputs history
// cells (Input = requested, Output = actual).
func buildOutputEstimate(cells []buckets.Cell, w buckets.Window, overflowRetained bool, defaultOut int64) OutputEstimate {
	e := OutputEstimate{Discount: 1, UnboundedMean: float64(defaultOut), Overflow: w.Overflow.Count}
	var req, act, zeroN, zeroAct float64
	for i := range cells {
		c := float64(cells[i].Count)
		if c <= 0 {
			continue
		}
		e.Observations += cells[i].Count
		if cells[i].Shape.Input > 0 {
			req += c * float64(cells[i].Shape.Input)
			act += c * float64(cells[i].Shape.Output)
		} else {
			zeroN += c
			zeroAct += c * float64(cells[i].Shape.Output)
		}
	}
	e.Observations += w.Overflow.Count
	switch {
	case e.Overflow > 0 || overflowRetained:
		e.Reason = OutputsOverflow
		return e
	case e.Observations == 0:
		e.Reason = OutputsNoObservations
		return e
	}
	e.Learned = true
	if req > 0 {
		e.Discount = min(1, act/req)
	}
	if zeroN > 0 {
		e.UnboundedMean = zeroAct / zeroN
	}
	return e
}

// prepare derives the scoring tables from the snapshot's values.
func (s *Snapshot) prepare() {
	s.pm, s.dm = s.pm[:0], s.dm[:0]
	s.QueuedPrefillS, s.RunningPrefillS, s.ResidentDecodeKV, s.PendingOutputTokens = 0, 0, 0, 0
	residentSeqs := int64(0)
	s.PrefillEngines, s.DecodeEngines, s.InTransition = 0, 0, 0
	s.IncomingPrefill, s.IncomingDecode = 0, 0
	tpot := s.Timing.TPOTSLOS
	for i := range s.Engines {
		e := &s.Engines[i]
		if e.State != StateServing {
			s.InTransition++
			if e.Live {
				switch e.TargetRole {
				case RolePrefill:
					s.IncomingPrefill++
				case RoleDecode:
					s.IncomingDecode++
				}
			}
		}
		if !e.serving() {
			continue
		}
		switch e.Role {
		case RolePrefill:
			e.DrainS = e.Resident.QueuedPrefillS + e.Resident.RunningPrefillS
			s.QueuedPrefillS += e.Resident.QueuedPrefillS
			s.RunningPrefillS += e.Resident.RunningPrefillS
			s.PrefillEngines++
			s.pm = append(s.pm, int32(i))
		case RoleDecode:
			e.DrainS, e.PendingOutputTokens = 0, 0
			if e.Resident.DecodeSeqs > 0 {
				e.PendingOutputTokens = float64(e.Resident.DecodeSeqs) * s.Long.MeanOutput / 2
				s.PendingOutputTokens += e.PendingOutputTokens
				e.DrainS = s.Long.MeanOutput / 2 * tpot
			}
			s.ResidentDecodeKV += float64(e.Resident.KVTokens)
			residentSeqs += e.Resident.DecodeSeqs
			s.DecodeEngines++
			s.dm = append(s.dm, int32(i))
		}
	}
	byCost := func(a, b int32) int {
		ea, eb := &s.Engines[a], &s.Engines[b]
		if ea.DrainS != eb.DrainS {
			if ea.DrainS < eb.DrainS {
				return -1
			}
			return 1
		}
		return strings.Compare(ea.ID, eb.ID)
	}
	slices.SortFunc(s.pm, byCost)
	slices.SortFunc(s.dm, byCost)

	// Per-profile, per-horizon engine parameters.
	hz := [2]*HorizonDemand{&s.Short, &s.Long}
	ref := &s.Profiles[s.refProfile]
	for h := 0; h < 2; h++ {
		s.feasibleRatio[h] = 1
		d := hz[h]
		if d.FeasibleShare > 0 && ref.HasPrefill {
			all := ref.Prefill.A + ref.Prefill.B*d.MeanInput + ref.Prefill.C*d.MeanInputSq
			f := ref.Prefill.A + ref.Prefill.B*d.FeasibleMeanInput + ref.Prefill.C*d.FeasibleMeanInputSq
			if all > 0 && f > 0 {
				s.feasibleRatio[h] = f / all
			}
		}
	}
	c := &s.cum
	grow := func(b []float64, n int) []float64 {
		if cap(b) < n {
			b = make([]float64, n)
		}
		b = b[:n]
		b[0] = 0
		return b
	}
	growI := func(b []int32, n int) []int32 {
		if cap(b) < n {
			b = make([]int32, n)
		}
		b = b[:n]
		b[0] = 0
		return b
	}
	np, nd := len(s.pm)+1, len(s.dm)+1
	for h := 0; h < 2; h++ {
		c.pMu[h], c.pCap[h] = grow(c.pMu[h], np), grow(c.pCap[h], np)
		c.dMu[h], c.dCap[h] = grow(c.dMu[h], nd), grow(c.dCap[h], nd)
	}
	c.pA, c.pBacklog, c.pKV, c.pDrain = grow(c.pA, np), grow(c.pBacklog, np), grow(c.pKV, np), grow(c.pDrain, np)
	c.pKVUnknown = growI(c.pKVUnknown, np)
	c.dA, c.dKVCap, c.dRes, c.dDrain = grow(c.dA, nd), grow(c.dKVCap, nd), grow(c.dRes, nd), grow(c.dDrain, nd)
	c.dKVUnknown = growI(c.dKVUnknown, nd)
	c.dSeqs = grow(c.dSeqs, nd)
	s.base = [2]poolBase{}
	c.backlog, c.kvCapD, c.kvUnknownD, c.resKVD, c.resSeqsD = 0, 0, 0, 0, 0
	for k, i := range s.pm {
		e := &s.Engines[i]
		p := s.profileOf(e)
		for h := 0; h < 2; h++ {
			m := prefillRate(p, hz[h])
			s.base[h].muP += m
			c.pMu[h][k+1] = c.pMu[h][k] + m
			c.pCap[h][k+1] = c.pCap[h][k] + decodeCap(p, hz[h])
		}
		c.pA[k+1] = c.pA[k] + p.Decode.A
		bl := e.Resident.QueuedPrefillS + e.Resident.RunningPrefillS
		c.backlog += bl
		c.pBacklog[k+1] = c.pBacklog[k] + bl
		c.pKV[k+1] = c.pKV[k] + float64(e.KVCapacityTokens)
		c.pKVUnknown[k+1] = c.pKVUnknown[k]
		if e.KVCapacityTokens <= 0 {
			c.pKVUnknown[k+1]++
		}
		c.pDrain[k+1] = c.pDrain[k] + e.DrainS
	}
	for k, i := range s.dm {
		e := &s.Engines[i]
		p := s.profileOf(e)
		for h := 0; h < 2; h++ {
			cp := decodeCap(p, hz[h])
			s.base[h].capD += cp
			s.base[h].aD += p.Decode.A
			c.dMu[h][k+1] = c.dMu[h][k] + prefillRate(p, hz[h])
			c.dCap[h][k+1] = c.dCap[h][k] + cp
		}
		c.dA[k+1] = c.dA[k] + p.Decode.A
		c.kvCapD += float64(e.KVCapacityTokens)
		c.dKVCap[k+1] = c.dKVCap[k] + float64(e.KVCapacityTokens)
		c.dKVUnknown[k+1] = c.dKVUnknown[k]
		if e.KVCapacityTokens <= 0 {
			c.kvUnknownD++
			c.dKVUnknown[k+1]++
		}
		c.resKVD += float64(e.Resident.KVTokens)
		c.dRes[k+1] = c.dRes[k] + float64(e.Resident.KVTokens)
		c.dDrain[k+1] = c.dDrain[k] + e.DrainS
		c.resSeqsD += float64(e.Resident.DecodeSeqs)
		c.dSeqs[k+1] = c.dSeqs[k] + float64(e.Resident.DecodeSeqs)
	}
	s.srv, s.srvKVCap, s.srvKVUnknown = s.base, c.kvCapD, c.kvUnknownD
	for h := 0; h < 2; h++ {
		s.ownCV[h] = ownPrefillCV(ref, hz[h])
	}
	s.transitEvents()

	// Engines moving toward a role count in it (capacity, KV), not as
	// movers: a split is where the pools stand once in-flight moves land.
	for i := range s.Engines {
		e := &s.Engines[i]
		if e.State == StateServing || !e.Live {
			continue
		}
		p := s.profileOf(e)
		switch e.TargetRole {
		case RolePrefill:
			for h := 0; h < 2; h++ {
				s.base[h].muP += prefillRate(p, hz[h])
			}
		case RoleDecode:
			for h := 0; h < 2; h++ {
				s.base[h].capD += decodeCap(p, hz[h])
				s.base[h].aD += p.Decode.A
			}
			c.kvCapD += float64(e.KVCapacityTokens)
			if e.KVCapacityTokens <= 0 {
				c.kvUnknownD++
			}
		}
	}

	s.prefillBehind = s.PrefillEngines > 0 && s.QueuedPrefillS > 0 &&
		(s.RunningPrefillS+s.QueuedPrefillS)/(float64(s.PrefillEngines)*s.Timing.TTFTSLOS) > 1
	s.calibrateOutputs()
	s.KVCorrection = 1
	if s.DecodeEngines > 0 && s.IncomingDecode == 0 {
		pred := s.closedSplit(0).kvPred
		kvBound := c.kvUnknownD == 0 && s.ResidentDecodeKV > s.Config.TargetPressure*c.kvCapD
		switch {
		case pred <= 0:
		case kvBound && s.ResidentDecodeKV > pred:
			// A pool measured past target_pressure of its KV holds more
			// than the model says (outputs longer than the completions
			// have shown so far, slower steps): the measurement wins, up
			// to kvCorrectionMax, at any residency.
			s.KVCorrection = min(kvCorrectionMax, s.ResidentDecodeKV/pred)
		case residentSeqs >= minLoadSeqs*int64(s.DecodeEngines):
			s.KVCorrection = max(0.5, min(1, s.ResidentDecodeKV/pred))
		}
	}

	// Basis and the observed-pressure bases.
	s.Incomplete, s.IncompleteReason = false, ""
	switch {
	case s.PendingUnsized > s.Config.PendingTolerance:
		s.Incomplete, s.IncompleteReason = true, "unsized_pending"
	case s.Long.DecodeIncomplete || s.Short.DecodeIncomplete:
		s.Incomplete, s.IncompleteReason = true, "decode_overflow_zero_output"
	}
	s.RecoveryRatio = RecoveryPrefillRatio(s.ObservedPrefill.Mean, s.RunningPrefillS, s.QueuedPrefillS, s.PrefillEngines, s.Timing.TTFTSLOS)
	switch {
	case s.PrefillEngines+s.DecodeEngines == 0:
		s.Basis = BasisNoEngines
	case s.hasUnprofiled():
		s.Basis = BasisUnprofiled
	case !s.Incomplete:
		s.Basis = BasisOfferedDemand
	case s.QueuedPrefillS > 0 && s.PrefillEngines > 0:
		s.Basis = BasisRecovery
	default:
		s.Basis = BasisObservedPressure
	}
	s.obsP = s.ObservedPrefill.Mean
	if s.Basis == BasisRecovery || s.Basis == BasisUnprofiled {
		s.obsP = s.RecoveryRatio
	}
	s.obsD = s.ObservedDecode.Mean
	s.prefillScale = [2]float64{1, 1}
	if s.byRollout() && !s.prefillBehind && s.ObservedPrefill.Count >= s.Config.MinObservations {
		for h, hd := range [2]*HorizonDemand{&s.Short, &s.Long} {
			s.prefillScale[h] = measuredPrefillScale(hd.RatePerS, s.srv[h].muP, s.PrefillEngines, s.ObservedPrefill.Mean*s.Timing.TTFTSLOS)
		}
	}
	s.useObserved = s.ObservedPrefill.Count >= s.Config.MinObservations || s.ObservedDecode.Count >= s.Config.MinObservations
	if s.ObservedPrefill.Count < s.Config.MinObservations && s.Basis == BasisOfferedDemand {
		s.obsP = 0
	}
	if s.ObservedDecode.Count < s.Config.MinObservations && s.Basis == BasisOfferedDemand {
		s.obsD = 0
	}
}

// RecoveryPrefillRatio is the spec's formula: with queued prefill and at
// least one prefill engine, max(observed, (resident + queued prefill s) /
// (prefill engines × TTFT SLO s)); otherwise the observed prefill
// pressure.
func RecoveryPrefillRatio(observed, residentPrefillS, queuedPrefillS float64, prefillEngines int, ttftSLOS float64) float64 {
	if queuedPrefillS > 0 && prefillEngines > 0 {
		return max(observed, (residentPrefillS+queuedPrefillS)/(float64(prefillEngines)*ttftSLOS))
	}
	return observed
}

// calibrateOutputs: with overflow in the outputs history, decode demand is
// priced at the overflow cohorts' largest requested outputs and the
// default for unbounded ones (the spec's rule), which is an upper bound.
// Once TPOT is measured (min_observations), the mean output is scaled
// down, never up, so that the decode model at the current split and its
// delivered rate over the long horizon predicts the measured TPOT: the
// model's shape (batching, its capacity cliff, KV) is kept and its level
// comes from the measurement. Our reading: the spec fixes how the cohort
// is priced, not that an upper bound outweighs a measurement in scoring.
// Measured TPOT lags a prefill backlog's release (decode is starved while
// prefill is behind), so while the prefill queue is past the TTFT SLO the
// upper bound stands. A learned estimate is calibrated the same way while
// the arriving mix is not heavier than the measured one (short-window
// mean output at most the long window's); with no completed output yet
// there is no estimate to calibrate.
func (s *Snapshot) calibrateOutputs() {
	s.OutputScale = 0
	nD := s.DecodeEngines + s.IncomingDecode
	if s.ObservedDecode.Count < s.Config.MinObservations || s.ObservedDecode.Mean > s.Config.TargetPressure ||
		s.DecodeEngines == 0 || s.prefillBehind {
		return
	}
	// An upper bound (overflowed outputs) is calibrated whatever the mix;
	// a learned estimate only while the arriving mix is not heavier than
	// the one TPOT measured: a short window whose mean output exceeds the
	// long window's is a shift the resident sequences do not show yet.
	switch {
	case s.Out.Reason == OutputsOverflow:
	case s.Out.Learned:
		if s.Short.MeanOutput > s.Long.MeanOutput {
			return
		}
	default:
		return
	}
	tpotObs := s.ObservedDecode.Mean * s.Timing.TPOTSLOS
	b := &s.base[1]
	if b.capD <= 0 || tpotObs <= 0 {
		return
	}
	// The model's utilization at the current split over the long
	// horizon, and the one at which its TPOT (decodeFloor / (1 − ρ)) is
	// the measured one. One factor serves both horizons, as the output
	// estimate it scales does (a spec rule).
	rhoModel := s.decodeUtil(deliveredRate(&s.Long, s.PrefillEngines+s.IncomingPrefill, b.muP, s.cum.backlog)*s.Long.MeanOutput, b.capD)
	rhoObs := 1 - s.decodeFloor(b.aD, nD)/tpotObs
	if rhoModel > 0 && rhoObs < rhoModel {
		s.OutputScale = max(minOutputScale, rhoObs/rhoModel)
	}
}

// minOutputScale bounds the calibration: TPOT measured at the step's floor
// says the outputs are far below the upper bound, not how far.
const minOutputScale = 0.05
