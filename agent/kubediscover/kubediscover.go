package kubediscover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/podresources"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
	"github.com/narwhal-io/narwhal/nvml"
)

// Pod annotations read by discovery.
const (
	AnnotationMetricsPort = "narwhal.io/metrics-port"
	AnnotationMetricsPath = "narwhal.io/metrics-path"
	AnnotationEngineKind  = "narwhal.io/engine-kind"
)

// ErrInvalidConfig is returned (wrapped) by New.
var ErrInvalidConfig = errors.New("kubediscover: invalid config")

// LoadConfig decodes the agent configuration's `kubernetes` section
// (unknown keys are errors); an empty node is a disabled Config.
func LoadConfig(n *yaml.Node) (Config, error) {
	var c Config
	if n == nil || n.Kind == 0 {
		return c, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(n); err != nil {
		return c, fmt.Errorf("%w: kubernetes: %w", ErrInvalidConfig, err)
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: kubernetes: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

// Config is the agent configuration's `kubernetes` section.
type Config struct {
	// Enabled turns discovery on (in-cluster credentials).
	Enabled bool `yaml:"enabled"`
	// Namespace of the engine pods; "" every namespace.
	Namespace string `yaml:"namespace"`
	// Roles is the role label (preset narwhal or llm-d).
	Roles podmeta.Roles `yaml:"roles"`
	// Selector is ANDed with the role label selector.
	Selector string `yaml:"selector"`
	// MetricsPortName is the container port (by name) of an engine's
	// Prometheus metrics; the pod annotation narwhal.io/metrics-port (a
	// number or a port name) overrides it.
	MetricsPortName string `yaml:"metrics_port_name"`
	// MetricsPath is the metrics path on that port; the pod annotation
	// narwhal.io/metrics-path overrides it.
	MetricsPath string `yaml:"metrics_path"`
	// DefaultKind is the engine kind (vllm or sglang) of a pod without
	// the narwhal.io/engine-kind annotation.
	DefaultKind engine.Kind `yaml:"default_kind"`
	// PodResourcesSocket is the kubelet's socket ("" the default path;
	// "none" disables the GPU map).
	PodResourcesSocket string `yaml:"pod_resources_socket"`
	// GPURefreshS is how often the kubelet's GPU assignments are re-read
	// when no pod changes (a pod change re-reads them at once).
	GPURefreshS float64 `yaml:"gpu_refresh_s"`
}

// Defaults fills the empty fields the Discoverer defaults (New applies
// them too).
func (c *Config) Defaults() {
	if c.MetricsPortName == "" {
		c.MetricsPortName = "http"
	}
	if c.MetricsPath == "" {
		c.MetricsPath = "/metrics"
	}
	if c.DefaultKind == "" {
		c.DefaultKind = engine.VLLM
	}
	if c.GPURefreshS == 0 {
		c.GPURefreshS = 10
	}
}

// GPUSource lists the GPUs the kubelet assigned per pod
// (*podresources.Client).
type GPUSource interface {
	GPUs(ctx context.Context) (map[podresources.PodRef][]string, error)
}

// ProcSource lists NVML devices with their processes (*nvml.Manager).
type ProcSource interface {
	Devices(ctx context.Context, nowNs int64) ([]nvml.Device, error)
}

// Option configures a Discoverer.
type Option func(*Discoverer)

// WithGPUs sets the PodResources source.
func WithGPUs(g GPUSource) Option { return func(d *Discoverer) { d.gpus = g } }

// WithNVML sets the NVML process source for the cross-check.
func WithNVML(p ProcSource) Option { return func(d *Discoverer) { d.procs = p } }

// WithProcRoot sets the /proc used to read cgroups (tests).
func WithProcRoot(p string) Option { return func(d *Discoverer) { d.procRoot = p } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(d *Discoverer) { d.log = l } }

// Discoverer mirrors the engine pods of one node into a sink.
type Discoverer struct {
	client   kubernetes.Interface
	cfg      Config
	node     string
	sel      labels.Selector
	sink     func([]agent.EngineConfig)
	gpus     GPUSource
	procs    ProcSource
	procRoot string
	log      *slog.Logger

	mu      sync.Mutex
	pods    map[string]*corev1.Pod // namespace/name -> pod
	gpuMap  map[podresources.PodRef][]string
	last    []agent.EngineConfig
	kick    chan struct{}
	synced  func() bool
	disagr  prometheus.Counter
	engines prometheus.GaugeFunc
	// pids is each engine pod's PID found at the last publish (by pod
	// UID), kept while NVML cannot list the processes on its GPUs.
	pids map[types.UID]int32
	// seen and seenNow are the disagreements (pod, GPU, PID) of the last
	// NVML read and of this one: each is counted and logged once while it
	// lasts, not at every publish. Only the publishing goroutine uses them.
	seen, seenNow map[string]bool
}

// New checks cfg and returns a Discoverer for node that hands every new
// engine list to sink.
func New(client kubernetes.Interface, cfg Config, node string, sink func([]agent.EngineConfig), opts ...Option) (*Discoverer, error) {
	if client == nil || sink == nil || node == "" {
		return nil, fmt.Errorf("%w: client, sink and node are required", ErrInvalidConfig)
	}
	roles, err := cfg.Roles.Resolve()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Roles = roles
	s := roles.Selector()
	if cfg.Selector != "" {
		s += "," + cfg.Selector
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: selector %q: %w", ErrInvalidConfig, s, err)
	}
	cfg.Defaults()
	if !strings.HasPrefix(cfg.MetricsPath, "/") {
		return nil, fmt.Errorf("%w: metrics_path %q must start with /", ErrInvalidConfig, cfg.MetricsPath)
	}
	if cfg.DefaultKind != engine.VLLM && cfg.DefaultKind != engine.SGLang {
		return nil, fmt.Errorf("%w: default_kind %q (want vllm or sglang)", ErrInvalidConfig, cfg.DefaultKind)
	}
	if !(cfg.GPURefreshS > 0 && cfg.GPURefreshS <= 3600) {
		return nil, fmt.Errorf("%w: gpu_refresh_s %v must be in (0, 3600]", ErrInvalidConfig, cfg.GPURefreshS)
	}
	d := &Discoverer{client: client, cfg: cfg, node: node, sel: sel, sink: sink, procRoot: "/proc",
		log: slog.New(slog.DiscardHandler), pods: map[string]*corev1.Pod{}, kick: make(chan struct{}, 1),
		synced: func() bool { return false }}
	for _, o := range opts {
		o(d)
	}
	d.log = d.log.With("component", "kubediscover")
	d.disagr = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "narwhal_agent_gpu_mapping_disagreements_total",
		Help: "GPU processes NVML reports on a pod's GPU (per PodResources) that belong to another pod, each counted once while NVML lists it.",
	})
	d.engines = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_agent_discovered_engines",
		Help: "Engine pods discovered on this node through the API server.",
	}, func() float64 { return float64(len(d.Engines())) })
	return d, nil
}

