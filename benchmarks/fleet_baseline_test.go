package benchmarks

// The fleet registry as it was before issue 16/17 (one mutex over plain
// maps, the core's engine table copied for each new engine), kept only as
// the baseline of BenchmarkFleetReports*. Not used by the product.

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

// fleetSink is the part of the core the registry writes to; *core.Core
// satisfies it.
type fleetSink interface {
	UpsertEngine(e controller.Engine) error
	UpdateEngine(id string, nowNs int64, res controller.Resident, kvCapacityTokens int64, live bool) error
}

// Sentinel errors for refused reports, comparable with errors.Is.
var (
	// errOldStaleEpoch: the report's epoch is older than the node's current one.
	errOldStaleEpoch = errors.New("fleet: stale epoch")
	// errOldReplay: the sequence number is not above the last applied one.
	errOldReplay = errors.New("fleet: replayed or out-of-order sequence")
	// errOldEngineConflict: another fresh node owns the engine id.
	errOldEngineConflict = errors.New("fleet: engine id owned by another node")
)

type oldEngineRec struct {
	model, gpu string
	res        controller.Resident
	capTokens  int64
	live       bool
}

type oldNodeRec struct {
	epoch      uint64
	lastSeq    uint64
	lastSeenNs int64
	stale      bool
	hello      *wire.Hello
	engines    map[string]*oldEngineRec
}

// mutexRegistry tracks the nodes' agents and applies their reports.
type mutexRegistry struct {
	sink         fleetSink
	staleAfterNs int64
	log          *slog.Logger

	mu    sync.Mutex
	nodes map[string]*oldNodeRec
	owner map[string]string // engine id -> node

	reports *prometheus.CounterVec
	sinkErr prometheus.Counter
	stales  prometheus.Counter
}

// newMutexRegistry returns a registry that writes to sink and considers a node
// stale after staleAfterNs without a report (values <= 0 mean 10 s).
func newMutexRegistry(sink fleetSink, staleAfterNs int64, logger *slog.Logger) *mutexRegistry {
	if staleAfterNs <= 0 {
		staleAfterNs = 10e9
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &mutexRegistry{
		sink: sink, staleAfterNs: staleAfterNs, log: logger,
		nodes: map[string]*oldNodeRec{}, owner: map[string]string{},
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
func (r *mutexRegistry) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reports, r.sinkErr, r.stales}
}

// Apply applies one report received at nowNs (core clock). It returns
// errOldStaleEpoch or errOldReplay (wrapped) for refused reports, a wire.ErrInvalid
// error for malformed ones; a refused report changes nothing.
func (r *mutexRegistry) Apply(nowNs int64, rep *wire.Report) error {
	if err := rep.Validate(); err != nil {
		r.reports.WithLabelValues("invalid").Inc()
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(nowNs, rep)
}

func (r *mutexRegistry) applyLocked(nowNs int64, rep *wire.Report) error {
	n := r.nodes[rep.Node]
	switch {
	case n == nil:
		n = &oldNodeRec{engines: map[string]*oldEngineRec{}}
		r.nodes[rep.Node] = n
		n.epoch = rep.Epoch
	case rep.Epoch < n.epoch:
		r.reports.WithLabelValues("stale_epoch").Inc()
		return fmt.Errorf("%w: node %q epoch %d < current %d", errOldStaleEpoch, rep.Node, rep.Epoch, n.epoch)
	case rep.Epoch == n.epoch && rep.Seq <= n.lastSeq:
		r.reports.WithLabelValues("replay").Inc()
		return fmt.Errorf("%w: node %q epoch %d seq %d <= last %d", errOldReplay, rep.Node, rep.Epoch, rep.Seq, n.lastSeq)
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

func (r *mutexRegistry) applyEngine(node string, n *oldNodeRec, nowNs int64, e *wire.EngineReport) {
	rec := n.engines[e.ID]
	if rec == nil || rec.model != e.Model || rec.gpu != e.GPU {
		role := e.Role
		if rec != nil || r.sinkKnows(e.ID) {
			role = controller.RoleNone // the controller's role stands
		}
		err := r.sink.UpsertEngine(controller.Engine{
			ID: e.ID, Node: node, Model: e.Model, GPU: e.GPU, Role: role,
			State: controller.StateServing, Live: e.Live,
			KVCapacityTokens: e.KVCapacityTokens, Resident: e.Resident,
		})
		if err != nil {
			r.sinkErr.Inc()
			r.log.Warn("upsert engine refused", "node", node, "engine", e.ID, "err", err)
			return
		}
		rec = &oldEngineRec{model: e.Model, gpu: e.GPU}
		n.engines[e.ID] = rec
		r.owner[e.ID] = node
	}
	rec.res, rec.capTokens, rec.live = e.Resident, e.KVCapacityTokens, e.Live
	if e.KVDisagreement != "" {
		r.log.Debug("kv limit disagreement", "node", node, "engine", e.ID, "detail", e.KVDisagreement)
	}
	r.update(e.ID, nowNs, rec)
}

// oldEngineLister is implemented by sinks that can list their engines
// (*core.Core does); the registry then never overrides the role of an
// engine the core already has.
type oldEngineLister interface {
	Engines() []controller.Engine
}

func (r *mutexRegistry) sinkKnows(id string) bool {
	l, ok := r.sink.(oldEngineLister)
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

func (r *mutexRegistry) update(id string, nowNs int64, e *oldEngineRec) {
	if err := r.sink.UpdateEngine(id, nowNs, e.res, e.capTokens, e.live); err != nil {
		r.sinkErr.Inc()
		r.log.Warn("update engine refused", "engine", id, "err", err)
	}
}

func (r *mutexRegistry) dropUnlisted(node string, n *oldNodeRec, nowNs int64, listed map[string]bool) {
	for _, id := range oldSortedIDs(n.engines) {
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

func oldSortedIDs(m map[string]*oldEngineRec) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Sweep marks the engines of every node silent for longer than the
// staleness as not live (once per silence).
func (r *mutexRegistry) Sweep(nowNs int64) {
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
		for _, id := range oldSortedIDs(n.engines) {
			e := n.engines[id]
			if e.live {
				e.live = false
				r.update(id, nowNs, e)
			}
		}
	}
}

// Fresh reports whether any node has reported within the staleness.
func (r *mutexRegistry) Fresh(nowNs int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.nodes {
		if nowNs-n.lastSeenNs <= r.staleAfterNs {
			return true
		}
	}
	return false
}

// oldNodeState is one node's position, for introspection.
type oldNodeState struct {
	Node       string `json:"node"`
	Epoch      uint64 `json:"epoch"`
	LastSeq    uint64 `json:"last_seq"`
	LastSeenNs int64  `json:"last_seen_ns"`
	Stale      bool   `json:"stale"`
	Engines    int    `json:"engines"`
}

// Nodes returns every known node, sorted by name.
func (r *mutexRegistry) Nodes() []oldNodeState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]oldNodeState, 0, len(r.nodes))
	for name, n := range r.nodes {
		out = append(out, oldNodeState{Node: name, Epoch: n.epoch, LastSeq: n.lastSeq,
			LastSeenNs: n.lastSeenNs, Stale: n.stale, Engines: len(n.engines)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
