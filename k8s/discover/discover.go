package discover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// ErrInvalidConfig is returned (wrapped) by New for a config it refuses.
var ErrInvalidConfig = errors.New("discover: invalid config")

// Sink receives the engines Kubernetes knows about. *core.Core satisfies
// it.
type Sink interface {
	UpsertEngine(e controller.Engine) error
	RemoveEngine(id string) error
}

// EngineLister is implemented by sinks that can list their engine table
// (*core.Core does). Discovery then keeps, in the rows it upserts, the
// fields it does not own: residency, KV capacity and last move time (from
// the agent and the controller), so a pod event never zeroes them.
type EngineLister interface {
	Engines() []controller.Engine
}

// Config selects the engine pods.
type Config struct {
	// Namespace to watch; "" watches every namespace.
	Namespace string `json:"namespace" yaml:"namespace"`
	// Selector is a label selector, e.g. "app.kubernetes.io/component=engine".
	Selector string `json:"selector" yaml:"selector"`
	// Roles is the role label (zero: the narwhal preset).
	Roles podmeta.Roles `json:"roles" yaml:"roles"`
	// ResyncPeriod re-delivers every pod periodically; 0 disables.
	ResyncPeriod time.Duration `json:"resync_period" yaml:"resync_period"`
}

// PodRef locates an engine's pod.
type PodRef struct {
	Namespace string
	Name      string
}

// Discoverer mirrors selected pods into a Sink.
type Discoverer struct {
	client kubernetes.Interface
	cfg    Config
	sink   Sink
	sel    labels.Selector
	logger *slog.Logger

	// serial orders the informer's handler calls and Resync: a row is
	// never upserted from a pod state older than the last one applied.
	serial sync.Mutex

	mu      sync.Mutex
	byPod   map[PodRef]string // pod -> engine id it owns
	engines map[string]entry  // engine id -> its pod and row
	synced  func() bool
	pods    cache.Store // the informer's pods (nil before Run)

	sinkErrors prometheus.Counter
	engCount   prometheus.GaugeFunc
}

type entry struct {
	pod    PodRef
	engine controller.Engine
}

// New checks cfg and returns a Discoverer that has not started.
func New(client kubernetes.Interface, cfg Config, sink Sink, logger *slog.Logger) (*Discoverer, error) {
	if client == nil || sink == nil {
		return nil, fmt.Errorf("%w: nil client or sink", ErrInvalidConfig)
	}
	sel, err := labels.Parse(cfg.Selector)
	if err != nil {
		return nil, fmt.Errorf("%w: selector %q: %w", ErrInvalidConfig, cfg.Selector, err)
	}
	roles, err := cfg.Roles.Resolve()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Roles = roles
	if cfg.ResyncPeriod < 0 {
		return nil, fmt.Errorf("%w: resync_period %v must be >= 0", ErrInvalidConfig, cfg.ResyncPeriod)
	}
	if logger == nil {
		logger = slog.Default()
	}
	d := &Discoverer{
		client:  client,
		cfg:     cfg,
		sink:    sink,
		sel:     sel,
		logger:  logger.With("component", "discover"),
		byPod:   map[PodRef]string{},
		engines: map[string]entry{},
		synced:  func() bool { return false },
	}
	d.sinkErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "narwhal_k8s_discovery_sink_errors_total",
		Help: "Engine upserts or removals the sink refused.",
	})
	d.engCount = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_k8s_discovered_engines",
		Help: "Engines currently discovered from pods.",
	}, func() float64 { return float64(d.Len()) })
	return d, nil
}

// Collectors returns the discoverer's metrics.
func (d *Discoverer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.sinkErrors, d.engCount}
}

// Run watches pods until ctx ends. It returns nil when ctx ends.
func (d *Discoverer) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(d.client, d.cfg.ResyncPeriod,
		informers.WithNamespace(d.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = d.cfg.Selector }))
	inf := factory.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.serial.Lock(); defer d.serial.Unlock(); d.apply(obj) },
		UpdateFunc: func(_, obj any) { d.serial.Lock(); defer d.serial.Unlock(); d.apply(obj) },
		DeleteFunc: func(obj any) { d.serial.Lock(); defer d.serial.Unlock(); d.remove(obj) },
	})
	if err != nil {
		return fmt.Errorf("discover: add pod handler: %w", err)
	}
	d.mu.Lock()
	d.synced = reg.HasSynced // the informer's list handed to the sink, not only cached
	d.pods = inf.GetStore()
	d.mu.Unlock()
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// HasSynced reports whether the initial pod list has been delivered to
// the sink.
func (d *Discoverer) HasSynced() bool {
	d.mu.Lock()
	s := d.synced
	d.mu.Unlock()
	return s()
}

// Len returns the number of discovered engines.
func (d *Discoverer) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.engines)
}

