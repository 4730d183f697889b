package actuate

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// moveWithDrainHook runs a decode -> prefill move of e1 whose drain check
// calls during(cs) once, as if someone acted on the pod while it drained,
// and returns the move's outcome.
func moveWithDrainHook(t *testing.T, cs *fake.Clientset, during func(*fake.Clientset)) result {
	t.Helper()
	once := false
	return moveE1(t, cs, testConfig(), func(context.Context, string) (bool, error) {
		if !once {
			once = true
			during(cs)
		}
		return true, nil
	})
}

func uidPod(name, role string, uid types.UID) *corev1.Pod {
	p := newPod(name, role)
	p.UID = uid
	return p
}

// An operator takes the pod out of service (kubectl label pod e1
// narwhal.io/role-) while the move drains it: the move must not put the
// label back.
func TestMoveKeepsRoleLabelRemovedDuringDrain(t *testing.T) {
	cs := fake.NewSimpleClientset(uidPod("e1", "decode", "uid-1"))
	res := moveWithDrainHook(t, cs, func(cs *fake.Clientset) {
		p := getPod(t, cs, "e1")
		delete(p.Labels, podmeta.LabelRole)
		if _, err := cs.CoreV1().Pods("llm").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(res.err, ErrPodChanged) {
		t.Fatalf("MoveDone err = %v; want ErrPodChanged", res.err)
	}
	p := getPod(t, cs, "e1")
	if v, ok := p.Labels[podmeta.LabelRole]; ok {
		t.Fatalf("role label put back: %q", v)
	}
	if _, ok := p.Annotations[podmeta.AnnotationDraining]; ok {
		t.Fatal("draining mark left on the pod")
	}
}

// The pod is deleted and recreated under the same name (a StatefulSet
// replica) while the move drains it: the new pod is not the one drained,
// so it keeps the role it started with and the move is not done.
func TestMoveDoesNotRelabelRecreatedPod(t *testing.T) {
	cs := fake.NewSimpleClientset(uidPod("e1", "decode", "uid-1"))
	res := moveWithDrainHook(t, cs, func(cs *fake.Clientset) {
		pods := cs.CoreV1().Pods("llm")
		if err := pods.Delete(context.Background(), "e1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(context.Background(), uidPod("e1", "decode", "uid-2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(res.err, ErrPodChanged) {
		t.Fatalf("MoveDone err = %v; want ErrPodChanged", res.err)
	}
	if got := getPod(t, cs, "e1").Labels[podmeta.LabelRole]; got != "decode" {
		t.Fatalf("recreated pod relabelled to %q; want decode", got)
	}
}

// The pod is deleted during the drain: the move fails with ErrPodChanged.
func TestMoveOfDeletedPodFails(t *testing.T) {
	cs := fake.NewSimpleClientset(uidPod("e1", "decode", "uid-1"))
	res := moveWithDrainHook(t, cs, func(cs *fake.Clientset) {
		if err := cs.CoreV1().Pods("llm").Delete(context.Background(), "e1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(res.err, ErrPodChanged) {
		t.Fatalf("MoveDone err = %v; want ErrPodChanged", res.err)
	}
}

// ClearDrainMark clears only the pod it was given (same UID, still
// marked) and never one this actuator is moving.
func TestClearDrainMarkGuards(t *testing.T) {
	marked := func(name string, uid types.UID) *corev1.Pod {
		p := uidPod(name, "decode", uid)
		p.Annotations = map[string]string{podmeta.AnnotationDraining: "true"}
		return p
	}
	cs := fake.NewSimpleClientset(marked("e0", "uid-0"), marked("e1", "uid-1"), marked("e2", "uid-2-new"))
	release := make(chan struct{})
	defer close(release)
	block := func(ctx context.Context, _ string) (bool, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return false, nil
	}
	a, err := New(cs, testConfig(), locator, block, func(string, int64, error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f := func(name string, uid types.UID, want, markAfter bool) {
		t.Helper()
		got, err := a.ClearDrainMark(ctx, locator[name], uid, name)
		if got != want || (want && err != nil) {
			t.Fatalf("ClearDrainMark(%s, %s) = %v, %v; want %v", name, uid, got, err, want)
		}
		if _, mark := getPod(t, cs, name).Annotations[podmeta.AnnotationDraining]; mark != markAfter {
			t.Fatalf("%s: draining mark present %v; want %v", name, mark, markAfter)
		}
	}
	f("e0", "uid-0", true, false)
	f("e0", "uid-0", false, false)    // already clear
	f("e1", "uid-1", false, true)     // moving here
	f("e2", "uid-2-old", false, true) // another pod of that name
}

// The draining mark emptied by someone during the drain (the annotation
// kept with an empty value): the move still lands. The conditional patch
// tests that empty value, and a test op that dropped "value" (a string
// field with omitempty) would fail on the API server's JSON patch.
func TestMoveLandsWhenDrainMarkWasEmptied(t *testing.T) {
	cs := fake.NewSimpleClientset(uidPod("e1", "decode", "uid-1"))
	res := moveWithDrainHook(t, cs, func(cs *fake.Clientset) {
		p := getPod(t, cs, "e1")
		p.Annotations[podmeta.AnnotationDraining] = ""
		if _, err := cs.CoreV1().Pods("llm").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if res.err != nil {
		t.Fatalf("move: %v; want done", res.err)
	}
	p := getPod(t, cs, "e1")
	if _, ok := p.Annotations[podmeta.AnnotationDraining]; ok || p.Labels[podmeta.LabelRole] != "prefill" {
		t.Fatalf("after the move: labels %v annotations %v", p.Labels, p.Annotations)
	}
}
