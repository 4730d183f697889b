package clusterconfig

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is returned (wrapped) by Validate (and by cluster.New).
var ErrInvalidConfig = errors.New("cluster: invalid config")

// Config is the `kubernetes` section of the narwhal-core configuration.
type Config struct {
	// Namespace and PodName identify this replica; empty means the
	// POD_NAMESPACE and POD_NAME environment variables (downward API).
	Namespace string `yaml:"namespace" json:"namespace"`
	PodName   string `yaml:"pod_name" json:"pod_name"`

	// LeaseName is the coordination.k8s.io/v1 Lease (in Namespace) the
	// replicas elect their leader with; only the leader steps the
	// controller and moves engines.
	LeaseName string `yaml:"lease_name" json:"lease_name"`
	// LeaseDurationS: a follower takes the Lease over when its holder has
	// not renewed it for this long (the longest a crashed leader leaves
	// the fleet without decisions). Must exceed RenewDeadlineS.
	LeaseDurationS float64 `yaml:"lease_duration_s" json:"lease_duration_s"`
	// RenewDeadlineS: the leader keeps retrying a failed renewal this long,
	// then gives its term up and stops deciding. Must exceed 1.2 ×
	// RetryPeriodS.
	RenewDeadlineS float64 `yaml:"renew_deadline_s" json:"renew_deadline_s"`
	// RetryPeriodS is the time between attempts to acquire or renew the
	// Lease (and to read the saved state at the start of a term).
	RetryPeriodS float64 `yaml:"retry_period_s" json:"retry_period_s"`

	// StateConfigMap (in Namespace) holds the controller state under
	// StateKey.
	StateConfigMap string `yaml:"state_configmap" json:"state_configmap"`
	StateKey       string `yaml:"state_key" json:"state_key"`

	// EngineNamespace ("" = every namespace) and EngineSelector select
	// the engine pods; an empty EngineSelector is the role label in
	// (prefill, decode).
	EngineNamespace string `yaml:"engine_namespace" json:"engine_namespace"`
	EngineSelector  string `yaml:"engine_selector" json:"engine_selector"`

	// Roles is the pod label routers read the role from: preset narwhal
	// (narwhal.io/role) or llm-d (llm-d.ai/role), key and values
	// overridable.
	Roles Roles `yaml:"roles" json:"roles"`
	// Pools choose how engines move (relabel, scale, switch_url); a pod
	// no pool matches is relabelled.
	Pools []PoolConfig `yaml:"pools" json:"pools"`

	// DrainTimeoutS bounds how long a moving engine may keep resident
	// work (routers no longer send it new requests) before the move fails.
	DrainTimeoutS float64 `yaml:"drain_timeout_s" json:"drain_timeout_s"`
	// DrainPollS is how often the drain is checked.
	DrainPollS float64 `yaml:"drain_poll_s" json:"drain_poll_s"`
	// SwitchTimeoutS bounds one call of an engine's role-switch URL.
	SwitchTimeoutS float64 `yaml:"switch_timeout_s" json:"switch_timeout_s"`
	// SwitchOnDrainTimeout switches the role anyway when the drain times
	// out (what happens to the requests still resident is the engine's
	// affair); off, the move fails and the engine keeps its role.
	SwitchOnDrainTimeout bool `yaml:"switch_on_drain_timeout" json:"switch_on_drain_timeout"`

	// LabelLeader labels the leader's own pod narwhal.io/leader=true.
	LabelLeader bool `yaml:"label_leader" json:"label_leader"`
}

// PoolConfig is one entry of kubernetes.pools (k8s/actuate.Pool).
type PoolConfig struct {
	// Name names the pool in logs and errors.
	Name string `yaml:"name" json:"name"`
	// Selector is a label selector over the engine pods ("" matches all);
	// the first pool whose selector matches a pod moves it.
	Selector string `yaml:"selector" json:"selector"`
	// Method is how the pool's engines move: relabel (one process serves
	// either role; the label is the switch), scale (one workload per
	// role: scale the source down and the target up) or switch_url (POST
	// the role to the pod's narwhal.io/role-switch-url annotation).
	Method string `yaml:"method" json:"method"`
	// PrefillWorkload is the prefill role's workload for method scale, as
	// Deployment/<name> or StatefulSet/<name> in the pod's namespace.
	PrefillWorkload string `yaml:"prefill_workload" json:"prefill_workload"`
	// DecodeWorkload is the decode role's workload for method scale.
	DecodeWorkload string `yaml:"decode_workload" json:"decode_workload"`
	// ReadyTimeoutS bounds the wait for the target workload's new pod to
	// be Ready (method scale: the engine's start, weights included); 0
	// takes the default, 900.
	ReadyTimeoutS float64 `yaml:"ready_timeout_s" json:"ready_timeout_s"`
}