// Selector is the label selector of the engine pods.
func (d *Discoverer) Selector() string { return d.sel.String() }

// Collectors returns the discoverer's metrics.
func (d *Discoverer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.disagr, d.engines}
}

// HasSynced reports whether the first pod list arrived.
func (d *Discoverer) HasSynced() bool {
	d.mu.Lock()
	s := d.synced
	d.mu.Unlock()
	return s()
}

// Engines returns the engine list last handed to the sink.
func (d *Discoverer) Engines() []agent.EngineConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]agent.EngineConfig(nil), d.last...)
}

// Run watches the node's engine pods until ctx ends.
func (d *Discoverer) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(d.client, 0,
		informers.WithNamespace(d.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", d.node).String()
			o.LabelSelector = d.sel.String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.put(obj) },
		UpdateFunc: func(_, obj any) { d.put(obj) },
		DeleteFunc: func(obj any) { d.del(obj) },
	}); err != nil {
		return fmt.Errorf("kubediscover: add handler: %w", err)
	}
	d.mu.Lock()
	d.synced = inf.HasSynced
	d.mu.Unlock()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	refresh := time.NewTicker(time.Duration(d.cfg.GPURefreshS * float64(time.Second)))
	defer refresh.Stop()
	d.publish(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick: // a pod that just started has GPUs the last map lacks
		case <-refresh.C:
		}
		d.publish(ctx)
	}
}

