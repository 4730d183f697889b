package actuate

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Method is how a pool's engines change role.
type Method string

// The three ways to move an engine.
const (
	// MethodRelabel drains the pod and flips its role label. For engines
	// that serve either role in one process (vLLM with a KV connector in
	// kv_both mode): the router following the label is the whole switch.
	// A role-switch URL annotation, when present, is still called first.
	MethodRelabel Method = "relabel"
	// MethodScale drains the pod, gives it the lowest
	// controller.kubernetes.io/pod-deletion-cost, scales the source
	// role's workload down by one and the target role's up by one, and
	// waits for the target to be Ready again. For engines whose role is a
	// startup flag (SGLang --disaggregation-mode, vLLM kv_producer /
	// kv_consumer), deployed as one Deployment per role.
	MethodScale Method = "scale"
	// MethodSwitchURL drains the pod, POSTs the new role to the URL in the
	// narwhal.io/role-switch-url annotation (required) and flips the label.
	MethodSwitchURL Method = "switch_url"
)

// Pool chooses the move method for the engine pods its selector matches.
// The first pool whose selector matches a pod wins; a pod no pool matches
// is moved by relabel.
type Pool struct {
	Name string `json:"name" yaml:"name"`
	// Selector is a label selector over the engine pods ("" matches all).
	Selector string `json:"selector" yaml:"selector"`
	Method   Method `json:"method" yaml:"method"`
	// Prefill and Decode name the role workloads for MethodScale, as
	// "Deployment/<name>" or "StatefulSet/<name>" in the pod's namespace.
	Prefill string `json:"prefill_workload" yaml:"prefill_workload"`
	Decode  string `json:"decode_workload" yaml:"decode_workload"`
	// ReadyTimeout bounds the wait for the target workload's new pod
	// (MethodScale): the engine's start time, weights included. Default
	// 15 min.
	ReadyTimeout time.Duration `json:"ready_timeout" yaml:"ready_timeout"`

	sel labels.Selector
}

// Workload is a scalable workload in the pod's namespace.
type Workload struct {
	Kind string // Deployment or StatefulSet
	Name string
}

func (w Workload) String() string { return w.Kind + "/" + w.Name }

// ParseWorkload reads "Deployment/name" or "StatefulSet/name".
func ParseWorkload(s string) (Workload, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return Workload{}, fmt.Errorf("%w: workload %q: want Deployment/<name> or StatefulSet/<name>", ErrInvalidConfig, s)
	}
	switch kind {
	case "Deployment", "StatefulSet":
	default:
		return Workload{}, fmt.Errorf("%w: workload %q: kind %q is not Deployment or StatefulSet", ErrInvalidConfig, s, kind)
	}
	return Workload{Kind: kind, Name: name}, nil
}

// workload returns the pool's workload of role.
func (p *Pool) workload(r controller.Role) (Workload, error) {
	s := p.Prefill
	if r == controller.RoleDecode {
		s = p.Decode
	}
	return ParseWorkload(s)
}

// validate checks the pool and compiles its selector.
func (p *Pool) validate(i int) error {
	name := fmt.Sprintf("pools[%d] (%s)", i, p.Name)
	sel, err := labels.Parse(p.Selector)
	if err != nil {
		return fmt.Errorf("%w: %s: selector %q: %w", ErrInvalidConfig, name, p.Selector, err)
	}
	p.sel = sel
	switch p.Method {
	case MethodRelabel, MethodSwitchURL:
	case MethodScale:
		for _, r := range []controller.Role{controller.RolePrefill, controller.RoleDecode} {
			if _, err := p.workload(r); err != nil {
				return fmt.Errorf("%s: %s workload: %w", name, r, err)
			}
		}
		if p.Prefill == p.Decode {
			return fmt.Errorf("%w: %s: prefill and decode workloads are both %q", ErrInvalidConfig, name, p.Prefill)
		}
		if p.ReadyTimeout < 0 {
			return fmt.Errorf("%w: %s: ready_timeout %v must be >= 0", ErrInvalidConfig, name, p.ReadyTimeout)
		}
		if p.ReadyTimeout == 0 {
			p.ReadyTimeout = 15 * time.Minute
		}
	default:
		return fmt.Errorf("%w: %s: method %q (want relabel, scale or switch_url)", ErrInvalidConfig, name, p.Method)
	}
	return nil
}

// poolFor returns the pool of pod (nil: default relabel).
func (a *Actuator) poolFor(pod *corev1.Pod) *Pool {
	for i := range a.cfg.Pools {
		if a.cfg.Pools[i].sel.Matches(labels.Set(pod.Labels)) {
			return &a.cfg.Pools[i]
		}
	}
	return nil
}
