package controller

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
)

// Gate names (blocked_gate values), in evaluation order.
const (
	GateRoleFloors       = "role_floors"
	GateLiveAvailability = "live_availability"
	GateSourcePressure   = "source_pressure"
	GateKVLimit          = "kv_limit"
	GateDemandEvidence   = "demand_evidence"
	GateCooldown         = "cooldown"
	GateDwell            = "dwell"
	GateProfileCoverage  = "profile_coverage"
	GateConfirmation     = "confirmation"
)

// Gates lists every gate in evaluation order.
var Gates = []string{GateRoleFloors, GateLiveAvailability, GateSourcePressure, GateKVLimit,
	GateDemandEvidence, GateCooldown, GateDwell, GateProfileCoverage, GateConfirmation}

// Actions of a decision.
const (
	ActionHold    = "hold"
	ActionMove    = "move"
	ActionBlocked = "blocked"
)

// GateResult is one gate's verdict on a proposed move (values rounded).
type GateResult struct {
	Gate   string  `json:"gate"`
	Pass   bool    `json:"pass"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Detail string  `json:"detail,omitempty"`
}

// DemandEvidence is the consolidation evidence captured on every
// decode-to-prefill gate evaluation.
type DemandEvidence struct {
	SpanS                 float64 `json:"span_s"`
	Arrivals              int64   `json:"arrivals"`
	RequiredSpanS         float64 `json:"required_span_s"`
	RequiredArrivals      int64   `json:"required_arrivals"`
	MaxSpanS              float64 `json:"max_span_s"`
	Closed                bool    `json:"closed"`
	RiskKind              string  `json:"risk_kind"`
	RiskAgeS              float64 `json:"risk_age_s"`
	RiskEvents            int     `json:"risk_events"`
	ShortDecodeEngines    int     `json:"short_decode_engines"`
	LongDecodeEngines     int     `json:"long_decode_engines"`
	TrendRatio            float64 `json:"trend_ratio"`
	EnvelopeDecodeEngines int     `json:"envelope_decode_engines"`
	BlockedGate           string  `json:"blocked_gate"`
}

// SnapshotSummary is the journal's view of the frozen snapshot (rounded).
type SnapshotSummary struct {
	Engines              int              `json:"engines"`
	PrefillEngines       int              `json:"prefill_engines"`
	DecodeEngines        int              `json:"decode_engines"`
	InTransition         int              `json:"in_transition"`
	PendingUnsized       int64            `json:"pending_unsized"`
	Incomplete           bool             `json:"incomplete"`
	IncompleteReason     string           `json:"incomplete_reason,omitempty"`
	Short                HorizonDemand    `json:"short"`
	Long                 HorizonDemand    `json:"long"`
	Outputs              OutputEstimate   `json:"outputs"`
	DecodeCorrection     float64          `json:"decode_correction"`
	DecodeLoadCorrection float64          `json:"decode_load_correction"`
	KVCorrection         float64          `json:"kv_correction"`
	OutputScale          float64          `json:"output_scale"`
	ObservedPrefill      PhaseObservation `json:"observed_prefill"`
	ObservedDecode       PhaseObservation `json:"observed_decode"`
	ResidentDecodeKV     float64          `json:"resident_decode_kv"`
	// PendingOutputTokens: the snapshot's pending output estimate (see
	// Snapshot.PendingOutputTokens).
	PendingOutputTokens float64 `json:"pending_output_tokens"`
	EstimateBuild       uint64  `json:"estimate_build"`
}

// Decision is one controller step: the journal record. Every float in it
// is rounded (roundJ); the controller judged the full-precision values.
type Decision struct {
	Seq     uint64 `json:"seq"`
	AtNs    int64  `json:"at_ns"`
	Basis   string `json:"decision_basis"`
	Action  string `json:"action"`
	Reason  string `json:"reason,omitempty"`
	Moves   []Move `json:"moves,omitempty"`
	Blocked string `json:"blocked_gate,omitempty"`
	// Direction of the proposed move: "decode_to_prefill",
	// "prefill_to_decode" or "" on a hold.
	Direction            string          `json:"direction,omitempty"`
	Gates                []GateResult    `json:"gates,omitempty"`
	Snapshot             SnapshotSummary `json:"snapshot"`
	Current              SplitScore      `json:"current"`
	Best                 SplitScore      `json:"best"`
	Proposed             *SplitScore     `json:"proposed,omitempty"`
	Improvement          float64         `json:"improvement"`
	RecoveryPrefillRatio float64         `json:"recovery_prefill_ratio"`
	QueuedPrefillS       float64         `json:"queued_prefill_s"`
	// MeasuredPrefillWork: the prefill pool's work in engines, the mean
	// busy share of the live serving prefill engines (busy_s of their
	// latency intervals) × their number; absent until measured. On
	// overflow-priced demand it bounds moves toward decode (source_pressure).
	MeasuredPrefillWork  *float64 `json:"measured_prefill_work,omitempty"`
	ObservedPrefillRatio float64  `json:"observed_prefill_ratio"`
	ObservedDecodeRatio  float64  `json:"observed_decode_ratio"`
	// ObservedPrefillMissShare: the share of first tokens over the short
	// horizon that came past the TTFT SLO (observed_prefill over / count;
	// a request that expired waiting past the SLO for its first token
	// counts as one past it).
	ObservedPrefillMissShare float64 `json:"observed_prefill_miss_share"`
	// ObservedDecodeMissShare: the share of requests completed over the
	// short horizon whose TPOT was past the TPOT SLO.
	ObservedDecodeMissShare float64 `json:"observed_decode_miss_share"`
	Confirmations           int     `json:"confirmations"`
	// KVExhaustion: the decode pool's resident KV, at its recent growth,
	// passes kv_headroom of capacity within kv_lead_s (a decode deficit
	// although both phases may be within target pressure).
	KVExhaustion   bool            `json:"kv_exhaustion_projected,omitempty"`
	DemandEvidence *DemandEvidence `json:"demand_evidence,omitempty"`
	// Profiles priced this decision: each profile of a live serving
	// engine, its origin and source, and its calibration fit error.
	Profiles []ProfileUse `json:"profiles,omitempty"`
	// Unprofiled names "model on GPU" of the live serving engines
	// without a profile (they put the decision on
	// observed_pressure_unprofiled).
	Unprofiled []string `json:"unprofiled,omitempty"`
}

// roundJ rounds a value for the journal and state: 6 decimals; NaN as 0
// and infinities as ±1e12 (JSON has neither).
func roundJ(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case x > 1e12:
		return 1e12
	case x < -1e12:
		return -1e12
	}
	return math.Round(x*1e6) / 1e6
}

func (h HorizonDemand) rounded() HorizonDemand {
	h.SpanS, h.Requests, h.RatePerS = roundJ(h.SpanS), roundJ(h.Requests), roundJ(h.RatePerS)
	h.MeanInput, h.MeanInputSq, h.MeanOutput, h.DecodeCtx = roundJ(h.MeanInput), roundJ(h.MeanInputSq), roundJ(h.MeanOutput), roundJ(h.DecodeCtx)
	h.FeasibleShare, h.FeasibleMeanInput, h.FeasibleMeanInputSq = roundJ(h.FeasibleShare), roundJ(h.FeasibleMeanInput), roundJ(h.FeasibleMeanInputSq)
	return h
}

func (s SplitScore) rounded() SplitScore {
	s.PrefillPressure, s.DecodePressure = roundJ(s.PrefillPressure), roundJ(s.DecodePressure)
	s.ShortPrefill, s.LongPrefill = roundJ(s.ShortPrefill), roundJ(s.LongPrefill)
	s.ShortDecode, s.LongDecode = roundJ(s.ShortDecode), roundJ(s.LongDecode)
	s.KVNeedTokens, s.KVCapacityTokens = roundJ(s.KVNeedTokens), roundJ(s.KVCapacityTokens)
	s.DrainS, s.Score, s.MissShare = roundJ(s.DrainS), roundJ(s.Score), roundJ(s.MissShare)
	return s
}

func (p PhaseObservation) rounded() PhaseObservation {
	p.Mean, p.Max = roundJ(p.Mean), roundJ(p.Max)
	return p
}

// Sink receives every decision (the journal).
type Sink interface {
	// Write records d. It returns nil only when d and every record
	// before it are written: a sink that keeps failed records to retry
	// writes them first. The controller holds a decision's moves until
	// then (Controller.Step).
	Write(d *Decision) error
	Close() error
}

// JSONLinesSink appends one JSON object per line to a file, flushed per
// decision. Safe for concurrent use.
type JSONLinesSink struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// NewJSONLinesSink opens (creating or appending to) path.
func NewJSONLinesSink(path string) (*JSONLinesSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &JSONLinesSink{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// Write appends d as one line and flushes it to the file.
func (s *JSONLinesSink) Write(d *Decision) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("journal encode: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return fmt.Errorf("journal write: %w", os.ErrClosed)
	}
	s.w.Write(b)
	s.w.WriteByte('\n')
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("journal write: %w", err)
	}
	return nil
}

// Close flushes, syncs and closes the file.
func (s *JSONLinesSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := errors.Join(s.w.Flush(), s.f.Sync(), s.f.Close())
	s.f = nil
	if err != nil {
		return fmt.Errorf("journal close: %w", err)
	}
	return nil
}

// LoadJournal reads the last limit decisions of a JSON-lines journal
// (all when limit <= 0). A torn last line is skipped.
func LoadJournal(path string, limit int) ([]Decision, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load journal: %w", err)
	}
	defer f.Close()
	var out []Decision
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var d Decision
		if json.Unmarshal(sc.Bytes(), &d) != nil {
			continue
		}
		out = append(out, d)
		if limit > 0 && len(out) > 2*limit {
			out = append(out[:0], out[len(out)-limit:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load journal %s: %w", path, err)
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// journalRing keeps the most recent decisions.
type journalRing struct {
	buf  []Decision
	next int
	n    int
}

func (r *journalRing) add(d Decision) {
	r.buf[r.next] = d
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// since returns up to limit decisions with Seq > sinceSeq, oldest first.
func (r *journalRing) since(sinceSeq uint64, limit int) []Decision {
	var out []Decision
	start := (r.next - r.n + len(r.buf)) % len(r.buf)
	for i := 0; i < r.n; i++ {
		d := &r.buf[(start+i)%len(r.buf)]
		if d.Seq > sinceSeq {
			if limit > 0 && len(out) >= limit {
				break
			}
			out = append(out, *d)
		}
	}
	return out
}