func (d *Discoverer) put(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	d.mu.Lock()
	d.pods[p.Namespace+"/"+p.Name] = p
	d.mu.Unlock()
	d.poke()
}

func (d *Discoverer) del(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	d.mu.Lock()
	delete(d.pods, p.Namespace+"/"+p.Name)
	d.mu.Unlock()
	d.poke()
}

func (d *Discoverer) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// publish re-reads the kubelet's GPU map, builds the engine list and
// hands it to the sink when it changed.
func (d *Discoverer) publish(ctx context.Context) {
	if d.gpus != nil {
		m, err := d.gpus.GPUs(ctx)
		if err != nil {
			d.log.Warn("GPU map unavailable; engines keep their last GPUs", "err", err)
		} else {
			d.mu.Lock()
			d.gpuMap = m
			d.mu.Unlock()
		}
	}
	var devs []nvml.Device
	nvmlRead := false
	if d.procs != nil {
		if ds, err := d.procs.Devices(ctx, time.Now().UnixNano()); err == nil {
			devs, nvmlRead = ds, true
		}
	}
	d.mu.Lock()
	pods := make([]*corev1.Pod, 0, len(d.pods))
	for _, p := range d.pods {
		pods = append(pods, p)
	}
	gpuMap := d.gpuMap
	d.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	var out []agent.EngineConfig
	seen := map[string]bool{}
	pids := map[types.UID]int32{}
	for _, p := range pods {
		e, err := d.EngineFromPod(p, gpuMap[podresources.PodRef{Namespace: p.Namespace, Name: p.Name}])
		if err != nil {
			d.log.Debug("pod is not an engine", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		if seen[e.ID] {
			d.log.Warn("engine id claimed by two pods; ignoring the second", "engine", e.ID, "pod", p.Namespace+"/"+p.Name)
			continue
		}
		seen[e.ID] = true
		e.PID = d.crossCheck(p, e.GPUs, devs)
		if e.PID == 0 && d.procs != nil && (!nvmlRead || !procsKnown(e.GPUs, devs)) {
			// NVML could not list the processes on the pod's GPUs this
			// time (unreadable, a failed call): the last PID found
			// stands, rather than the engine's watches churning
			e.PID = d.pids[p.UID]
		}
		if e.PID != 0 {
			pids[p.UID] = e.PID
		}
		if e.PID == 0 {
			// Without the pod's process its network namespace is unknown,
			// and pods on one node share port numbers: the port is not
			// watched (liveness then comes from scrapes alone).
			e.Port = 0
		}
		out = append(out, e)
	}
	d.pids = pids
	if nvmlRead {
		d.seen, d.seenNow = d.seenNow, nil
	}
	d.mu.Lock()
	changed := !reflect.DeepEqual(out, d.last)
	if changed {
		d.last = out
	}
	d.mu.Unlock()
	if changed {
		d.log.Info("engines on this node", "count", len(out))
		d.sink(append([]agent.EngineConfig(nil), out...))
	}
}

// EngineFromPod turns a Running pod into the agent's engine entry
// (without the PID, which needs NVML).
func (d *Discoverer) EngineFromPod(p *corev1.Pod, gpus []string) (agent.EngineConfig, error) {
	role, err := podmeta.RoleWith(d.cfg.Roles, p)
	if err != nil {
		return agent.EngineConfig{}, err
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return agent.EngineConfig{}, fmt.Errorf("pod %s/%s is not running with an IP (phase %s)", p.Namespace, p.Name, p.Status.Phase)
	}
	port, err := d.metricsPort(p)
	if err != nil {
		return agent.EngineConfig{}, err
	}
	path := d.cfg.MetricsPath
	if v := p.Annotations[AnnotationMetricsPath]; v != "" {
		if !strings.HasPrefix(v, "/") {
			return agent.EngineConfig{}, fmt.Errorf("pod %s/%s: %s %q must start with /", p.Namespace, p.Name, AnnotationMetricsPath, v)
		}
		path = v
	}
	kind := d.cfg.DefaultKind
	if v := p.Annotations[AnnotationEngineKind]; v != "" {
		kind = engine.Kind(v)
		if kind != engine.VLLM && kind != engine.SGLang {
			return agent.EngineConfig{}, fmt.Errorf("pod %s/%s: %s %q (want vllm or sglang)", p.Namespace, p.Name, AnnotationEngineKind, v)
		}
	}
	row, err := podmeta.EngineFromPodWith(d.cfg.Roles, p) // the core's id, model and GPU rules
	if err != nil {
		return agent.EngineConfig{}, err
	}
	tp, src, err := podTP(p, engineContainer(p, port), gpus)
	if err != nil {
		return agent.EngineConfig{}, err
	}
	d.log.Debug("engine tensor-parallel degree", "pod", p.Namespace+"/"+p.Name, "tp", tp, "source", src)
	return agent.EngineConfig{
		ID: row.ID, Node: d.node, Kind: kind,
		MetricsURL: "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))) + path,
		Port:       port, GPUs: append([]string(nil), gpus...), Model: row.Model, GPUKind: row.GPU, Role: role.String(),
		TP: tp,
	}, nil
}

// metricsPort resolves the annotation, the named port, or the first port.
func (d *Discoverer) metricsPort(p *corev1.Pod) (uint16, error) {
	want := d.cfg.MetricsPortName
	if v := p.Annotations[AnnotationMetricsPort]; v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			if n < 1 || n > 65535 {
				return 0, fmt.Errorf("pod %s/%s: %s %q out of range", p.Namespace, p.Name, AnnotationMetricsPort, v)
			}
			return uint16(n), nil
		}
		want = v
	}
	var first int32
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if first == 0 {
				first = cp.ContainerPort
			}
			if cp.Name == want {
				return uint16(cp.ContainerPort), nil
			}
		}
	}
	if first == 0 || p.Annotations[AnnotationMetricsPort] != "" {
		return 0, fmt.Errorf("pod %s/%s: no container port named %q", p.Namespace, p.Name, want)
	}
	return uint16(first), nil
}

