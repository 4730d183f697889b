package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/demandmerge"
)

// DemandDeltasPath is where the leader accepts the routers' demand deltas.
const DemandDeltasPath = "/v1/demand/deltas"

// LeaderService is the Service that selects the leader's pod
// (narwhal.io/leader=true; deploy/k8s-core-deployment.yaml): the default
// host of kubernetes.demand_url.
const LeaderService = "narwhal-core-leader"

// KubernetesConfig is the `kubernetes` section: with Enabled, the replica
// is one of N behind a Lease (see NewKube). The cluster keys (namespace,
// lease_name, engine_selector, ...) sit inline in the section.
type KubernetesConfig struct {
	// Enabled runs the replica in a cluster: leader election on the
	// Lease, engines discovered from their pods, moves carried out on the
	// pods, the controller state in a ConfigMap. Off (the default), the
	// replica steps alone, engines come from agent reports and the
	// engines list, and moves are journalled only (a dry run).
	Enabled        bool `yaml:"enabled" json:"enabled"`
	cluster.Config `yaml:",inline"`
	// DemandURL is where every replica ships its demand deltas: the
	// leader's Service. Empty derives
	// http(s)://narwhal-core-leader.<namespace>.svc:<listen port>/v1/demand/deltas.
	DemandURL string `yaml:"demand_url" json:"demand_url"`
	// ShipEveryS is the shipping period.
	ShipEveryS float64 `yaml:"ship_every_s" json:"ship_every_s"`
}

func defaultKubernetesConfig() KubernetesConfig {
	return KubernetesConfig{Config: cluster.DefaultConfig(), ShipEveryS: 2}
}

// validate returns nothing when the section is disabled; otherwise one
// error per broken rule, naming the field by its path.
func (k *KubernetesConfig) validate() []error {
	if !k.Enabled {
		return nil
	}
	var errs []error
	if err := k.Config.Validate(); err != nil {
		msg := err.Error()
		for _, p := range []string{cluster.ErrInvalidConfig.Error() + ": "} {
			msg = strings.TrimPrefix(msg, p)
		}
		errs = append(errs, errors.New(msg))
	}
	if v := k.ShipEveryS; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 3600 {
		errs = append(errs, fmt.Errorf("kubernetes.ship_every_s must be in (0, 3600], got %v", v))
	}
	if k.DemandURL != "" {
		u, err := url.Parse(k.DemandURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("kubernetes.demand_url must be an absolute http(s) URL, got %q", k.DemandURL))
		}
	}
	return errs
}

// demandURL is the configured URL, or the leader Service's in the
// replica's namespace on the API port.
func (c *Config) demandURL() string {
	if c.Kubernetes.DemandURL != "" {
		return c.Kubernetes.DemandURL
	}
	scheme, port := "http", "8080"
	if c.TLS.CertFile != "" {
		scheme = "https"
	}
	if _, p, err := net.SplitHostPort(c.Listen); err == nil && p != "" && p != "0" {
		port = p
	}
	return fmt.Sprintf("%s://%s.%s.svc:%s%s", scheme, LeaderService, c.Kubernetes.Namespace, port, DemandDeltasPath)
}

// Kube is one replica's Kubernetes side: the cluster (discovery,
// election, ConfigMap state, pod actuation) and the demand merge (the
// store the leader's controller reads, the exporter that ships this
// replica's own demand to the leader).
//
// Use: NewKube, build the core with CoreOptions, then Bind it and pass
// the returned options to New. NewKubeServer does all three.
type Kube struct {
	cfg     Config
	log     *slog.Logger
	cluster *cluster.Cluster
	store   *demandmerge.Store
	url     string
	epoch   uint64
	httpc   *http.Client
}

