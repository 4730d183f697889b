package actuate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// failPatches makes the pod patches numbered in fail (1-based, in call
// order) answer err, as an API server under load does.
func failPatches(cs *fake.Clientset, err error, fail ...int) {
	var mu sync.Mutex
	n := 0
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		for _, f := range fail {
			if f == n {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
}

// One 503 on the patch that clears the draining mark of an aborted move
// must not leave the pod draining: nothing else ever clears the mark, and
// a draining pod is not live on any replica.
func TestAbortedMoveClearsDrainMarkDespiteTransientError(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"))
	failPatches(cs, apierrors.NewServiceUnavailable("etcd leader changed"), 2)
	cfg := testConfig()
	cfg.DrainTimeout = 10 * time.Millisecond
	never := func(context.Context, string) (bool, error) { return false, nil }
	if res := moveE1(t, cs, cfg, never); !errors.Is(res.err, ErrDrainTimeout) {
		t.Fatalf("got %v; want ErrDrainTimeout", res.err)
	}
	p := getPod(t, cs, "e1")
	if v, ok := p.Annotations[podmeta.AnnotationDraining]; ok || p.Labels[podmeta.LabelRole] != "decode" {
		t.Fatalf("aborted move left draining=%q (present %v), role %q", v, ok, p.Labels[podmeta.LabelRole])
	}
	if got := len(patches(cs)); got != 3 {
		t.Fatalf("%d patches; want 3 (mark, refused clear, clear)", got)
	}
}

// A 429 on the final label patch, after a full drain, is retried: the move
// is done, not failed.
func TestFinalPatchRetriesTransientError(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"))
	failPatches(cs, apierrors.NewTooManyRequests("slow down", 0), 2)
	if res := moveE1(t, cs, testConfig(), drainedNow); res.err != nil {
		t.Fatalf("got %v; want success", res.err)
	}
	p := getPod(t, cs, "e1")
	if _, ok := p.Annotations[podmeta.AnnotationDraining]; ok || p.Labels[podmeta.LabelRole] != "prefill" {
		t.Fatalf("after move: labels %v annotations %v", p.Labels, p.Annotations)
	}
	if got := len(patches(cs)); got != 3 {
		t.Fatalf("%d patches; want 3 (mark, refused label, label)", got)
	}
}

// A patch the server refuses for good (403) is not retried.
func TestPatchDoesNotRetryPermanentError(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"))
	failPatches(cs, apierrors.NewForbidden(podsGR, "e1", errors.New("rbac")), 1)
	if res := moveE1(t, cs, testConfig(), drainedNow); !apierrors.IsForbidden(res.err) {
		t.Fatalf("got %v; want Forbidden", res.err)
	}
	if got := len(patches(cs)); got != 1 {
		t.Fatalf("%d patches; want 1", got)
	}
}

var podsGR = schema.GroupResource{Resource: "pods"}

// moveE1 moves e1 from decode to prefill on cs with cfg, drained telling
// the drain's outcome, and returns what the actuator reported.
func moveE1(t *testing.T, cs *fake.Clientset, cfg Config, drained func(context.Context, string) (bool, error)) result {
	t.Helper()
	rec := &recorder{ch: make(chan result, 1)}
	a, err := New(cs, cfg, locator, drained, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}); err != nil {
		t.Fatal(err)
	}
	return rec.wait(t)
}

func drainedNow(context.Context, string) (bool, error) { return true, nil }
