package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

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

// ErrFutureEpoch: the report's epoch (the agent's start time) lies
// further ahead of the core's clock than the registry allows; it is
// refused and never adopted.
var ErrFutureEpoch = errors.New("fleet: epoch ahead of the core's clock")

// ErrFull: the registry holds its maximum of nodes; a new node is refused
// until a silent one is forgotten.
var ErrFull = errors.New("fleet: registry full")

type engineRec struct {
	model, gpu string
	tp         int
	res        controller.Resident
	capTokens  int64
	live       bool
}

type nodeRec struct {
	mu         sync.Mutex // orders one node's reports; never held with another node's
	epoch      uint64
	lastSeq    uint64
	lastSeenNs int64
	stale      atomic.Bool
	removed    bool // forgotten by Sweep: a racing report recreates the node
	engines    map[string]*engineRec
}

// Limits bound what the registry keeps and what it believes.
type Limits struct {
	// MaxNodes: nodes known at once (default 4096). A report from a new
	// node beyond it is refused with ErrFull.
	MaxNodes int
	// MaxEngines: engines known at once, over all nodes (default 16384).
	// An engine beyond it is skipped (logged, counted).
	MaxEngines int
	// MaxEpochAheadNs: an epoch further ahead of the core's clock is
	// refused with ErrFutureEpoch (default 10 min).
	MaxEpochAheadNs int64
	// ForgetAfterNs: a node silent this long is forgotten (its engines
	// stay in the core, not live) (default 10 min; at least the
	// staleness).
	ForgetAfterNs int64
}

func (l *Limits) defaults(staleAfterNs int64) {
	if l.MaxNodes <= 0 {
		l.MaxNodes = 4096
	}
	if l.MaxEngines <= 0 {
		l.MaxEngines = 16384
	}
	if l.MaxEpochAheadNs <= 0 {
		l.MaxEpochAheadNs = int64(10 * time.Minute)
	}
	if l.ForgetAfterNs <= 0 {
		l.ForgetAfterNs = int64(10 * time.Minute)
	}
	l.ForgetAfterNs = max(l.ForgetAfterNs, staleAfterNs)
}

// Option adjusts a Registry.
type Option func(*Registry)

// WithLimits sets the registry's bounds (zero fields take the defaults).
func WithLimits(l Limits) Option { return func(r *Registry) { r.lim = l } }

// Registry tracks the nodes' agents and applies their reports.
type Registry struct {
	sink         EngineSink
	staleAfterNs int64
	log          *slog.Logger
	lim          Limits

	nodes   *xsync.MapOf[string, *nodeRec]
	owner   *xsync.MapOf[string, string] // engine id -> node
	nNodes  atomic.Int64
	nEng    atomic.Int64
	lastAny atomic.Int64 // latest receipt time of any accepted report

	reports *prometheus.CounterVec
	sinkErr prometheus.Counter
	stales  prometheus.Counter
	full    *prometheus.CounterVec
}

// NewRegistry returns a registry that writes to sink and considers a node
// stale after staleAfterNs without a report (values <= 0 mean 10 s).
func NewRegistry(sink EngineSink, staleAfterNs int64, logger *slog.Logger, opts ...Option) *Registry {
	if staleAfterNs <= 0 {
		staleAfterNs = 10e9
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		sink: sink, staleAfterNs: staleAfterNs, log: logger,
		nodes: xsync.NewMapOf[string, *nodeRec](), owner: xsync.NewMapOf[string, string](),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narwhal_fleet_reports_total",
			Help: "Agent reports received by the core, by result (accepted, stale_epoch, future_epoch, replay, full, invalid).",
		}, []string{"result"}),
		sinkErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narwhal_fleet_sink_errors_total",
			Help: "Engine table updates from agent reports that the core refused.",
		}),
		stales: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narwhal_fleet_node_stale_total",
			Help: "Times a node stopped reporting and its engines were marked not live.",
		}),
		full: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narwhal_fleet_limit_refusals_total",
			Help: "Nodes or engines refused because the registry holds its maximum (fleet limits), by kind.",
		}, []string{"kind"}),
	}
	for _, o := range opts {
		o(r)
	}
	r.lim.defaults(staleAfterNs)
	return r
}

