package cluster

import (
	"math"
	"time"

	"github.com/narwhal-io/narwhal/k8s/actuate"
	"github.com/narwhal-io/narwhal/k8s/clusterconfig"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/leader"
)

// ErrInvalidConfig is returned (wrapped) by Config.Validate and New.
var ErrInvalidConfig = clusterconfig.ErrInvalidConfig

// Config is the `kubernetes` section of the narwhal-core configuration
// (k8s/clusterconfig: the service loads it without a Kubernetes client).
type Config = clusterconfig.Config

// PoolConfig is one entry of kubernetes.pools.
type PoolConfig = clusterconfig.PoolConfig

// LabelLeader is the label the leader puts on its own pod.
const LabelLeader = "narwhal.io/leader"

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config { return clusterconfig.DefaultConfig() }

func dur(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

func leaderConfig(c Config) leader.Config {
	return leader.Config{Namespace: c.Namespace, LeaseName: c.LeaseName, Identity: c.PodName,
		LeaseDuration: dur(c.LeaseDurationS), RenewDeadline: dur(c.RenewDeadlineS), RetryPeriod: dur(c.RetryPeriodS)}
}

func actuateConfig(c Config) actuate.Config {
	a := actuate.Config{DrainTimeout: dur(c.DrainTimeoutS), DrainPoll: dur(c.DrainPollS),
		SwitchTimeout: dur(c.SwitchTimeoutS), SwitchOnDrainTimeout: c.SwitchOnDrainTimeout, Roles: c.Roles}
	for _, p := range c.Pools {
		a.Pools = append(a.Pools, actuate.Pool{Name: p.Name, Selector: p.Selector, Method: actuate.Method(p.Method),
			Prefill: p.PrefillWorkload, Decode: p.DecodeWorkload, ReadyTimeout: dur(p.ReadyTimeoutS)})
	}
	return a
}

func discoverConfig(c Config) discover.Config {
	sel := c.EngineSelector
	if sel == "" {
		if r, err := c.Roles.Resolve(); err == nil {
			sel = r.Selector()
		}
	}
	return discover.Config{Namespace: c.EngineNamespace, Selector: sel, Roles: c.Roles}
}
