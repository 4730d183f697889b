package wire

import (
	"errors"
	"fmt"
	"math"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Version is the wire protocol version carried in every Batch.
const Version = 1

// Kind names a report's payload.
type Kind string

const (
	KindHello     Kind = "hello"
	KindSnapshot  Kind = "snapshot"
	KindLiveness  Kind = "liveness"
	KindHeartbeat Kind = "heartbeat"
)

// Limits on what one report may carry; larger ones are refused.
const (
	MaxEnginesPerNode  = 256
	MaxGPUsPerNode     = 64
	MaxReportsPerBatch = 4096
	maxStringLen       = 256
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("wire: invalid report")

// Batch is one POST body.
type Batch struct {
	Version int      `json:"version"`
	Reports []Report `json:"reports"`
}

// Report is one message from a node's agent. Exactly one of Hello,
// Snapshot, Liveness is set, matching Kind; a heartbeat carries none.
type Report struct {
	Kind  Kind   `json:"kind"`
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
	// SentNs is the agent's clock when the report was made (Unix ns);
	// informational: the core judges freshness by its own clock.
	SentNs   int64     `json:"sent_ns"`
	Hello    *Hello    `json:"hello,omitempty"`
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	Liveness *Liveness `json:"liveness,omitempty"`
}

// Hello opens an epoch: what the node is.
type Hello struct {
	AgentVersion string `json:"agent_version"`
	GPUs         []GPU  `json:"gpus"`
	// NVML is "ok" or the reason it is degraded (e.g. library not found).
	NVML string `json:"nvml"`
	// Liveness is the liveness source: "ebpf", "proc" or "none".
	Liveness string   `json:"liveness"`
	Engines  []string `json:"engines"`
}

// GPU is one physical GPU (or MIG instance) of the node.
type GPU struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"`
	UsedBytes   uint64 `json:"used_bytes"`
	MIG         bool   `json:"mig,omitempty"`
}

// Snapshot is the full state of every engine on the node; an engine the
// node reported before and no longer lists is no longer live.
type Snapshot struct {
	Engines []EngineReport `json:"engines"`
}

// EngineReport is one engine's state as the agent sees it.
type EngineReport struct {
	ID    string          `json:"id"`
	Model string          `json:"model"`
	GPU   string          `json:"gpu"`
	Role  controller.Role `json:"role"`
	Live  bool            `json:"live"`
	// Resident is read from the engine's own metrics.
	Resident controller.Resident `json:"resident"`
	// RunningRequests and QueuedRequests are the engine's own counts (-1
	// unknown); Resident carries them priced in prefill seconds.
	RunningRequests int64 `json:"running_requests"`
	QueuedRequests  int64 `json:"queued_requests"`
	// KVCapacityTokens is the physical KV limit in tokens; 0 unknown.
	KVCapacityTokens int64 `json:"kv_capacity_tokens"`
	// KVSource says where the limit came from ("engine", "nvml_bound", "").
	KVSource string `json:"kv_source,omitempty"`
	// KVDisagreement is non-empty when the engine's capacity and the NVML
	// cross-check disagree.
	KVDisagreement string `json:"kv_disagreement,omitempty"`
	// ScrapeError is the last scrape failure, "" when the scrape worked.
	ScrapeError string `json:"scrape_error,omitempty"`
	// ScrapedNs is when the metrics were read (agent clock, Unix ns).
	ScrapedNs int64 `json:"scraped_ns"`
	// TP is the engine's tensor-parallel degree; 0 unknown.
	TP int `json:"tp,omitempty"`
	// Latency is what the engine's own latency histograms and counters
	// gained since the previous report (online profile calibration);
	// nil when the engine exposes none or this is the first scrape.
	Latency *controller.LatencyInterval `json:"latency,omitempty"`
}

// Liveness is an immediate event: an engine's process exited or its port
// closed (Live false), or it came back (Live true).
type Liveness struct {
	Engine string `json:"engine"`
	Live   bool   `json:"live"`
	// Reason: "exit", "port_closed", "port_open", "scrape_failed", ...
	Reason string `json:"reason"`
	PID    int32  `json:"pid,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	// AtNs is when the agent observed it (agent clock, Unix ns).
	AtNs int64 `json:"at_ns"`
}

// Ack is the core's answer to a Batch.
type Ack struct {
	Accepted int `json:"accepted"`
	// Rejected lists refused reports with the reason.
	Rejected []Rejection `json:"rejected,omitempty"`
	// Epoch and LastSeq are the node's current position at the core.
	Epoch   uint64 `json:"epoch"`
	LastSeq uint64 `json:"last_seq"`
}

// Rejection is one refused report.
type Rejection struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// Error is the body of a 4xx/5xx answer.
type Error struct {
	Error string `json:"error"`
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate checks one report's shape (not its order: that is the core's
// registry's job).
func (r *Report) Validate() error {
	if r.Node == "" || len(r.Node) > maxStringLen {
		return invalid("node %q: must be 1..%d bytes", r.Node, maxStringLen)
	}
	if r.Epoch == 0 {
		return invalid("node %q: epoch 0: must be > 0", r.Node)
	}
	if r.Seq == 0 {
		return invalid("node %q: seq 0: must be > 0", r.Node)
	}
	set := 0
	if r.Hello != nil {
		set++
	}
	if r.Snapshot != nil {
		set++
	}
	if r.Liveness != nil {
		set++
	}
	switch r.Kind {
	case KindHello:
		if r.Hello == nil || set != 1 {
			return invalid("seq %d: kind hello needs exactly the hello payload", r.Seq)
		}
		if len(r.Hello.GPUs) > MaxGPUsPerNode || len(r.Hello.Engines) > MaxEnginesPerNode {
			return invalid("seq %d: hello lists %d GPUs, %d engines: limits %d, %d", r.Seq,
				len(r.Hello.GPUs), len(r.Hello.Engines), MaxGPUsPerNode, MaxEnginesPerNode)
		}
	case KindSnapshot:
		if r.Snapshot == nil || set != 1 {
			return invalid("seq %d: kind snapshot needs exactly the snapshot payload", r.Seq)
		}
		if len(r.Snapshot.Engines) > MaxEnginesPerNode {
			return invalid("seq %d: snapshot lists %d engines: limit %d", r.Seq, len(r.Snapshot.Engines), MaxEnginesPerNode)
		}
		for i := range r.Snapshot.Engines {
			if err := r.Snapshot.Engines[i].validate(); err != nil {
				return fmt.Errorf("seq %d: %w", r.Seq, err)
			}
		}
	case KindLiveness:
		if r.Liveness == nil || set != 1 {
			return invalid("seq %d: kind liveness needs exactly the liveness payload", r.Seq)
		}
		if r.Liveness.Engine == "" || len(r.Liveness.Engine) > maxStringLen {
			return invalid("seq %d: liveness engine %q: must be 1..%d bytes", r.Seq, r.Liveness.Engine, maxStringLen)
		}
	case KindHeartbeat:
		if set != 0 {
			return invalid("seq %d: heartbeat carries no payload", r.Seq)
		}
	default:
		return invalid("seq %d: unknown kind %q", r.Seq, r.Kind)
	}
	return nil
}

func (e *EngineReport) validate() error {
	if e.ID == "" || len(e.ID) > maxStringLen {
		return invalid("engine id %q: must be 1..%d bytes", e.ID, maxStringLen)
	}
	if e.KVCapacityTokens < 0 {
		return invalid("engine %q: kv_capacity_tokens %d: must be >= 0", e.ID, e.KVCapacityTokens)
	}
	r := e.Resident
	if r.DecodeSeqs < 0 || r.KVTokens < 0 {
		return invalid("engine %q: resident decode_seqs %d, kv_tokens %d: must be >= 0", e.ID, r.DecodeSeqs, r.KVTokens)
	}
	if e.TP < 0 || e.TP > 1024 {
		return invalid("engine %q: tp %d: must be 0..1024", e.ID, e.TP)
	}
	if e.Latency != nil {
		if err := e.Latency.Validate(); err != nil {
			return invalid("engine %q: latency: %v", e.ID, err)
		}
	}
	for _, v := range [...]float64{r.QueuedPrefillS, r.RunningPrefillS} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return invalid("engine %q: resident prefill seconds %v: must be finite and >= 0", e.ID, v)
		}
	}
	return nil
}

// Validate checks the batch's version and every report.
func (b *Batch) Validate() error {
	if b.Version != Version {
		return invalid("version %d: this core speaks %d", b.Version, Version)
	}
	if len(b.Reports) == 0 {
		return invalid("empty batch")
	}
	if len(b.Reports) > MaxReportsPerBatch {
		return invalid("%d reports: limit %d", len(b.Reports), MaxReportsPerBatch)
	}
	for i := range b.Reports {
		if err := b.Reports[i].Validate(); err != nil {
			return fmt.Errorf("report %d: %w", i, err)
		}
	}
	return nil
}
