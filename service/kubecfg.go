package service

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"

	"github.com/narwhal-io/narwhal/k8s/clusterconfig"
)

// DemandDeltasPath is where the leader accepts the routers' demand deltas.
const DemandDeltasPath = "/v1/demand/deltas"

// LeaderService is the Service that selects the leader's pod
// (narwhal.io/leader=true; deploy/k8s-core-deployment.yaml): the default
// host of kubernetes.demand_url.
const LeaderService = "narwhal-core-leader"

// KubernetesConfig is the `kubernetes` section: with Enabled, the replica
// is one of N behind a Lease (package service/kube). The cluster keys (namespace,
// lease_name, engine_selector, ...) sit inline in the section.
type KubernetesConfig struct {
	// Enabled runs the replica in a cluster: leader election on the
	// Lease, engines discovered from their pods, moves carried out on the
	// pods, the controller state in a ConfigMap. Off (the default), the
	// replica steps alone, engines come from agent reports and the
	// engines list, and moves are journalled only (a dry run).
	Enabled              bool `yaml:"enabled" json:"enabled"`
	clusterconfig.Config `yaml:",inline"`
	// DemandURL is where every replica ships its demand deltas: the
	// leader's Service. Empty derives
	// http(s)://narwhal-core-leader.<namespace>.svc:<listen port>/v1/demand/deltas.
	DemandURL string `yaml:"demand_url" json:"demand_url"`
	// ShipEveryS is the shipping period.
	ShipEveryS float64 `yaml:"ship_every_s" json:"ship_every_s"`
}

func defaultKubernetesConfig() KubernetesConfig {
	return KubernetesConfig{Config: clusterconfig.DefaultConfig(), ShipEveryS: 2}
}

// Validate is validate's errors joined (nil when the section is disabled
// or valid), each wrapped in ErrConfig.
func (k *KubernetesConfig) Validate() error {
	errs := k.validate()
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
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
		for _, p := range []string{clusterconfig.ErrInvalidConfig.Error() + ": "} {
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

// DemandURL is where a replica ships its demand deltas: the configured
// kubernetes.demand_url, or the leader Service's in the replica's
// namespace on the API port.
func (c *Config) DemandURL() string {
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
