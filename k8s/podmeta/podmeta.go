package podmeta

import (
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/clusterconfig"
)

// Label and annotation keys.
const (
	LabelRole     = clusterconfig.LabelRole
	LabelEngineID = "narwhal.io/engine-id"
	LabelModel    = "narwhal.io/model"
	LabelGPU      = "narwhal.io/gpu"

	AnnotationModel         = "narwhal.io/model"
	AnnotationGPU           = "narwhal.io/gpu"
	AnnotationDraining      = "narwhal.io/draining"
	AnnotationRoleSwitchURL = "narwhal.io/role-switch-url"
)

// ErrNoRole: the pod has no valid narwhal.io/role label.
var ErrNoRole = errors.New("podmeta: pod has no valid narwhal.io/role label")

// EngineID returns the pod's engine id: label narwhal.io/engine-id, else
// the pod name.
func EngineID(pod *corev1.Pod) string {
	if id := pod.Labels[LabelEngineID]; id != "" {
		return id
	}
	return pod.Name
}

// Live reports whether the pod can serve: Running, Ready, not deleting.
func Live(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Draining reports whether the pod carries narwhal.io/draining=true.
func Draining(pod *corev1.Pod) bool { return pod.Annotations[AnnotationDraining] == "true" }

// Role returns the pod's narwhal.io/role label (the narwhal preset; see
// Roles for others).
func Role(pod *corev1.Pod) (controller.Role, error) {
	return RoleWith(DefaultRoles(), pod)
}

// EngineFromPod builds the engine row Kubernetes knows about: id, node,
// model, GPU kind, role and liveness. The state is always serving: the
// move state belongs to the leader's controller, which keeps it when a
// serving row is upserted over a moving engine. A pod marked draining is
// reported not live, so every replica's role table stops sending it new
// work. Residency and KV capacity come from the agent, not from here.
func EngineFromPod(pod *corev1.Pod) (controller.Engine, error) {
	return EngineFromPodWith(DefaultRoles(), pod)
}

func engineFromPod(pod *corev1.Pod, role controller.Role) controller.Engine {
	return controller.Engine{
		ID:    EngineID(pod),
		Node:  pod.Spec.NodeName,
		Model: pick(pod.Annotations[AnnotationModel], pod.Labels[LabelModel]),
		GPU:   pick(pod.Annotations[AnnotationGPU], pod.Labels[LabelGPU]),
		Role:  role,
		State: controller.StateServing,
		Live:  Live(pod) && !Draining(pod),
	}
}

func pick(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
