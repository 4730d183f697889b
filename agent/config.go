package agent

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/core/controller"
	"go.yaml.in/yaml/v3"
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("agent: invalid configuration")

// Config is the agent's configuration file (YAML, snake_case keys).
type Config struct {
	// Node is this node's name (default: $NODE_NAME, else the hostname).
	Node string `yaml:"node"`
	// CoreURL is the core's ingest endpoint, e.g.
	// http://narwhal-core:8080/v1/agent/reports.
	CoreURL string `yaml:"core_url"`
	// TokenFile holds the bearer token, read again for every batch sent
	// (a rotated Secret is followed); with several lines, the first
	// non-blank one is sent. $NARWHAL_AGENT_TOKEN is used when empty.
	TokenFile string `yaml:"token_file"`
	// ScrapeIntervalS: every this many seconds the agent reads NVML and
	// each engine's metrics and queues one snapshot for the core. 0 takes
	// the default, as for every interval and timeout below.
	ScrapeIntervalS float64 `yaml:"scrape_interval_s"`
	// ScrapeTimeoutS bounds one scrape of an engine's metrics endpoint.
	ScrapeTimeoutS float64 `yaml:"scrape_timeout_s"`
	// HeartbeatIntervalS: with nothing else sent for this long, the
	// stream sends a heartbeat, so the core keeps the node live.
	HeartbeatIntervalS float64 `yaml:"heartbeat_interval_s"`
	// NVMLTimeoutS bounds one NVML call; a hung driver puts NVML in
	// degraded mode (reported by /healthz) instead of stopping the agent.
	NVMLTimeoutS float64 `yaml:"nvml_timeout_s"`
	// ProcPollS is how often /proc liveness polls the engines' processes
	// and ports (when eBPF is not used).
	ProcPollS float64 `yaml:"proc_poll_s"`
	// BackoffMinS and BackoffMaxS bound the jittered exponential backoff
	// between failed sends to the core.
	BackoffMinS float64 `yaml:"backoff_min_s"`
	BackoffMaxS float64 `yaml:"backoff_max_s"`
	// StaleAfterS: /healthz fails when no snapshot was collected, no
	// engine scraped or no report acknowledged by the core within it.
	StaleAfterS float64 `yaml:"stale_after_s"`
	// QueueSize bounds the reports waiting for the core; past it the
	// oldest are dropped (the next snapshot supersedes them).
	QueueSize int `yaml:"queue_size"`
	// Liveness is "auto" (eBPF, else /proc), "ebpf", "proc" or "none".
	Liveness string `yaml:"liveness"`
	// Engines are the engines on this node given by hand (with
	// kubernetes.enabled, discovered ones are added).
	Engines []EngineConfig `yaml:"engines"`
	// Kubernetes configures engine discovery on this node through the API
	// server (agent/kubediscover.Config, decoded strictly by
	// narwhal-agent); discovered engines are added to Engines.
	Kubernetes yaml.Node `yaml:"kubernetes"`
}

// EngineConfig is one engine on this node.
type EngineConfig struct {
	// ID names the engine as routers name it in their events.
	ID string `yaml:"id"`
	// Node, when set, limits the engine to the agent of that node (so one
	// ConfigMap can serve a whole DaemonSet).
	Node string `yaml:"node"`
	// Kind is the engine's metrics dialect: vllm or sglang.
	Kind engine.Kind `yaml:"kind"`
	// MetricsURL is the engine's Prometheus endpoint, e.g.
	// http://127.0.0.1:8000/metrics.
	MetricsURL string `yaml:"metrics_url"`
	// PID and Port are watched for liveness (0 = not watched).
	PID  int32  `yaml:"pid"`
	Port uint16 `yaml:"port"`
	// NetNS is the file of the engine's network namespace (e.g.
	// /var/run/netns/cni-..., or /proc/<pid>/ns/net), where Port is
	// watched: pods on one node listen on the same port in their own
	// namespaces. Empty: the namespace of PID when it is set and readable
	// (reading another process's namespace needs ptrace read access to
	// it), else the port in every namespace.
	NetNS string `yaml:"netns"`
	// GPUs are the engine's GPU UUIDs or NVML indices ("0").
	GPUs []string `yaml:"gpus"`
	// Model is the served model's name (e.g. meta-llama/Llama-2-70b-hf);
	// with GPUKind and TP it picks the core's latency profile.
	Model string `yaml:"model"`
	// GPUKind keys the core's profile and prior (e.g. H100). Empty: the
	// built-in GPU table's name (core/profile) of the NVML name of the
	// engine's first GPU NVML knows ("NVIDIA H100 80GB HBM3" is
	// H100-SXM-80GB), else that NVML name.
	GPUKind string `yaml:"gpu_kind"`
	// Role is the engine's initial role: prefill or decode.
	Role string `yaml:"role"`
	// TP is the engine's tensor-parallel degree (vLLM
	// --tensor-parallel-size, SGLang --tp-size), reported to the core to
	// pick the latency profile or prior of (model, GPU, TP); 0 unknown
	// (priced as TP 1), unless geometry.tp is set.
	TP int `yaml:"tp"`
	// Geometry is the model's KV cache geometry: with it the agent
	// derives the engine's KV capacity from GPU memory when the engine
	// does not report one, and cross-checks it when it does.
	Geometry engine.Geometry `yaml:"geometry"`
}

