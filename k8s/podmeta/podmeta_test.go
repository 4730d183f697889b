package podmeta

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/narwhal-io/narwhal/core/controller"
)

func pod(name string, labels, ann map[string]string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func TestEngineFromPod(t *testing.T) {
	f := func(p *corev1.Pod, want controller.Engine) {
		t.Helper()
		got, err := EngineFromPod(p)
		if err != nil {
			t.Fatalf("EngineFromPod(%s): %v", p.Name, err)
		}
		if got != want {
			t.Fatalf("unexpected engine; got %+v; want %+v", got, want)
		}
	}
	f(pod("p1", map[string]string{LabelRole: "prefill", LabelModel: "llama-8b", LabelGPU: "H100"}, nil, true),
		controller.Engine{ID: "p1", Node: "node-a", Model: "llama-8b", GPU: "H100", Role: controller.RolePrefill, Live: true})
	f(pod("p2", map[string]string{LabelRole: "decode", LabelEngineID: "eng-7", LabelModel: "short"},
		map[string]string{AnnotationModel: "meta-llama/Llama-3.1-8B-Instruct", AnnotationGPU: "A100-80G", AnnotationDraining: "true"}, false),
		controller.Engine{ID: "eng-7", Node: "node-a", Model: "meta-llama/Llama-3.1-8B-Instruct", GPU: "A100-80G",
			Role: controller.RoleDecode, Live: false})
	f(pod("p5", map[string]string{LabelRole: "decode"}, map[string]string{AnnotationDraining: "true"}, true),
		controller.Engine{ID: "p5", Node: "node-a", Role: controller.RoleDecode, Live: false})
	deleting := pod("p3", map[string]string{LabelRole: "decode"}, nil, true)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	f(deleting, controller.Engine{ID: "p3", Node: "node-a", Role: controller.RoleDecode})
	pending := pod("p4", map[string]string{LabelRole: "decode"}, nil, true)
	pending.Status.Phase = corev1.PodPending
	f(pending, controller.Engine{ID: "p4", Node: "node-a", Role: controller.RoleDecode})
}

func TestEngineFromPodNeedsRole(t *testing.T) {
	for _, labels := range []map[string]string{nil, {LabelRole: ""}, {LabelRole: "none"}, {LabelRole: "Prefill"}} {
		if _, err := EngineFromPod(pod("x", labels, nil, true)); !errors.Is(err, ErrNoRole) {
			t.Fatalf("labels %v: got %v; want ErrNoRole", labels, err)
		}
	}
}