// NewKube builds the Kubernetes side of a replica from cfg (validated,
// cfg.Kubernetes.Enabled) and a client (in-cluster, or a fake in tests).
// Empty kubernetes.namespace and pod_name come from POD_NAMESPACE and
// POD_NAME.
func NewKube(cfg Config, client kubernetes.Interface, logger *slog.Logger) (*Kube, error) {
	if !cfg.Kubernetes.Enabled {
		return nil, fmt.Errorf("%w: kubernetes.enabled must be true for NewKube, got false", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Kubernetes.Config = cfg.Kubernetes.Config.FromEnv(os.Getenv)
	if errs := cfg.Kubernetes.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	k := &Kube{cfg: cfg, log: logger.With("component", "kube"), url: cfg.demandURL(),
		epoch: uint64(time.Now().UnixNano()), httpc: &http.Client{Timeout: 10 * time.Second}}
	var err error
	if k.cluster, err = cluster.New(client, cfg.Kubernetes.Config, logger); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	c := cfg.Core
	width := buckets.BucketWidth(secNs(c.StepS), secNs(c.MinEvidenceSpanS))
	if k.store, err = demandmerge.New(demandmerge.Config{
		Demand:               buckets.DemandConfig{BucketWidthNs: width, DemandWindowNs: secNs(c.DemandWindowS)},
		AttainmentIntervalNs: secNs(c.MonitorIntervalS), AttainmentRetentionNs: 4 * secNs(c.DemandWindowS),
		// The bound routers' events get (events.max_future_s), on the
		// leader's clock.
		NowNs: func() int64 { return time.Now().UnixNano() }, FutureToleranceNs: int64(cfg.Events.MaxFutureS * 1e9),
	}); err != nil {
		return nil, fmt.Errorf("service: demand merge: %w", err)
	}
	return k, nil
}

func secNs(s float64) int64 { return int64(math.Round(s * 1e9)) }

// CoreOptions builds the core for the cluster: moves go through the pod
// actuator and the controller steps on the merged demand of every router.
func (k *Kube) CoreOptions() []core.Option {
	return []core.Option{
		core.WithActuator(k.cluster.Actuator()),
		core.WithDemandReaders(k.store.History(buckets.KindArrivals), k.store.History(buckets.KindOutputs)),
	}
}

// Bind attaches the core built with CoreOptions and returns the server
// options: no local control loop (the cluster steps the controller while
// leading), the demand deltas endpoint (bearer token of every write; a
// follower answers 409), the cluster's and the merge's metrics, and the
// background loops (cluster.Run, and shipping this replica's own demand
// to the leader every ship_every_s).
func (k *Kube) Bind(c *core.Core) ([]Option, error) {
	if c == nil {
		return nil, errors.New("service: Kube.Bind: nil core")
	}
	if got, want := c.Demand().Arrivals.WidthNs(), k.store.History(buckets.KindArrivals).WidthNs(); got != want {
		return nil, fmt.Errorf("service: core bucket width %d ns differs from the merge's %d ns", got, want)
	}
	cc := c.Config()
	if err := k.cluster.Bind(c, c.Controller(), time.Duration(secNs(cc.StepS))); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	x, err := demandmerge.NewExporter(k.cfg.Kubernetes.PodName, k.epoch, c.Demand(), c.Attainment(),
		secNs(cc.MonitorIntervalS), 4*secNs(cc.DemandWindowS))
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	every := time.Duration(secNs(k.cfg.Kubernetes.ShipEveryS))
	// The routers' token file, read again as the server reads it (the
	// server logs and counts a bad reload; this copy only follows).
	token := followedToken(newTokenSource("token", k.cfg.Auth.Token, k.cfg.Auth.TokenFile, slog.New(slog.DiscardHandler), nil),
		secNs(k.cfg.Auth.TokenReloadS), func() int64 { return time.Now().UnixNano() })
	shipLog := k.log.With("to", k.url)
	handler := demandmerge.Handler(k.store, k.cfg.HTTP.MaxBodyBytes, k.cluster.IsLeader, k.log)
	cs := append(k.cluster.Collectors(), k.mergeCollectors()...)
	return []Option{
		WithoutControlLoop(),
		WithRoutes(Route{Pattern: DemandDeltasPath, Name: "demand_deltas", Handler: handler, Write: true}),
		WithCollectors(cs...),
		WithLoop("cluster", k.cluster.Run),
		WithLoop("demand shipping", func(ctx context.Context) error {
			demandmerge.Ship(ctx, x, k.httpc, k.url, token, every, shipLog)
			return nil
		}),
	}, nil
}

// Cluster is the replica's cluster side (IsLeader, Steps).
func (k *Kube) Cluster() *cluster.Cluster { return k.cluster }

// Store is the merged demand the leader's controller reads.
func (k *Kube) Store() *demandmerge.Store { return k.store }

// DemandURL is where this replica ships its demand.
func (k *Kube) DemandURL() string { return k.url }

func (k *Kube) mergeCollectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, f := range []struct {
		result string
		get    func(demandmerge.ApplyStats) int64
	}{
		{"applied", func(s demandmerge.ApplyStats) int64 { return s.Applied }},
		{"duplicate", func(s demandmerge.ApplyStats) int64 { return s.Duplicate }},
		{"stale", func(s demandmerge.ApplyStats) int64 { return s.Stale }},
		{"far", func(s demandmerge.ApplyStats) int64 { return s.Far }},
		{"ahead", func(s demandmerge.ApplyStats) int64 { return s.Ahead }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "narwhal_demand_merge_buckets_total",
			Help:        "Bucket snapshots in demand deltas received by this replica's merge store, by result.",
			ConstLabels: prometheus.Labels{"result": f.result},
		}, func() float64 { return float64(f.get(k.store.Stats())) }))
	}
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "narwhal_demand_merge_deltas_total",
		Help: "Demand deltas applied to this replica's merge store.",
	}, func() float64 { return float64(k.store.Stats().Deltas) }))
	return cs
}

// NewKubeServer builds a Kubernetes replica: the Kube side, the core (as
// NewCore, with CoreOptions) and the Server around both. Serve runs
// everything and closes the core at the end.
func NewKubeServer(cfg Config, client kubernetes.Interface, logger *slog.Logger, opts ...Option) (*Server, *Kube, error) {
	k, err := NewKube(cfg, client, logger)
	if err != nil {
		return nil, nil, err
	}
	c, err := NewCore(cfg, logger, k.CoreOptions()...)
	if err != nil {
		return nil, nil, err
	}
	kopts, err := k.Bind(c.Core)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	s, err := New(cfg, c, logger, append(kopts, opts...)...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return s, k, nil
}