// Collectors returns the registry's metrics.
func (r *Registry) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reports, r.sinkErr, r.stales, r.full}
}

// Apply applies one report received at nowNs (core clock). It returns
// ErrStaleEpoch, ErrFutureEpoch, ErrReplay or ErrFull (wrapped) for
// refused reports, a wire.ErrInvalid error for malformed ones; a refused
// report changes nothing.
func (r *Registry) Apply(nowNs int64, rep *wire.Report) error {
	if err := rep.Validate(); err != nil {
		r.reports.WithLabelValues("invalid").Inc()
		return err
	}
	return r.apply(nowNs, rep)
}

// node returns the node's record, creating it within MaxNodes.
func (r *Registry) node(name string) (*nodeRec, error) {
	if n, ok := r.nodes.Load(name); ok {
		return n, nil
	}
	n, ok := r.nodes.LoadOrTryCompute(name, func() (*nodeRec, bool) {
		if r.nNodes.Add(1) > int64(r.lim.MaxNodes) {
			r.nNodes.Add(-1)
			return nil, true
		}
		return &nodeRec{engines: map[string]*engineRec{}}, false
	})
	if !ok && n == nil {
		return nil, fmt.Errorf("%w: %d nodes known (agents.max_nodes); node %q refused", ErrFull, r.lim.MaxNodes, name)
	}
	return n, nil
}

func (r *Registry) apply(nowNs int64, rep *wire.Report) error {
	if ahead := int64(rep.Epoch) - nowNs; rep.Epoch > uint64(math.MaxInt64) || ahead > r.lim.MaxEpochAheadNs {
		r.reports.WithLabelValues("future_epoch").Inc()
		return fmt.Errorf("%w: node %q epoch %d is more than %gs after the core's clock %d", ErrFutureEpoch,
			rep.Node, rep.Epoch, float64(r.lim.MaxEpochAheadNs)/1e9, nowNs)
	}
	for {
		n, err := r.node(rep.Node)
		if err != nil {
			r.reports.WithLabelValues("full").Inc()
			r.full.WithLabelValues("node").Inc()
			return err
		}
		n.mu.Lock()
		if n.removed {
			n.mu.Unlock()
			continue
		}
		err = r.applyNode(nowNs, n, rep)
		n.mu.Unlock()
		return err
	}
}

