package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// EngineSink is the part of the core the registry writes to; *core.Core
// satisfies it.
type EngineSink interface {
	UpsertEngine(e controller.Engine) error
	UpdateEngine(id string, nowNs int64, res controller.Resident, kvCapacityTokens int64, live bool) error
}

// Sentinel errors for refused reports, comparable with errors.Is.
var (
	// ErrStaleEpoch: the report's epoch is older than the node's current one.
	ErrStaleEpoch = errors.New("fleet: stale epoch")
	// ErrReplay: the sequence number is not above the last applied one.
	ErrReplay = errors.New("fleet: replayed or out-of-order sequence")
	// ErrEngineConflict: another fresh node owns the engine id.
	ErrEngineConflict = errors.New("fleet: engine id owned by another node")
)

type engineRec struct {
	model, gpu string
	tp         int
	res        controller.Resident
	capTokens  int64
	live       bool
}

type nodeRec struct {
	epoch      uint64
	lastSeq    uint64
	lastSeenNs int64
	stale      bool
	hello      *wire.Hello
	engines    map[string]*engineRec
}

// Registry tracks the nodes' agents and applies their reports.
type Registry struct {
	sink         EngineSink
	staleAfterNs int64
	log          *slog.Logger

	mu    sync.Mutex
	nodes map[string]*nodeRec
	owner map[string]string // engine id -> node

	reports *prometheus.CounterVec
	sinkErr prometheus.Counter
	stales  prometheus.Counter
}

// NewRegistry returns a registry that writes to sink and considers a node
// stale after staleAfterNs without a report (values <= 0 mean 10 s).
func NewRegistry(sink EngineSink, staleAfterNs int64, logger *slog.Logger) *Registry {
	if staleAfterNs <= 0 {
		staleAfterNs = 10e9
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{
		sink: sink, staleAfterNs: staleAfterNs, log: logger,
		nodes: map[string]*nodeRec{}, owner: map[string]string{},
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narwhal_fleet_reports_total",
			Help: "Agent reports received by the core, by result (accepted, stale_epoch, replay, invalid).",
		}, []string{"result"}),
		sinkErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narwhal_fleet_sink_errors_total",
			Help: "Engine table updates from agent reports that the core refused.",
		}),
		stales: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narwhal_fleet_node_stale_total",
			Help: "Times a node stopped reporting and its engines were marked not live.",
		}),
	}
}

// Collectors returns the registry's metrics.
func (r *Registry) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reports, r.sinkErr, r.stales}
}

