package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/liveness"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/narwhal-io/narwhal/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// Version is the agent's version, sent in the hello.
const Version = "0.1.0"

// NVMLSource is what the agent needs from nvml (a *nvml.Manager).
type NVMLSource interface {
	Devices(ctx context.Context, nowNs int64) ([]nvml.Device, error)
	Status() nvml.Status
}

// Option configures an Agent.
type Option func(*Agent)

// WithNVML sets the GPU source (default: none, reported as degraded).
func WithNVML(src NVMLSource) Option { return func(a *Agent) { a.nvml = src } }

// WithWatcher sets the liveness watcher (default: none).
func WithWatcher(w liveness.Watcher, reason string) Option {
	return func(a *Agent) { a.watcher, a.watchReason = w, reason }
}

// WithHTTPClient sets the client used for engine scrapes and the core.
func WithHTTPClient(c *http.Client) Option { return func(a *Agent) { a.http = c } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(a *Agent) { a.log = l } }

// WithClock sets the clock (Unix ns).
func WithClock(now func() int64) Option { return func(a *Agent) { a.now = now } }

// WithEpoch sets the node epoch (default: the clock at New).
func WithEpoch(e uint64) Option { return func(a *Agent) { a.epoch = e } }

// engineState is what the agent last knew of one engine.
type engineState struct {
	cfg        EngineConfig
	role       controller.Role
	metrics    engine.Metrics
	scrapeErr  string
	lastOKNs   int64 // last successful scrape (agent clock)
	lastTryNs  int64
	deadAtNs   int64 // exit / port close seen at; 0 none
	deadReason string
	// deaths counts the exits/closes recorded; a successful scrape
	// revives the engine only when none was recorded while it ran (it
	// began after the exit), judged by order, not by clocks: watchers
	// stamp events with their own clock (eBPF: the wall clock at its start
	// plus monotonic time), which a stepped wall clock leaves behind.
	deaths uint64
	limit  engine.KVLimit
	sock   liveness.Socket // the watched listener (Port 0: none)
	// latency is what the engine's latency counters gained between its
	// last two successful scrapes, sent once with the next snapshot.
	latency *controller.LatencyInterval
	// rate learns the engine's prefill drain rate; backlog is its last
	// scrape's waiting and running requests priced with it.
	rate    engine.PrefillRate
	backlog engine.Backlog
	// gpuKind is the GPU kind last named by NVML for the GPUs in
	// gpuKindFor: a read that cannot name them (a lost GPU, NVML down)
	// keeps it rather than report the engine on another kind.
	gpuKind, gpuKindFor string
}

// Agent collects one node's engine facts and streams them to the core.
type Agent struct {
	cfg         Config
	nvml        NVMLSource
	watcher     liveness.Watcher
	watchReason string
	http        *http.Client
	log         *slog.Logger
	now         func() int64
	epoch       uint64
	stream      *Streamer

	mu         sync.Mutex
	engines    []*engineState
	byPID      map[int32]*engineState
	byPort     map[liveness.Socket]*engineState
	gpus       []nvml.Device
	gpusAtNs   int64 // when gpus were read; their memory is used within stale_after_s
	memStale   bool  // gpus' memory is past stale_after_s (logged once per change)
	lastSnapNs int64

	scrapes   *prometheus.CounterVec
	scrapeDur prometheus.Histogram
	liveEv    *prometheus.CounterVec
	nvmlUp    prometheus.GaugeFunc
	nvmlProbs prometheus.GaugeFunc
	kvTokens  *prometheus.GaugeVec
	kvCap     *prometheus.GaugeVec
	kvDisagr  *prometheus.GaugeVec
	backlogS  *prometheus.GaugeVec
	priced    *prometheus.GaugeVec
	refused   prometheus.Counter
}

