// Package kube is the Kubernetes side of a narwhal-core replica: the
// cluster (k8s/cluster: discovery, election, ConfigMap state, pod
// actuation) and the demand merge (k8s/demandmerge) around a service.Server.
//
// It is a package of its own so that package service, which loads and
// validates the kubernetes section (service.KubernetesConfig over
// k8s/clusterconfig), links no Kubernetes client: a router embedding the
// service without a cluster, and the fuzz targets over its inputs, build
// without client-go. cmd/narwhal-core calls NewServer when
// kubernetes.enabled is set.
//
// Concurrency: New, CoreOptions and Bind once, before the server serves;
// Cluster, Store, Core and DemandURL from any goroutine after Bind.
//
// Allocation contract: not on a request path (the deltas handler is
// k8s/demandmerge's).
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/demandmerge"
	"github.com/narwhal-io/narwhal/service"
)

// Replica is one replica's Kubernetes side: the cluster (discovery,
// election, ConfigMap state, pod actuation) and the demand merge (the
// store the leader's controller reads, the exporter that ships this
// replica's own demand to the leader).
//
// Use: New, build the core with CoreOptions, then Bind it and pass the
// returned options to service.New. NewServer does all three.
type Replica struct {
	cfg     service.Config
	log     *slog.Logger
	cluster *cluster.Cluster
	store   *demandmerge.Store
	url     string
	epoch   uint64
	httpc   *http.Client
	core    *core.Core // bound by Bind
}

// New builds the Kubernetes side of a replica from cfg (validated,
// cfg.Kubernetes.Enabled) and a client (in-cluster, or a fake in tests).
// Empty kubernetes.namespace and pod_name come from POD_NAMESPACE and
// POD_NAME.
func New(cfg service.Config, client kubernetes.Interface, logger *slog.Logger) (*Replica, error) {
	if !cfg.Kubernetes.Enabled {
		return nil, fmt.Errorf("%w: kubernetes.enabled must be true for kube.New, got false", service.ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Kubernetes.Config = cfg.Kubernetes.Config.FromEnv(os.Getenv)
	if err := cfg.Kubernetes.Validate(); err != nil {
		return nil, err
	}
	k := &Replica{cfg: cfg, log: logger.With("component", "kube"), url: cfg.DemandURL(),
		epoch: uint64(time.Now().UnixNano()), httpc: &http.Client{Timeout: 10 * time.Second}}
	var err error
	if k.cluster, err = cluster.New(client, cfg.Kubernetes.Config, logger); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
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
		return nil, fmt.Errorf("kube: demand merge: %w", err)
	}
	return k, nil
}

func secNs(s float64) int64 { return int64(math.Round(s * 1e9)) }

// CoreOptions builds the core for the cluster: moves go through the pod
// actuator and the controller steps on the merged demand of every router.
func (k *Replica) CoreOptions() []core.Option {
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
func (k *Replica) Bind(c *core.Core) ([]service.Option, error) {
	if c == nil {
		return nil, errors.New("kube: Replica.Bind: nil core")
	}
	if got, want := c.Demand().Arrivals.WidthNs(), k.store.History(buckets.KindArrivals).WidthNs(); got != want {
		return nil, fmt.Errorf("kube: core bucket width %d ns differs from the merge's %d ns", got, want)
	}
	cc := c.Config()
	if err := k.cluster.Bind(c, c.Controller(), time.Duration(secNs(cc.StepS))); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	x, err := demandmerge.NewExporter(k.cfg.Kubernetes.PodName, k.epoch, c.Demand(), c.Attainment(),
		secNs(cc.MonitorIntervalS), 4*secNs(cc.DemandWindowS))
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	every := time.Duration(secNs(k.cfg.Kubernetes.ShipEveryS))
	token := k.cfg.RouterToken()
	shipLog := k.log.With("to", k.url)
	handler := demandmerge.Handler(k.store, k.cfg.HTTP.MaxBodyBytes, k.cluster.IsLeader, k.log)
	cs := append(k.cluster.Collectors(), k.mergeCollectors()...)
	k.core = c
	return []service.Option{
		service.WithoutControlLoop(),
		service.WithRoutes(service.Route{Pattern: service.DemandDeltasPath, Name: "demand_deltas", Handler: handler, Write: true}),
		service.WithCollectors(cs...),
		service.WithLoop("cluster", k.cluster.Run),
		service.WithLoop("demand shipping", func(ctx context.Context) error {
			demandmerge.Ship(ctx, x, k.httpc, k.url, token, every, shipLog)
			return nil
		}),
	}, nil
}

// Cluster is the replica's cluster side (IsLeader, Steps).
func (k *Replica) Cluster() *cluster.Cluster { return k.cluster }

// Store is the merged demand the leader's controller reads.
func (k *Replica) Store() *demandmerge.Store { return k.store }

// Core is the core Bind attached (nil before).
func (k *Replica) Core() *core.Core { return k.core }

// DemandURL is where this replica ships its demand.
func (k *Replica) DemandURL() string { return k.url }

func (k *Replica) mergeCollectors() []prometheus.Collector {
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

// NewServer builds a Kubernetes replica: the Replica, the core (as
// service.NewCore, with CoreOptions) and the service.Server around both.
// Serve runs everything and closes the core at the end.
func NewServer(cfg service.Config, client kubernetes.Interface, logger *slog.Logger, opts ...service.Option) (*service.Server, *Replica, error) {
	k, err := New(cfg, client, logger)
	if err != nil {
		return nil, nil, err
	}
	c, err := service.NewCore(cfg, logger, k.CoreOptions()...)
	if err != nil {
		return nil, nil, err
	}
	kopts, err := k.Bind(c.Core)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	s, err := service.New(cfg, c, logger, append(kopts, opts...)...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return s, k, nil
}