// applyNode applies rep to its node. Caller holds n.mu.
func (r *Registry) applyNode(nowNs int64, n *nodeRec, rep *wire.Report) error {
	silent := n.epoch != 0 && (n.stale.Load() || nowNs-n.lastSeenNs > r.staleAfterNs)
	switch {
	case n.epoch == 0:
		n.epoch = rep.Epoch
	case rep.Epoch < n.epoch && silent:
		// An agent restarted with its clock set back: once the node is
		// stale the lower epoch is the agent now running.
		r.log.Info("agent restarted with a lower epoch after the node went stale", "node", rep.Node, "old_epoch", n.epoch, "epoch", rep.Epoch)
		n.epoch, n.lastSeq = rep.Epoch, 0
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
	n.stale.Store(false)
	for {
		last := r.lastAny.Load()
		if nowNs <= last || r.lastAny.CompareAndSwap(last, nowNs) {
			break
		}
	}
	r.reports.WithLabelValues("accepted").Inc()
	switch rep.Kind {
	case wire.KindHello:
		// The hello is not kept: nothing reads it, and it may be as large
		// as a request body.
		listed := make(map[string]bool, len(rep.Hello.Engines))
		for _, id := range rep.Hello.Engines {
			listed[id] = true
		}
		r.dropUnlisted(rep.Node, n, nowNs, listed)
	case wire.KindSnapshot:
		listed := make(map[string]bool, len(rep.Snapshot.Engines))
		r.registerNew(rep.Node, n, rep.Snapshot.Engines)
		for i := range rep.Snapshot.Engines {
			e := &rep.Snapshot.Engines[i]
			if owner, ok := r.owner.Load(e.ID); ok && owner != rep.Node {
				if on, ok := r.nodes.Load(owner); ok && !on.stale.Load() {
					r.log.Warn("engine id reported by two nodes; refused for the second",
						"engine", e.ID, "owner", owner, "node", rep.Node)
					continue
				}
				// The owner is stale: this node takes the id over. The
				// old node's record is dropped lazily (it checks owner).
			}
			listed[e.ID] = true
			r.applyEngine(rep.Node, n, nowNs, e)
		}
		r.dropUnlisted(rep.Node, n, nowNs, listed)
	case wire.KindLiveness:
		ev := rep.Liveness
		if e := n.engines[ev.Engine]; e != nil && e.live != ev.Live && r.owns(rep.Node, ev.Engine) {
			e.live = ev.Live
			r.update(ev.Engine, nowNs, e)
			r.log.Info("engine liveness", "node", rep.Node, "engine", ev.Engine, "live", ev.Live, "reason", ev.Reason)
		}
	case wire.KindHeartbeat:
	}
	return nil
}

func (r *Registry) owns(node, id string) bool {
	o, ok := r.owner.Load(id)
	return ok && o == node
}

func (r *Registry) applyEngine(node string, n *nodeRec, nowNs int64, e *wire.EngineReport) {
	rec := n.engines[e.ID]
	if rec != nil && !r.owns(node, e.ID) {
		delete(n.engines, e.ID) // taken over by another node while this one was stale
		rec = nil
	}
	if rec == nil || rec.model != e.Model || rec.gpu != e.GPU || rec.tp != e.TP {
		_, owned := r.owner.Load(e.ID)
		if rec == nil && !owned && r.nEng.Load() >= int64(r.lim.MaxEngines) {
			r.full.WithLabelValues("engine").Inc()
			r.log.Warn("engine refused: the registry holds agents.max_engines engines", "node", node, "engine", e.ID, "max", r.lim.MaxEngines)
			return
		}
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
		if rec == nil {
			if _, loaded := r.owner.LoadAndStore(e.ID, node); !loaded {
				r.nEng.Add(1)
			}
		}
		rec = &engineRec{model: e.Model, gpu: e.GPU, tp: e.TP}
		n.engines[e.ID] = rec
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

// batchUpserter is implemented by sinks that register several engines
// with one role-table rebuild (service.DurableCore).
type batchUpserter interface {
	UpsertEngines(es []controller.Engine) error
}

// registerNew registers, in one batch, the engines of a snapshot this
// node does not have yet and nobody fresh owns (within MaxEngines); the
// per-engine pass then finds them registered. Without a batch-capable
// sink, or when the batch is refused, the per-engine pass registers them
// one by one. Caller holds n.mu.
func (r *Registry) registerNew(node string, n *nodeRec, es []wire.EngineReport) {
	bu, ok := r.sink.(batchUpserter)
	if !ok {
		return
	}
	var batch []controller.Engine
	var ids []int
	room := int64(r.lim.MaxEngines) - r.nEng.Load()
	for i := range es {
		e := &es[i]
		if n.engines[e.ID] != nil {
			continue
		}
		if owner, ok := r.owner.Load(e.ID); ok && owner != node {
			continue // the per-engine pass judges takeovers
		}
		if int64(len(batch)) >= room {
			break
		}
		role := e.Role
		if r.sinkKnows(e.ID) {
			role = controller.RoleNone
		}
		batch = append(batch, controller.Engine{ID: e.ID, Node: node, Model: e.Model, GPU: e.GPU, TP: e.TP, Role: role,
			State: controller.StateServing, Live: e.Live, KVCapacityTokens: e.KVCapacityTokens, Resident: e.Resident})
		ids = append(ids, i)
	}
	if len(batch) < 2 || bu.UpsertEngines(batch) != nil {
		return
	}
	for _, i := range ids {
		e := &es[i]
		if _, loaded := r.owner.LoadAndStore(e.ID, node); !loaded {
			r.nEng.Add(1)
		}
		n.engines[e.ID] = &engineRec{model: e.Model, gpu: e.GPU, tp: e.TP}
	}
}

// roleTabler is implemented by sinks with a role table (*core.Core): an
// O(1) lookup of whether the core knows an engine.
type roleTabler interface {
	Roles() *controller.RoleTable
}

// engineLister is the fallback for sinks that can only list their engines
// (O(engines) per lookup).
type engineLister interface {
	Engines() []controller.Engine
}

// sinkKnows reports whether the core already has the engine; the
// registry then never overrides its role.
func (r *Registry) sinkKnows(id string) bool {
	switch s := r.sink.(type) {
	case roleTabler:
		return s.Roles().Known(id)
	case engineLister:
		for _, e := range s.Engines() {
			if e.ID == id {
				return true
			}
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

// dropUnlisted marks the node's engines it no longer lists not live and
// forgets them. Caller holds n.mu.
func (r *Registry) dropUnlisted(node string, n *nodeRec, nowNs int64, listed map[string]bool) {
	for _, id := range sortedIDs(n.engines) {
		if listed[id] {
			continue
		}
		e := n.engines[id]
		delete(n.engines, id)
		if !r.owns(node, id) {
			continue
		}
		if e.live {
			e.live = false
			r.update(id, nowNs, e)
		}
		released := false
		r.owner.Compute(id, func(o string, ok bool) (string, bool) {
			released = ok && o == node
			return o, !ok || released
		})
		if released {
			r.nEng.Add(-1)
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
// staleness as not live (once per silence), and forgets nodes silent for
// longer than ForgetAfterNs (their engines stay in the core, not live;
// the node's next report registers it again).
func (r *Registry) Sweep(nowNs int64) {
	r.nodes.Range(func(name string, n *nodeRec) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.removed {
			return true
		}
		silent := nowNs - n.lastSeenNs
		if !n.stale.Load() && silent > r.staleAfterNs {
			n.stale.Store(true)
			r.stales.Inc()
			r.log.Warn("node stopped reporting; engines marked not live", "node", name,
				"silent_s", float64(silent)/1e9, "engines", len(n.engines))
			for _, id := range sortedIDs(n.engines) {
				e := n.engines[id]
				if e.live && r.owns(name, id) {
					e.live = false
					r.update(id, nowNs, e)
				}
			}
		}
		if n.stale.Load() && silent > r.lim.ForgetAfterNs {
			for id := range n.engines {
				if r.owns(name, id) {
					r.owner.Delete(id)
					r.nEng.Add(-1)
				}
			}
			n.removed = true
			r.nodes.Delete(name)
			r.nNodes.Add(-1)
			r.log.Info("node forgotten after a long silence", "node", name, "silent_s", float64(silent)/1e9)
		}
		return true
	})
}

// Listed reports whether a node the registry has not forgotten owns the
// engine: it lists the engine now, or it went silent with the engine
// listed and is not yet forgotten. O(1).
func (r *Registry) Listed(id string) bool {
	_, ok := r.owner.Load(id)
	return ok
}

// Fresh reports whether any node has reported within the staleness.
// O(1).
func (r *Registry) Fresh(nowNs int64) bool {
	last := r.lastAny.Load()
	return last != 0 && nowNs-last <= r.staleAfterNs
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
	var out []NodeState
	r.nodes.Range(func(name string, n *nodeRec) bool {
		n.mu.Lock()
		out = append(out, NodeState{Node: name, Epoch: n.epoch, LastSeq: n.lastSeq,
			LastSeenNs: n.lastSeenNs, Stale: n.stale.Load(), Engines: len(n.engines)})
		n.mu.Unlock()
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