// New builds an agent from a validated configuration.
func New(cfg Config, opts ...Option) (*Agent, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, byPID: map[int32]*engineState{}, byPort: map[liveness.Socket]*engineState{}}
	for _, o := range opts {
		o(a)
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = func() int64 { return time.Now().UnixNano() }
	}
	if a.http == nil {
		a.http = &http.Client{Timeout: 5 * time.Second, CheckRedirect: sameHostGET}
	}
	if a.epoch == 0 {
		a.epoch = uint64(max(a.now(), 1))
	}
	for _, e := range cfg.Engines {
		if e.Node != "" && e.Node != cfg.Node {
			continue
		}
		r, _ := controller.ParseRole(e.Role)
		st := &engineState{cfg: e, role: r, metrics: engine.Metrics{Running: -1, Waiting: -1, KVUsedTokens: -1}}
		a.engines = append(a.engines, st)
		if e.PID > 0 {
			a.byPID[e.PID] = st
		}
		if e.Port > 0 {
			if sock, ok := a.socketOf(e); ok {
				st.sock = sock
				a.byPort[sock] = st
			}
		}
	}
	if cfg.CoreURL != "" {
		a.stream = NewStreamer(StreamConfig{
			URL: cfg.CoreURL, Node: cfg.Node, Epoch: a.epoch, Token: a.token,
			QueueSize: cfg.QueueSize, HeartbeatNs: int64(cfg.HeartbeatIntervalS * 1e9),
			BackoffMin: time.Duration(cfg.BackoffMinS * 1e9), BackoffMax: time.Duration(cfg.BackoffMaxS * 1e9),
			Client: a.http, Logger: a.log, Hello: a.hello, Now: a.now,
		})
	}
	a.initMetrics()
	return a, nil
}

func (a *Agent) token() (string, error) {
	if a.cfg.TokenFile == "" {
		return os.Getenv("NARWHAL_AGENT_TOKEN"), nil
	}
	b, err := os.ReadFile(a.cfg.TokenFile)
	if err != nil {
		return "", err
	}
	// One token per line: during a rotation the Secret lists the new
	// token first and the old one after it (the core accepts both).
	for line := range strings.SplitSeq(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" {
			return t, nil
		}
	}
	return "", fmt.Errorf("token file %q holds no token", a.cfg.TokenFile)
}

func (a *Agent) initMetrics() {
	a.scrapes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_agent_scrapes_total", Help: "Engine metrics scrapes, by engine and result (ok, error).",
	}, []string{"engine", "result"})
	a.scrapeDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "narwhal_agent_scrape_duration_seconds", Help: "Duration of one engine metrics scrape.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	a.liveEv = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_agent_liveness_events_total", Help: "Liveness events observed, by kind (exit, port_closed, port_open).",
	}, []string{"kind"})
	a.nvmlUp = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_agent_nvml_available", Help: "1 when NVML answers, 0 in degraded mode.",
	}, func() float64 {
		if a.nvml != nil && a.nvml.Status().Available {
			return 1
		}
		return 0
	})
	a.nvmlProbs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_agent_nvml_device_problems",
		Help: "GPUs and MIG instances with a fault at the last NVML read (a lost GPU, a failed call, implausible memory figures; listed in /healthz nvml.problems).",
	}, func() float64 {
		if a.nvml == nil {
			return 0
		}
		return float64(len(a.nvml.Status().Problems))
	})
	a.kvTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "narwhal_agent_engine_kv_tokens", Help: "KV cache tokens in use, per engine (from its metrics).",
	}, []string{"engine"})
	a.kvCap = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "narwhal_agent_engine_kv_capacity_tokens", Help: "Physical KV limit in tokens, per engine.",
	}, []string{"engine"})
	a.kvDisagr = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "narwhal_agent_engine_kv_disagreement", Help: "1 when the engine's KV capacity and the NVML cross-check disagree.",
	}, []string{"engine"})
	a.backlogS = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "narwhal_agent_engine_prefill_backlog_seconds",
		Help: "Prefill backlog reported to the core, per engine and state (queued, running): the engine's waiting and running requests at its own measured prefill rate.",
	}, []string{"engine", "state"})
	a.priced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "narwhal_agent_engine_prefill_backlog_priced",
		Help: "1 when the engine's prefill backlog is priced (from its prefill histogram, recent or lifetime, or, for an engine that times no prefill, its first tokens per second while requests wait), 0 when unpriced and the backlog is reported as 0.",
	}, []string{"engine"})
	a.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "narwhal_agent_http_connections_refused_total",
		Help: "Connections to the agent's /metrics and /healthz listener answered 503 and closed because -max-connections were open.",
	})
}