// The defaults of DefaultConfig: k8s/leader's and k8s/actuate's
// DefaultConfig (k8s/cluster's tests hold them equal).
const (
	DefaultLeaseName      = "narwhal-core-leader"
	DefaultLeaseDurationS = 15.0
	DefaultRenewDeadlineS = 10.0
	DefaultRetryPeriodS   = 2.0
	DefaultDrainTimeoutS  = 300.0
	DefaultDrainPollS     = 1.0
	DefaultSwitchTimeoutS = 10.0
)

// LeaseJitterFactor is client-go's leader election jitter
// (leaderelection.JitterFactor): the renew deadline must exceed it times
// the retry period (k8s/cluster's tests hold it equal).
const LeaseJitterFactor = 1.2

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		LeaseName:      DefaultLeaseName,
		LeaseDurationS: DefaultLeaseDurationS,
		RenewDeadlineS: DefaultRenewDeadlineS,
		RetryPeriodS:   DefaultRetryPeriodS,
		StateConfigMap: "narwhal-core-state",
		StateKey:       "controller-state.json",
		DrainTimeoutS:  DefaultDrainTimeoutS,
		DrainPollS:     DefaultDrainPollS,
		SwitchTimeoutS: DefaultSwitchTimeoutS,
		LabelLeader:    true,
	}
}

// FromEnv fills Namespace and PodName from getenv (POD_NAMESPACE,
// POD_NAME) where they are empty.
func (c Config) FromEnv(getenv func(string) string) Config {
	if c.Namespace == "" {
		c.Namespace = getenv("POD_NAMESPACE")
	}
	if c.PodName == "" {
		c.PodName = getenv("POD_NAME")
	}
	return c
}

// Validate names the first field that breaks a rule (prefixed
// "kubernetes."). The lease timings follow client-go's leader election
// (k8s/leader checks the same when it starts).
func (c Config) Validate() error {
	bad := func(field string, v any, rule string) error {
		return fmt.Errorf("%w: kubernetes.%s must be %s, got %v", ErrInvalidConfig, field, rule, v)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"lease_duration_s", c.LeaseDurationS}, {"renew_deadline_s", c.RenewDeadlineS}, {"retry_period_s", c.RetryPeriodS},
		{"drain_timeout_s", c.DrainTimeoutS}, {"drain_poll_s", c.DrainPollS}, {"switch_timeout_s", c.SwitchTimeoutS}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v <= 0 || f.v > 86400 {
			return bad(f.name, f.v, "in (0, 86400]")
		}
	}
	switch {
	case c.Namespace == "":
		return bad("namespace", `""`, "set (or POD_NAMESPACE)")
	case c.PodName == "":
		return bad("pod_name", `""`, "set (or POD_NAME)")
	case c.LeaseName == "":
		return bad("lease_name", `""`, "set")
	case c.StateConfigMap == "":
		return bad("state_configmap", `""`, "set")
	case c.StateKey == "":
		return bad("state_key", `""`, "set")
	case c.RenewDeadlineS <= LeaseJitterFactor*c.RetryPeriodS:
		return bad("renew_deadline_s", c.RenewDeadlineS, fmt.Sprintf("> %.1f × retry_period_s (%v)", LeaseJitterFactor, c.RetryPeriodS))
	case c.LeaseDurationS <= c.RenewDeadlineS:
		return bad("lease_duration_s", c.LeaseDurationS, fmt.Sprintf("> renew_deadline_s (%v)", c.RenewDeadlineS))
	}
	if _, err := c.Roles.Resolve(); err != nil {
		return fmt.Errorf("%w: kubernetes.roles: %w", ErrInvalidConfig, err)
	}
	for i, p := range c.Pools {
		if math.IsNaN(p.ReadyTimeoutS) || p.ReadyTimeoutS < 0 || p.ReadyTimeoutS > 86400 {
			return bad(fmt.Sprintf("pools[%d].ready_timeout_s", i), p.ReadyTimeoutS, "in [0, 86400]")
		}
	}
	return nil
}