// Engines returns the discovered engines sorted by id.
func (d *Discoverer) Engines() []controller.Engine {
	d.mu.Lock()
	out := make([]controller.Engine, 0, len(d.engines))
	for _, e := range d.engines {
		out = append(out, e.engine)
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// PodFor returns the pod of a discovered engine.
func (d *Discoverer) PodFor(engineID string) (PodRef, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.engines[engineID]
	return e.pod, ok
}

// Resync upserts every discovered engine into the sink again, as its pod
// said in its latest event (role, liveness, node, model, GPU), although
// the pod has not changed since: for a sink whose rows changed behind
// discovery's back, e.g. a controller that restored a saved state over
// them. Pod events wait while it runs. It returns the sink's errors.
func (d *Discoverer) Resync() error {
	d.serial.Lock()
	defer d.serial.Unlock()
	var errs []error
	for _, eng := range d.Engines() {
		if err := d.sink.UpsertEngine(d.keepSinkFields(eng)); err != nil {
			d.sinkErrors.Inc()
			errs = append(errs, fmt.Errorf("discover: resync %s: %w", eng.ID, err))
		}
	}
	return errors.Join(errs...)
}

func podOf(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// apply upserts the pod's engine, or removes it if the pod no longer
// describes one.
func (d *Discoverer) apply(obj any) {
	pod, ok := podOf(obj)
	if !ok {
		return
	}
	ref := PodRef{Namespace: pod.Namespace, Name: pod.Name}
	if !d.sel.Matches(labels.Set(pod.Labels)) {
		d.forget(ref) // left the selector (watch events are not filtered by every source)
		return
	}
	eng, err := podmeta.EngineFromPodWith(d.cfg.Roles, pod)
	if err != nil {
		d.logger.Debug("pod is not an engine", "pod", ref.Namespace+"/"+ref.Name, "err", err)
		d.forget(ref)
		return
	}
	d.mu.Lock()
	if owner, taken := d.engines[eng.ID]; taken && owner.pod != ref {
		_, had := d.byPod[ref]
		d.mu.Unlock()
		d.logger.Warn("engine id claimed by two pods; ignoring the second",
			"engine", eng.ID, "owner", owner.pod.Namespace+"/"+owner.pod.Name, "pod", ref.Namespace+"/"+ref.Name)
		if had {
			// The pod now claims another id: the one it held is released
			// (it would otherwise stay registered to a pod that no
			// longer names it).
			d.forget(ref)
		}
		return
	}
	oldID, had := d.byPod[ref]
	if had && oldID == eng.ID && d.engines[oldID].engine == eng {
		d.mu.Unlock()
		return // nothing Narwhal cares about changed
	}
	d.mu.Unlock()
	if had && oldID != eng.ID {
		d.forget(ref)
	}
	row := d.keepSinkFields(eng)
	if err := d.sink.UpsertEngine(row); err != nil {
		d.sinkErrors.Inc()
		d.logger.Warn("sink refused engine", "engine", eng.ID, "err", err)
		return
	}
	d.mu.Lock()
	d.byPod[ref] = eng.ID
	d.engines[eng.ID] = entry{pod: ref, engine: eng}
	d.mu.Unlock()
}

// keepSinkFields copies into eng the fields discovery does not own from
// the sink's current row for it, when the sink can list its engines:
// residency, capacity and the last move always; TP, GPU and model when
// the pod does not name them.
func (d *Discoverer) keepSinkFields(eng controller.Engine) controller.Engine {
	l, ok := d.sink.(EngineLister)
	if !ok {
		return eng
	}
	for _, cur := range l.Engines() {
		if cur.ID == eng.ID {
			eng.Resident, eng.KVCapacityTokens, eng.LastMoveNs = cur.Resident, cur.KVCapacityTokens, cur.LastMoveNs
			// What the pod does not say, the agent may have reported (TP
			// from the engine's flags or GPUs, the GPU kind from NVML):
			// a pod event must not reset it to unknown, or the engine's
			// profile would change with every readiness flip.
			if eng.TP == 0 {
				eng.TP = cur.TP
			}
			if eng.GPU == "" {
				eng.GPU = cur.GPU
			}
			if eng.Model == "" {
				eng.Model = cur.Model
			}
			return eng
		}
	}
	return eng
}

func (d *Discoverer) remove(obj any) {
	pod, ok := podOf(obj)
	if !ok {
		return
	}
	d.forget(PodRef{Namespace: pod.Namespace, Name: pod.Name})
}

// forget removes the engine owned by pod ref, if any.
func (d *Discoverer) forget(ref PodRef) {
	d.mu.Lock()
	id, ok := d.byPod[ref]
	if ok {
		delete(d.byPod, ref)
		delete(d.engines, id)
	}
	pods := d.pods
	d.mu.Unlock()
	if !ok {
		return
	}
	if err := d.sink.RemoveEngine(id); err != nil {
		d.sinkErrors.Inc()
		d.logger.Warn("sink refused removal", "engine", id, "err", err)
	}
	d.handOver(pods, id, ref)
}

// handOver gives engine id, just released by pod gone, to another pod
// that claims it and was ignored while gone held it (first by namespace
// and name). That pod may have no event of its own to come, so it is
// applied now.
func (d *Discoverer) handOver(pods cache.Store, id string, gone PodRef) {
	if pods == nil {
		return
	}
	var claims []*corev1.Pod
	for _, obj := range pods.List() {
		p, ok := obj.(*corev1.Pod)
		if ok && podmeta.EngineID(p) == id && (PodRef{Namespace: p.Namespace, Name: p.Name}) != gone {
			claims = append(claims, p)
		}
	}
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].Namespace != claims[j].Namespace {
			return claims[i].Namespace < claims[j].Namespace
		}
		return claims[i].Name < claims[j].Name
	})
	for _, p := range claims {
		d.apply(p)
		d.mu.Lock()
		_, taken := d.engines[id]
		d.mu.Unlock()
		if taken {
			return
		}
	}
}