// HTTPRefused counts the connections the agent's HTTP listener (/metrics,
// /healthz) refused at its connection limit (cmd/narwhal-agent's
// -max-connections).
func (a *Agent) HTTPRefused() prometheus.Counter { return a.refused }

// Collectors returns the agent's metrics (narwhal_agent_*).
func (a *Agent) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{a.scrapes, a.scrapeDur, a.liveEv, a.nvmlUp, a.nvmlProbs, a.kvTokens, a.kvCap, a.kvDisagr, a.backlogS, a.priced, a.refused}
	if a.stream != nil {
		cs = append(cs, a.stream.Collectors()...)
	}
	return cs
}

// Epoch returns the node epoch.
func (a *Agent) Epoch() uint64 { return a.epoch }

// Streamer returns the connection to the core (nil without core_url).
func (a *Agent) Streamer() *Streamer { return a.stream }

func (a *Agent) hello() wire.Hello {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := wire.Hello{AgentVersion: Version, NVML: "unavailable: no NVML source", Liveness: "none"}
	if a.nvml != nil {
		if st := a.nvml.Status(); st.Available {
			h.NVML = "ok"
		} else {
			h.NVML = "degraded: " + st.Reason
		}
	}
	if a.watcher != nil {
		h.Liveness = a.watcher.Source()
	}
	for _, d := range a.gpus {
		h.GPUs = append(h.GPUs, wire.GPU{UUID: d.UUID, Name: d.Name, MemoryBytes: d.Memory.TotalBytes,
			UsedBytes: d.Memory.UsedBytes, MIG: d.Parent != ""})
	}
	for _, e := range a.engines {
		h.Engines = append(h.Engines, e.cfg.ID)
	}
	return h
}

// Collect reads NVML and every engine once at nowNs and returns the
// snapshot to send.
func (a *Agent) Collect(ctx context.Context, nowNs int64) wire.Snapshot {
	var gpus []nvml.Device
	fresh := false // NVML was read at this collection
	if a.nvml != nil {
		ds, err := a.nvml.Devices(ctx, nowNs)
		if err == nil {
			gpus, fresh = ds, true
		}
	}
	type result struct {
		m   engine.Metrics
		err error
		dur time.Duration
	}
	a.mu.Lock()
	engines := a.engines // SetEngines swaps the slice, never edits it
	cfgs := make([]EngineConfig, len(engines))
	deaths := make([]uint64, len(engines))
	for i, e := range engines {
		cfgs[i], deaths[i] = e.cfg, e.deaths
	}
	a.mu.Unlock()
	res := make([]result, len(engines))
	var wg sync.WaitGroup
	timeout := time.Duration(a.cfg.ScrapeTimeoutS * 1e9)
	for i := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			t0 := time.Now()
			m, err := engine.Scrape(sctx, a.http, cfgs[i].Kind, cfgs[i].MetricsURL)
			res[i] = result{m, err, time.Since(t0)}
		}()
	}
	wg.Wait()

	a.mu.Lock()
	defer a.mu.Unlock()
	if fresh {
		a.gpus, a.gpusAtNs = gpus, nowNs
	}
	a.noteMemStaleLocked(nowNs)
	// SetEngines may have replaced the list while the engines were
	// scraped: an engine it removed is neither reported nor given metric
	// series again (it deleted them, and nothing would delete them twice).
	var kept map[*engineState]bool
	if cur := a.engines; len(cur) != len(engines) || (len(cur) > 0 && &cur[0] != &engines[0]) {
		kept = make(map[*engineState]bool, len(cur))
		for _, e := range cur {
			kept[e] = true
		}
	}
	snap := wire.Snapshot{Engines: make([]wire.EngineReport, 0, len(engines))}
	for i, e := range engines {
		if kept != nil && !kept[e] {
			continue
		}
		r := res[i]
		a.scrapeDur.Observe(r.dur.Seconds())
		e.lastTryNs = nowNs
		if r.err != nil {
			e.scrapeErr = r.err.Error()
			a.scrapes.WithLabelValues(e.cfg.ID, "error").Inc()
		} else {
			e.latency = latencySince(e.metrics, r.m, e.lastOKNs, nowNs)
			if u, ok := a.engineBusyLocked(e.cfg.GPUs); ok && e.latency != nil && fresh {
				// the busy seconds the controller weighs a prefill
				// pool's work by: this collection's utilization sample
				// over the whole interval
				busy := u * e.latency.IntervalS
				e.latency.BusyS = &busy
			}
			if e.lastOKNs > 0 && nowNs > e.lastOKNs {
				iv := float64(nowNs-e.lastOKNs) / 1e9
				e.rate.Observe(e.metrics.Latency, r.m.Latency, iv)
				if e.metrics.Waiting > 0 && r.m.Waiting > 0 {
					e.rate.ObserveBusy(e.metrics.Latency, r.m.Latency, iv)
				}
			}
			e.backlog = e.rate.Price(r.m.Waiting, r.m.Running, r.m.Latency)
			e.metrics, e.scrapeErr, e.lastOKNs = r.m, "", nowNs
			a.scrapes.WithLabelValues(e.cfg.ID, "ok").Inc()
			if e.deadAtNs != 0 && e.deaths == deaths[i] {
				// the engine answers again after an exit/close: restarted
				e.deadAtNs, e.deadReason = 0, ""
			}
		}
		mem := a.engineMemLocked(e.cfg.GPUs)
		geo := e.cfg.Geometry
		if !geo.Zero() && geo.TP == 0 {
			geo.TP = int64(e.cfg.TP) // KV heads per rank follow the engine's tp
		}
		e.limit = engine.CrossCheck(e.metrics.CapacityTokens, mem, geo, e.metrics.GPUMemoryUtilization)
		snap.Engines = append(snap.Engines, a.reportLocked(e))
	}
	a.lastSnapNs = nowNs
	return snap
}

