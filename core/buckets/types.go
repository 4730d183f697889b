package buckets

// This file holds the value types that other packages (the controller, the
// core facade, the service) exchange with the bucket structures. They hold
// values only: nothing in them points into live buckets.

// ExactCells is the number of exact shape cells in every demand bucket.
const ExactCells = 128

// Kind names one of the three demand histories.
type Kind uint8

const (
	// KindArrivals: sized offers by shape (input tokens, requested output
	// tokens) at their arrival time; retained for one demand window.
	KindArrivals Kind = iota
	// KindResidency: work placed on engines (admitted requests) by shape
	// (input tokens, requested output tokens) at admission time; retained
	// for one demand window.
	KindResidency
	// KindOutputs: completed requests by shape (requested output tokens,
	// actual output tokens) at completion time; retained for four demand
	// windows.
	KindOutputs
	// NumKinds is the number of kinds.
	NumKinds
)

// String returns the kind's name as used in JSON and metric labels.
func (k Kind) String() string {
	switch k {
	case KindArrivals:
		return "arrivals"
	case KindResidency:
		return "residency"
	case KindOutputs:
		return "outputs"
	}
	return "unknown"
}

// Shape is a request's size in tokens. For arrivals and residency Input is
// the input (prompt) length and Output the requested output length
// (max_tokens; 0 when the client gave none). For outputs Input is the
// requested output length and Output the actual number of generated tokens.
type Shape struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// Cell is one exact shape and its count within one bucket.
type Cell struct {
	Shape Shape `json:"shape"`
	Count int64 `json:"count"`
}

// Cohort is an overflow cohort: every observation that found no free exact
// cell. It keeps every count and is priced from its largest input and
// largest requested output.
type Cohort struct {
	Count     int64 `json:"count"`
	MaxInput  int64 `json:"max_input"`
	MaxOutput int64 `json:"max_output"`
	// ZeroOutput is set when an overflowed observation had requested
	// output 0: the cohort's decode demand cannot be priced, so decode
	// demand is incomplete.
	ZeroOutput bool `json:"zero_output"`
}

// Window is the summary of a window query. The query includes the whole
// bucket that contains the window's start (the boundary bucket), so FromNs
// may be up to one bucket width before the requested start.
type Window struct {
	FromNs  int64 `json:"from_ns"`
	ToNs    int64 `json:"to_ns"`
	Buckets int   `json:"buckets"`
	// Exact is the count held in exact cells (the cells returned).
	Exact int64 `json:"exact"`
	// Overflow merges the overflow cohorts of every bucket in the window.
	Overflow Cohort `json:"overflow"`
	// Unsized counts offers that terminated before sizing.
	Unsized int64 `json:"unsized"`
	// InvalidBuckets counts buckets whose boundary evidence was
	// invalidated by a repricing.
	InvalidBuckets int `json:"invalid_buckets"`
}

// Count is every sized observation in the window (exact and overflow).
func (w Window) Count() int64 { return w.Exact + w.Overflow.Count }

// DecodeIncomplete reports whether the window's decode demand cannot be
// priced because an overflow cohort holds a zero requested output.
func (w Window) DecodeIncomplete() bool { return w.Overflow.ZeroOutput }

// Evidence is the answer to an evidence query: only buckets lying wholly
// after the cutoff, and not invalidated, are counted.
type Evidence struct {
	// SpanNs is from the start of the oldest counted bucket to the end of
	// the newest counted bucket (0 when none).
	SpanNs int64 `json:"span_ns"`
	// Observations counts sized observations (exact and overflow) in the
	// counted buckets.
	Observations int64 `json:"observations"`
	Buckets      int   `json:"buckets"`
	// Overflow counts overflow observations in the counted buckets.
	Overflow int64 `json:"overflow"`
	// SkippedInvalid counts buckets after the cutoff that were not counted
	// because their boundary evidence was invalidated.
	SkippedInvalid int `json:"skipped_invalid"`
	// SkippedStraddling is 1 when the bucket containing the cutoff held
	// observations and was therefore left out.
	SkippedStraddling int `json:"skipped_straddling"`
}

// KindStats is the introspection of one demand history.
type KindStats struct {
	RetainedCells        int64 `json:"retained_cells"`
	CellLimit            int64 `json:"cell_limit"`
	Observations         int64 `json:"observations"`
	OverflowObservations int64 `json:"overflow_observations"`
}

// UnsizedStats is demand_history.unsized.
type UnsizedStats struct {
	// Pending counts request bodies still being read.
	Pending int64 `json:"pending"`
	// Observations counts retained offers that terminated before sizing.
	Observations int64 `json:"observations"`
}

// DemandHistory is the demand_history object of /v1/state.
type DemandHistory struct {
	Arrivals  KindStats    `json:"arrivals"`
	Residency KindStats    `json:"residency"`
	Outputs   KindStats    `json:"outputs"`
	Unsized   UnsizedStats `json:"unsized"`
}

// Outcome is how a request ended, for SLO attainment.
type Outcome uint8

const (
	OutcomeCompleted Outcome = iota
	OutcomeFailed
	OutcomeExpired
	// OutcomeRefused: predictively refused by the router (admission
	// control predicted an SLO miss).
	OutcomeRefused
	NumOutcomes
)

// String returns the outcome's name as used in JSON and metric labels.
func (o Outcome) String() string {
	switch o {
	case OutcomeCompleted:
		return "completed"
	case OutcomeFailed:
		return "failed"
	case OutcomeExpired:
		return "expired"
	case OutcomeRefused:
		return "refused"
	}
	return "unknown"
}

// Counts are the attainment counts of one outcome.
type Counts struct {
	TTFTMet int64 `json:"ttft_met"`
	TPOTMet int64 `json:"tpot_met"`
	Total   int64 `json:"total"`
}

// AttainmentWindow is the answer to an attainment window query (boundary
// bucket included).
type AttainmentWindow struct {
	FromNs    int64               `json:"from_ns"`
	ToNs      int64               `json:"to_ns"`
	Buckets   int                 `json:"buckets"`
	ByOutcome [NumOutcomes]Counts `json:"by_outcome"`
}