// Apply applies one report received at nowNs (core clock). It returns
// ErrStaleEpoch or ErrReplay (wrapped) for refused reports, a wire.ErrInvalid
// error for malformed ones; a refused report changes nothing.
func (r *Registry) Apply(nowNs int64, rep *wire.Report) error {
	if err := rep.Validate(); err != nil {
		r.reports.WithLabelValues("invalid").Inc()
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(nowNs, rep)
}

func (r *Registry) applyLocked(nowNs int64, rep *wire.Report) error {
	n := r.nodes[rep.Node]
	switch {
	case n == nil:
		n = &nodeRec{engines: map[string]*engineRec{}}
		r.nodes[rep.Node] = n
		n.epoch = rep.Epoch
	case rep.Epoch < n.epoch:
		r.reports.WithLabelValues("stale_epoch").Inc()
		return fmt.Errorf("%w: node %q epoch %d < current %d", ErrStaleEpoch, rep.Node, rep.Epoch, n.epoch)
	case rep.Epoch == n.epoch && rep.Seq <= n.lastSeq:
		r.reports.WithLabelValues("replay").Inc()
		return fmt.Errorf("%w: node %q epoch %d seq %d <= last %d", ErrReplay, rep.Node, rep.Epoch, rep.Seq, n.lastSeq)
	case rep.Epoch > n.epoch:
		r.log.Info("agent restarted", "node", rep.Node, "old_epoch", n.epoch, "epoch", rep.Epoch)
		n.epoch = rep.Epoch
		n.lastSeq = 0
	}
	n.lastSeq = rep.Seq
	n.lastSeenNs = nowNs
	n.stale = false
	r.reports.WithLabelValues("accepted").Inc()
	switch rep.Kind {
	case wire.KindHello:
		n.hello = rep.Hello
		listed := make(map[string]bool, len(rep.Hello.Engines))
		for _, id := range rep.Hello.Engines {
			listed[id] = true
		}
		r.dropUnlisted(rep.Node, n, nowNs, listed)
	case wire.KindSnapshot:
		listed := make(map[string]bool, len(rep.Snapshot.Engines))
		for i := range rep.Snapshot.Engines {
			e := &rep.Snapshot.Engines[i]
			if owner, ok := r.owner[e.ID]; ok && owner != rep.Node {
				if on := r.nodes[owner]; on != nil && !on.stale {
					r.log.Warn("engine id reported by two nodes; refused for the second",
						"engine", e.ID, "owner", owner, "node", rep.Node)
					continue
				}
				delete(r.nodes[owner].engines, e.ID)
			}
			listed[e.ID] = true
			r.applyEngine(rep.Node, n, nowNs, e)
		}
		r.dropUnlisted(rep.Node, n, nowNs, listed)
	case wire.KindLiveness:
		ev := rep.Liveness
		if e := n.engines[ev.Engine]; e != nil && e.live != ev.Live {
			e.live = ev.Live
			r.update(ev.Engine, nowNs, e)
			r.log.Info("engine liveness", "node", rep.Node, "engine", ev.Engine, "live", ev.Live, "reason", ev.Reason)
		}
	case wire.KindHeartbeat:
	}
	return nil
}

func (r *Registry) applyEngine(node string, n *nodeRec, nowNs int64, e *wire.EngineReport) {
	rec := n.engines[e.ID]
	if rec == nil || rec.model != e.Model || rec.gpu != e.GPU || rec.tp != e.TP {
		role := e.Role
		if rec != nil || r.sinkKnows(e.ID) {
			role = controller.RoleNone // the controller's role stands
		}
		err := r.sink.UpsertEngine(controller.Engine{
			ID: e.ID, Node: node, Model: e.Model, GPU: e.GPU, TP: e.TP, Role: role,
			State: controller.StateServing, Live: e.Live,
			KVCapacityTokens: e.KVCapacityTokens, Resident: e.Resident,
		})
		if err != nil {
			r.sinkErr.Inc()
			r.log.Warn("upsert engine refused", "node", node, "engine", e.ID, "err", err)
			return
		}
		rec = &engineRec{model: e.Model, gpu: e.GPU, tp: e.TP}
		n.engines[e.ID] = rec
		r.owner[e.ID] = node
	}
	rec.res, rec.capTokens, rec.live = e.Resident, e.KVCapacityTokens, e.Live
	if e.KVDisagreement != "" {
		r.log.Debug("kv limit disagreement", "node", node, "engine", e.ID, "detail", e.KVDisagreement)
	}
	r.update(e.ID, nowNs, rec)
	if e.Latency != nil {
		if ls, ok := r.sink.(LatencySink); ok {
			if err := ls.ObserveLatency(e.ID, nowNs, *e.Latency); err != nil {
				r.sinkErr.Inc()
				r.log.Warn("latency interval refused", "engine", e.ID, "err", err)
			}
		}
	}
}

// LatencySink is implemented by sinks that calibrate profiles from the
// engines' latency intervals (*core.Core does).
type LatencySink interface {
	ObserveLatency(engineID string, nowNs int64, li controller.LatencyInterval) error
}

// engineLister is implemented by sinks that can list their engines
// (*core.Core does); the registry then never overrides the role of an
// engine the core already has.
type engineLister interface {
	Engines() []controller.Engine
}

func (r *Registry) sinkKnows(id string) bool {
	l, ok := r.sink.(engineLister)
	if !ok {
		return false
	}
	for _, e := range l.Engines() {
		if e.ID == id {
			return true
		}
	}
	return false
}

func (r *Registry) update(id string, nowNs int64, e *engineRec) {
	if err := r.sink.UpdateEngine(id, nowNs, e.res, e.capTokens, e.live); err != nil {
		r.sinkErr.Inc()
		r.log.Warn("update engine refused", "engine", id, "err", err)
	}
}

func (r *Registry) dropUnlisted(node string, n *nodeRec, nowNs int64, listed map[string]bool) {
	for _, id := range sortedIDs(n.engines) {
		if listed[id] {
			continue
		}
		e := n.engines[id]
		if e.live {
			e.live = false
			r.update(id, nowNs, e)
		}
		delete(n.engines, id)
		if r.owner[id] == node {
			delete(r.owner, id)
		}
		r.log.Info("engine no longer reported by its node", "node", node, "engine", id)
	}
}

func sortedIDs(m map[string]*engineRec) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Sweep marks the engines of every node silent for longer than the
// staleness as not live (once per silence).
func (r *Registry) Sweep(nowNs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, n := range r.nodes {
		if n.stale || nowNs-n.lastSeenNs <= r.staleAfterNs {
			continue
		}
		n.stale = true
		r.stales.Inc()
		r.log.Warn("node stopped reporting; engines marked not live", "node", name,
			"silent_s", float64(nowNs-n.lastSeenNs)/1e9, "engines", len(n.engines))
		for _, id := range sortedIDs(n.engines) {
			e := n.engines[id]
			if e.live {
				e.live = false
				r.update(id, nowNs, e)
			}
		}
	}
}

// Fresh reports whether any node has reported within the staleness.
func (r *Registry) Fresh(nowNs int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.nodes {
		if nowNs-n.lastSeenNs <= r.staleAfterNs {
			return true
		}
	}
	return false
}

// NodeState is one node's position, for introspection.
type NodeState struct {
	Node       string `json:"node"`
	Epoch      uint64 `json:"epoch"`
	LastSeq    uint64 `json:"last_seq"`
	LastSeenNs int64  `json:"last_seen_ns"`
	Stale      bool   `json:"stale"`
	Engines    int    `json:"engines"`
}

// Nodes returns every known node, sorted by name.
func (r *Registry) Nodes() []NodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]NodeState, 0, len(r.nodes))
	for name, n := range r.nodes {
		out = append(out, NodeState{Node: name, Epoch: n.epoch, LastSeq: n.lastSeq,
			LastSeenNs: n.lastSeenNs, Stale: n.stale, Engines: len(n.engines)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