// MaxTP bounds an engine's tensor-parallel degree (the wire's limit).
const MaxTP = 1024

// TPDegree is the engine's tensor-parallel degree: tp, else geometry.tp;
// 0 unknown.
func (e EngineConfig) TPDegree() int {
	if e.TP > 0 {
		return e.TP
	}
	return int(e.Geometry.TP)
}

// LoadConfig reads and validates a YAML file; unknown keys, an empty
// file and a second document are errors.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("agent: config: %w", err)
	}
	defer f.Close()
	var c Config
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("%w: %s: empty file, no configuration", ErrConfig, path)
		}
		return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: %s: more than one YAML document", ErrConfig, path)
	}
	c.Defaults()
	return c, c.Validate()
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ScrapeIntervalS, 1)
	def(&c.ScrapeTimeoutS, 0.5)
	def(&c.HeartbeatIntervalS, 2)
	def(&c.NVMLTimeoutS, 5)
	def(&c.ProcPollS, 0.1)
	def(&c.BackoffMinS, 0.2)
	def(&c.BackoffMaxS, 10)
	def(&c.StaleAfterS, 10)
	if c.QueueSize == 0 {
		c.QueueSize = 256
	}
	if c.Liveness == "" {
		c.Liveness = "auto"
	}
	if c.Node == "" {
		c.Node = os.Getenv("NODE_NAME")
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
}

// Validate returns an error naming the field, the value and the rule.
func (c *Config) Validate() error {
	bad := func(field string, v any, rule string) error {
		return fmt.Errorf("%w: %s = %v: %s", ErrConfig, field, v, rule)
	}
	if c.Node == "" {
		return bad("node", `""`, "must be set (or $NODE_NAME)")
	}
	if c.CoreURL != "" {
		u, err := url.Parse(c.CoreURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("core_url", c.CoreURL, "must be an http(s) URL")
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"scrape_interval_s", c.ScrapeIntervalS}, {"scrape_timeout_s", c.ScrapeTimeoutS},
		{"heartbeat_interval_s", c.HeartbeatIntervalS}, {"nvml_timeout_s", c.NVMLTimeoutS},
		{"proc_poll_s", c.ProcPollS}, {"backoff_min_s", c.BackoffMinS}, {"backoff_max_s", c.BackoffMaxS},
		{"stale_after_s", c.StaleAfterS}} {
		if !(f.v > 0 && f.v <= 3600) {
			return bad(f.name, f.v, "must be in (0, 3600]")
		}
	}
	if c.BackoffMaxS < c.BackoffMinS {
		return bad("backoff_max_s", c.BackoffMaxS, "must be >= backoff_min_s")
	}
	if c.QueueSize < 1 || c.QueueSize > 1<<16 {
		return bad("queue_size", c.QueueSize, "must be in [1, 65536]")
	}
	switch c.Liveness {
	case "auto", "ebpf", "proc", "none":
	default:
		return bad("liveness", c.Liveness, "must be auto, ebpf, proc or none")
	}
	seen := map[string]bool{}
	for i, e := range c.Engines {
		p := fmt.Sprintf("engines[%d].", i)
		if e.ID == "" || seen[e.ID] {
			return bad(p+"id", e.ID, "must be set and unique")
		}
		seen[e.ID] = true
		if e.Kind != engine.VLLM && e.Kind != engine.SGLang {
			return bad(p+"kind", e.Kind, "must be vllm or sglang")
		}
		u, err := url.Parse(e.MetricsURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad(p+"metrics_url", e.MetricsURL, "must be an http(s) URL")
		}
		if e.PID < 0 {
			return bad(p+"pid", e.PID, "must be >= 0")
		}
		if e.NetNS != "" && !filepath.IsAbs(e.NetNS) {
			return bad(p+"netns", e.NetNS, "must be an absolute path")
		}
		// Two engines that may share a node and a port must each name
		// their namespace (a PID or netns): a watch of the port in every
		// namespace would report one engine's listener as the other's.
		for j, o := range c.Engines[:i] {
			if o.Port == 0 || o.Port != e.Port || (o.Node != "" && e.Node != "" && o.Node != e.Node) {
				continue
			}
			if (e.PID == 0 && e.NetNS == "") || (o.PID == 0 && o.NetNS == "") {
				return bad(p+"port", e.Port, fmt.Sprintf("shared with engines[%d] on one node: set pid or netns on both", j))
			}
		}
		if _, ok := controller.ParseRole(e.Role); !ok && e.Role != "" {
			return bad(p+"role", e.Role, "must be prefill or decode")
		}
		if e.TP < 0 || e.TP > MaxTP {
			return bad(p+"tp", e.TP, fmt.Sprintf("must be in [0, %d]", MaxTP))
		}
		if e.TP > 0 && e.Geometry.TP > 0 && int64(e.TP) != e.Geometry.TP {
			return bad(p+"tp", e.TP, fmt.Sprintf("differs from geometry.tp %d", e.Geometry.TP))
		}
		if !e.Geometry.Zero() {
			if _, err := e.Geometry.BytesPerToken(); err != nil {
				return bad(p+"geometry", strings.TrimPrefix(err.Error(), engine.ErrGeometry.Error()+": "), "out of range")
			}
		}
	}
	if len(c.Engines) > 256 {
		return bad("engines", len(c.Engines), "at most 256")
	}
	return nil
}