// gpuLocked is the engine GPU named id (a UUID or an index), nil when
// NVML did not report it.
func (a *Agent) gpuLocked(id string) *nvml.Device {
	for i := range a.gpus {
		d := &a.gpus[i]
		if d.UUID == id || (d.Parent == "" && strconv.Itoa(d.Index) == id) {
			return d
		}
	}
	return nil
}

// engineBusyLocked is the share of time the engine's GPUs ran kernels:
// the mean of their NVML utilization, sampled at this collection; false
// when the engine names no GPU or any of them does not report it.
func (a *Agent) engineBusyLocked(ids []string) (float64, bool) {
	if len(ids) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, id := range ids {
		d := a.gpuLocked(id)
		if d == nil || !d.Utilization.Known {
			return 0, false
		}
		sum += float64(d.Utilization.GPUPercent) / 100
	}
	return sum / float64(len(ids)), true
}

// noteMemStaleLocked marks the GPUs' memory stale once NVML has not been
// read within stale_after_s (clock stepped back behind the read: stale
// too), logging each change.
func (a *Agent) noteMemStaleLocked(nowNs int64) {
	stale := len(a.gpus) > 0 && (nowNs < a.gpusAtNs || nowNs-a.gpusAtNs > int64(a.cfg.StaleAfterS*1e9))
	if stale != a.memStale {
		if stale {
			a.log.Warn("NVML not read within stale_after_s: GPU memory unknown, KV limits not cross-checked until it answers",
				"last_read_ns", a.gpusAtNs)
		} else {
			a.log.Info("NVML read again: GPU memory known")
		}
	}
	a.memStale = stale
}

// engineMemLocked is the smallest total memory among the engine's GPUs
// (by UUID or index); 0 when any is unknown (its memory not read, a
// total of 0, or NVML not read within stale_after_s).
func (a *Agent) engineMemLocked(ids []string) uint64 {
	if len(ids) == 0 || len(a.gpus) == 0 || a.memStale {
		return 0
	}
	var low uint64
	for _, id := range ids {
		found := a.gpuLocked(id)
		if found == nil || !found.Memory.Known || found.Memory.TotalBytes == 0 {
			return 0
		}
		if low == 0 || found.Memory.TotalBytes < low {
			low = found.Memory.TotalBytes
		}
	}
	return low
}