// procsKnown reports whether NVML listed the processes of every one of
// gpus (a process list that failed, or a GPU NVML could not name, is
// unknown).
func procsKnown(gpus []string, devs []nvml.Device) bool {
	for _, g := range gpus {
		known := false
		for _, dv := range devs {
			if (dv.UUID == g || (dv.Parent == "" && strconv.Itoa(dv.Index) == g)) && dv.Processes != nil {
				known = true
				break
			}
		}
		if !known {
			return false
		}
	}
	return true
}

// crossCheck compares the kubelet's GPUs of pod p with NVML's processes on
// them and returns the pod's engine PID (0 when none is found): the
// lowest PID on its GPUs whose cgroup names the pod's UID. A process of
// another pod is counted and logged once while NVML keeps listing it.
func (d *Discoverer) crossCheck(p *corev1.Pod, gpus []string, devs []nvml.Device) int32 {
	if len(gpus) == 0 || len(devs) == 0 {
		return 0
	}
	mine := map[string]bool{}
	for _, g := range gpus {
		mine[g] = true
	}
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	var pid int32
	for _, dv := range devs {
		if !mine[dv.UUID] && !(dv.Parent == "" && mine[strconv.Itoa(dv.Index)]) {
			continue
		}
		for _, pr := range dv.Processes {
			cg, err := os.ReadFile(filepath.Join(d.procRoot, strconv.Itoa(int(pr.PID)), "cgroup"))
			if err != nil {
				continue // exited, or not visible (no hostPID)
			}
			s := string(cg)
			if uid != "" && (strings.Contains(s, string(p.UID)) || strings.Contains(s, uid)) {
				if pid == 0 || int32(pr.PID) < pid {
					pid = int32(pr.PID)
				}
				continue
			}
			if strings.Contains(s, "kubepods") {
				key := p.Namespace + "/" + p.Name + " " + dv.UUID + " " + strconv.Itoa(dv.Index) + " " + strconv.Itoa(int(pr.PID))
				if !d.seen[key] && !d.seenNow[key] {
					d.disagr.Inc()
					d.log.Warn("GPU process belongs to another pod than the kubelet's assignment",
						"pod", p.Namespace+"/"+p.Name, "gpu", dv.UUID, "pid", pr.PID)
				}
				if d.seenNow == nil {
					d.seenNow = map[string]bool{}
				}
				d.seenNow[key] = true
			}
		}
	}
	return pid
}
