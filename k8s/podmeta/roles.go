package podmeta

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/clusterconfig"
)

// Roles is the role label configuration (clusterconfig.Roles: the
// configuration section lives where the service can load it without a
// Kubernetes client).
type Roles = clusterconfig.Roles

// ErrInvalidRoles: a role label configuration Narwhal refuses.
var ErrInvalidRoles = clusterconfig.ErrInvalidRoles

// Presets are the role labels of the routers Narwhal knows.
var Presets = clusterconfig.Presets

// DefaultRoles is the narwhal preset.
func DefaultRoles() Roles { return clusterconfig.DefaultRoles() }

// RoleWith returns the pod's role under the role labels r.
func RoleWith(r Roles, pod *corev1.Pod) (controller.Role, error) {
	v, ok := pod.Labels[r.Key]
	if !ok {
		return controller.RoleNone, fmt.Errorf("pod %s/%s: %w (%s missing)", pod.Namespace, pod.Name, ErrNoRole, r.Key)
	}
	role, ok := r.Parse(v)
	if !ok {
		return controller.RoleNone, fmt.Errorf("pod %s/%s: %w (%s=%q)", pod.Namespace, pod.Name, ErrNoRole, r.Key, v)
	}
	return role, nil
}

// EngineFromPodWith is EngineFromPod with the role labels r.
func EngineFromPodWith(r Roles, pod *corev1.Pod) (controller.Engine, error) {
	role, err := RoleWith(r, pod)
	if err != nil {
		return controller.Engine{}, err
	}
	return engineFromPod(pod, role), nil
}