// gpuKindLocked is the engine's GPU kind for the core's profiles: its
// gpu_kind, else the built-in table's name for the NVML name of its first
// GPU NVML knows, else that NVML name ("" when none is known).
func (a *Agent) gpuKindLocked(c EngineConfig) string {
	if c.GPUKind != "" {
		return c.GPUKind
	}
	for _, id := range c.GPUs {
		for i := range a.gpus {
			d := &a.gpus[i]
			if d.Name == "" || (d.UUID != id && (d.Parent != "" || strconv.Itoa(d.Index) != id)) {
				continue
			}
			if g, ok := profile.LookupGPU(d.Name); ok {
				return g.Name
			}
			return d.Name
		}
	}
	return ""
}

// engineGPUKindLocked is gpuKindLocked kept per engine: when NVML cannot
// name the engine's GPUs now (a lost GPU, NVML down), the kind it last
// named for the same GPUs stands.
func (a *Agent) engineGPUKindLocked(e *engineState) string {
	k := a.gpuKindLocked(e.cfg)
	if e.cfg.GPUKind != "" {
		return k
	}
	key := strings.Join(e.cfg.GPUs, ",")
	if k != "" {
		e.gpuKind, e.gpuKindFor = k, key
	} else if e.gpuKindFor == key {
		k = e.gpuKind
	}
	return k
}

func (a *Agent) reportLocked(e *engineState) wire.EngineReport {
	live := e.scrapeErr == "" && e.lastOKNs > 0 && e.deadAtNs == 0
	m := e.metrics
	r := wire.EngineReport{
		ID: e.cfg.ID, Model: e.cfg.Model, GPU: a.engineGPUKindLocked(e), Role: e.role, Live: live,
		Resident: controller.Resident{DecodeSeqs: max(m.Running, 0), KVTokens: max(m.KVUsedTokens, 0),
			QueuedPrefillS: e.backlog.QueuedPrefillS, RunningPrefillS: e.backlog.RunningPrefillS},
		RunningRequests: m.Running, QueuedRequests: m.Waiting,
		KVCapacityTokens: e.limit.Tokens, KVSource: e.limit.Source, KVDisagreement: e.limit.Disagreement,
		ScrapeError: e.scrapeErr, ScrapedNs: e.lastOKNs, TP: e.cfg.TPDegree(),
		Latency: e.latency,
	}
	e.latency = nil // each interval is reported once
	if e.deadAtNs != 0 && r.ScrapeError == "" {
		r.ScrapeError = "engine " + e.deadReason
	}
	a.kvTokens.WithLabelValues(e.cfg.ID).Set(float64(r.Resident.KVTokens))
	a.kvCap.WithLabelValues(e.cfg.ID).Set(float64(r.KVCapacityTokens))
	dis := 0.0
	if e.limit.Source == engine.KVSourceEngine && e.limit.BoundTokens > 0 && e.limit.EngineTokens > e.limit.BoundTokens {
		dis = 1
	}
	a.kvDisagr.WithLabelValues(e.cfg.ID).Set(dis)
	a.backlogS.WithLabelValues(e.cfg.ID, "queued").Set(e.backlog.QueuedPrefillS)
	a.backlogS.WithLabelValues(e.cfg.ID, "running").Set(e.backlog.RunningPrefillS)
	a.priced.WithLabelValues(e.cfg.ID).Set(b2f(e.backlog.RequestsPerS > 0))
	return r
}

