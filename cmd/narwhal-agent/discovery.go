package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/kubediscover"
	"github.com/narwhal-io/narwhal/agent/podresources"
	"github.com/narwhal-io/narwhal/nvml"
)

// startDiscovery runs engine discovery through the API server when the
// configuration's kubernetes section enables it (in-cluster credentials:
// the DaemonSet's service account). It returns an exit code, 0 to go on.
func startDiscovery(ctx context.Context, cfg agent.Config, a *agent.Agent, gpus *nvml.Manager, reg *prometheus.Registry, log *slog.Logger) int {
	kc, err := kubediscover.LoadConfig(&cfg.Kubernetes)
	if err != nil {
		log.Error("configuration refused", "err", err)
		return 2
	}
	if !kc.Enabled {
		return 0
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		log.Error("kubernetes.enabled but no in-cluster credentials", "err", err)
		return 2
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Error("kubernetes client", "err", err)
		return 2
	}
	static := cfg.Engines
	sink := func(found []agent.EngineConfig) {
		if err := a.SetEngines(append(append([]agent.EngineConfig(nil), static...), found...)); err != nil {
			log.Error("discovered engines refused", "err", err)
		}
	}
	opts := []kubediscover.Option{kubediscover.WithNVML(gpus), kubediscover.WithLogger(log)}
	if kc.PodResourcesSocket != "none" {
		pr, err := podresources.New(kc.PodResourcesSocket)
		if err != nil {
			log.Error("podresources", "err", err)
			return 2
		}
		context.AfterFunc(ctx, func() { _ = pr.Close() })
		opts = append(opts, kubediscover.WithGPUs(pr))
	}
	d, err := kubediscover.New(client, kc, cfg.Node, sink, opts...)
	if err != nil {
		log.Error("configuration refused", "err", err)
		return 2
	}
	reg.MustRegister(d.Collectors()...)
	go func() {
		if err := d.Run(ctx); err != nil {
			log.Error("engine discovery stopped", "err", err)
		}
	}()
	log.Info("engine discovery on", "node", cfg.Node, "selector", d.Selector())
	return 0
}