// socketOf is the listener to watch for engine e: its port in the
// namespace of its netns file, else of its PID, else in every namespace.
// ok is false when the namespace cannot be read and another engine of
// this node shares the port: watching it everywhere would mix the two.
func (a *Agent) socketOf(e EngineConfig) (liveness.Socket, bool) {
	path := e.NetNS
	if path == "" && e.PID > 0 {
		path = "/proc/" + strconv.Itoa(int(e.PID)) + "/ns/net"
	}
	if path != "" {
		ns, err := liveness.NetNSOf(path)
		if err == nil {
			return liveness.Socket{NetNS: ns, Port: e.Port}, true
		}
		for _, o := range a.cfg.Engines {
			if o.ID != e.ID && o.Port == e.Port && (o.Node == "" || o.Node == a.cfg.Node) {
				a.log.Warn("engine port not watched: its network namespace is unreadable and another engine on this node uses the port",
					"engine", e.ID, "port", e.Port, "netns", path, "err", err)
				return liveness.Socket{}, false
			}
		}
		a.log.Warn("engine network namespace unreadable; watching its port in every namespace",
			"engine", e.ID, "port", e.Port, "netns", path, "err", err)
	}
	return liveness.Socket{Port: e.Port}, true
}

// HandleLiveness applies one watcher event: the engine is marked not live
// at once and a liveness report is queued ahead of the next snapshot.
func (a *Agent) HandleLiveness(ev liveness.Event) {
	a.liveEv.WithLabelValues(ev.Kind.String()).Inc()
	a.mu.Lock()
	var e *engineState
	switch ev.Kind {
	case liveness.Exited:
		e = a.byPID[ev.PID]
	case liveness.PortClosed, liveness.PortOpened:
		if e = a.byPort[liveness.Socket{NetNS: ev.NetNS, Port: ev.Port}]; e == nil {
			e = a.byPort[liveness.Socket{Port: ev.Port}] // watched in every namespace
		}
	}
	if e == nil {
		a.mu.Unlock()
		return
	}
	var out *wire.Liveness
	switch ev.Kind {
	case liveness.Exited, liveness.PortClosed:
		if e.deadAtNs == 0 {
			e.deadAtNs, e.deadReason = ev.AtNs, ev.Kind.String()
			e.deaths++
			out = &wire.Liveness{Engine: e.cfg.ID, Live: false, Reason: ev.Kind.String(), PID: ev.PID, Port: ev.Port, AtNs: ev.AtNs}
		}
	case liveness.PortOpened:
		// live again only once a scrape succeeds; note it
		a.log.Info("engine port listening", "engine", e.cfg.ID, "port", ev.Port)
	}
	a.mu.Unlock()
	if out != nil {
		a.log.Warn("engine not live", "engine", out.Engine, "reason", out.Reason, "pid", out.PID, "port", out.Port)
		if a.stream != nil {
			a.stream.Enqueue(wire.KindLiveness, out)
		}
	}
}

// Health is the agent's freshness verdict for /healthz.
type Health struct {
	OK       bool           `json:"ok"`
	Problems []string       `json:"problems,omitempty"`
	NVML     nvml.Status    `json:"nvml"`
	Liveness string         `json:"liveness"`
	Stream   StreamStatus   `json:"stream"`
	Engines  []EngineHealth `json:"engines"`
}

// EngineHealth is one engine's freshness.
type EngineHealth struct {
	ID          string  `json:"id"`
	LastScrapeS float64 `json:"last_scrape_age_s"` // -1 never
	Error       string  `json:"error,omitempty"`
}

// Health judges freshness at nowNs: not OK when no snapshot was collected
// within stale_after_s, when no engine was scraped within it (with
// engines configured), or when the core has not acknowledged within it.
// NVML degraded, NVML device problems (nvml.problems) and /proc liveness
// are reported but do not fail health: the agent still does useful work,
// and restarting it mends no GPU.
func (a *Agent) Health(nowNs int64) Health {
	stale := int64(a.cfg.StaleAfterS * 1e9)
	a.mu.Lock()
	h := Health{OK: true, Liveness: "none"}
	if a.watcher != nil {
		h.Liveness = a.watcher.Source()
		if a.watchReason != "" {
			h.Liveness += " (eBPF unavailable: " + a.watchReason + ")"
		}
	}
	if a.lastSnapNs == 0 || nowNs-a.lastSnapNs > stale {
		h.Problems = append(h.Problems, "no snapshot collected within stale_after_s")
	}
	fresh := 0
	for _, e := range a.engines {
		eh := EngineHealth{ID: e.cfg.ID, LastScrapeS: -1, Error: e.scrapeErr}
		if e.lastOKNs > 0 {
			eh.LastScrapeS = float64(nowNs-e.lastOKNs) / 1e9
			if nowNs-e.lastOKNs <= stale {
				fresh++
			}
		}
		h.Engines = append(h.Engines, eh)
	}
	nEngines := len(a.engines)
	a.mu.Unlock()
	if nEngines > 0 && fresh == 0 {
		h.Problems = append(h.Problems, "no engine scraped successfully within stale_after_s")
	}
	if a.nvml != nil {
		h.NVML = a.nvml.Status()
	} else {
		h.NVML = nvml.Status{Reason: "no NVML source configured"}
	}
	if a.stream != nil {
		h.Stream = a.stream.Status()
		if h.Stream.LastAckNs == 0 || nowNs-h.Stream.LastAckNs > stale {
			h.Problems = append(h.Problems, "core has not acknowledged within stale_after_s")
		}
		if h.Stream.Refused != "" {
			h.Problems = append(h.Problems, "core refused the last batch ("+h.Stream.Refused+")")
		}
	}
	h.OK = len(h.Problems) == 0
	return h
}

// Run registers the engines with the watcher, then collects and streams
// until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.watcher != nil {
		a.mu.Lock()
		engines := a.engines
		a.mu.Unlock()
		for _, e := range engines {
			if e.cfg.PID > 0 {
				if err := a.watcher.WatchPID(e.cfg.PID); err != nil {
					a.log.Warn("cannot watch engine pid", "engine", e.cfg.ID, "pid", e.cfg.PID, "err", err)
				}
			}
			if e.sock.Port > 0 {
				if err := a.watcher.WatchPort(e.sock); err != nil {
					a.log.Warn("cannot watch engine port", "engine", e.cfg.ID, "port", e.cfg.Port, "err", err)
				}
			}
		}
		go func() {
			for ev := range a.watcher.Events() {
				a.HandleLiveness(ev)
			}
		}()
	}
	var wg sync.WaitGroup
	if a.stream != nil {
		// hello first (with the GPU list the first collection read),
		// then the first snapshot
		wg.Add(1)
		defer wg.Wait()
		first := a.Collect(ctx, a.now())
		a.stream.EnqueueHello()
		a.stream.Enqueue(wire.KindSnapshot, &first)
		go func() { defer wg.Done(); a.stream.Run(ctx) }()
	}
	t := time.NewTicker(time.Duration(a.cfg.ScrapeIntervalS * 1e9))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			snap := a.Collect(ctx, a.now())
			if a.stream != nil {
				a.stream.Enqueue(wire.KindSnapshot, &snap)
			}
		}
	}
}

// latencySince is the latency interval between two successful scrapes of
// one engine (nil when the engine exposes no latency counters, this is
// its first scrape, or it restarted in between): the batch is the mean
// of the two scrapes' running requests, the context their mean resident
// KV tokens.
func latencySince(prev, cur engine.Metrics, prevNs, nowNs int64) *controller.LatencyInterval {
	if prevNs <= 0 || nowNs <= prevNs || cur.Latency == nil || prev.Latency == nil {
		return nil
	}
	batch := float64(max(cur.Running, 0)+max(prev.Running, 0)) / 2
	ctx := float64(max(cur.KVUsedTokens, 0)+max(prev.KVUsedTokens, 0)) / 2
	li, ok := cur.Latency.Since(prev.Latency, float64(nowNs-prevNs)/1e9, batch, ctx)
	if !ok {
		return nil
	}
	return &li
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sameHostGET is the agent's redirect policy: a GET follows a redirect on
// the same host (an engine's /metrics answered with /metrics/); nothing
// else does, and the 3xx answer is taken as it is (an error for a scrape
// and for the core). Following a scrape to another host would count that
// host's numbers as the engine's; a POST to the core would be resent as a
// GET without its body, and to another host without its token.
func sameHostGET(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 || via[0].Method != http.MethodGet || req.URL.Host != via[0].URL.Host {
		return http.ErrUseLastResponse
	}
	return nil
}
