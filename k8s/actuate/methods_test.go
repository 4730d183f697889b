package actuate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

func TestPoolConfigRefusals(t *testing.T) {
	cs := fake.NewSimpleClientset()
	ok := func(context.Context, string) (bool, error) { return true, nil }
	done := func(string, int64, error) {}
	for _, p := range []Pool{
		{Name: "m", Method: "restart"},
		{Name: "s", Selector: "a in (", Method: MethodRelabel},
		{Name: "w", Method: MethodScale, Prefill: "Deployment/a"},
		{Name: "k", Method: MethodScale, Prefill: "DaemonSet/a", Decode: "Deployment/b"},
		{Name: "same", Method: MethodScale, Prefill: "Deployment/a", Decode: "Deployment/a"},
		{Name: "t", Method: MethodScale, Prefill: "Deployment/a", Decode: "Deployment/b", ReadyTimeout: -time.Second},
	} {
		cfg := testConfig()
		cfg.Pools = []Pool{p}
		if _, err := New(cs, cfg, locator, ok, done); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("pool %+v: got %v; want ErrInvalidConfig", p, err)
		}
	}
	cfg := testConfig()
	cfg.Roles = podmeta.Roles{Preset: "nope"}
	if _, err := New(cs, cfg, locator, ok, done); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad roles: got %v", err)
	}
}

// A relabel whose pod is owned (through its ReplicaSet) by a Deployment
// selecting on the role label is refused before the pod is touched; a
// switch_url pool without the annotation is refused too.
func TestRefusalsLeaveThePodAlone(t *testing.T) {
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: podmeta.LabelRole, Operator: metav1.LabelSelectorOpIn, Values: []string{"decode"}}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "dec"}, Spec: appsv1.DeploymentSpec{Selector: sel}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "dec-abc",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "dec"}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod-template-hash": "abc"}}}}
	owned := newPod("e1", "decode")
	owned.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "dec-abc"}}
	cs := fake.NewSimpleClientset(dep, rs, owned, newPod("e2", "decode"))
	rec := &recorder{ch: make(chan result, 2)}
	cfg := testConfig()
	cfg.Pools = []Pool{{Name: "sw", Selector: "app=engine", Method: MethodSwitchURL}}
	a, err := New(cs, cfg, locator, func(context.Context, string) (bool, error) { return true, nil }, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// e1 is in the switch_url pool too, but has no URL: that refusal
	// comes first; give it one to reach the owner check.
	p := getPod(t, cs, "e1")
	p.Annotations = map[string]string{podmeta.AnnotationRoleSwitchURL: "http://127.0.0.1:1/role"}
	if _, err := cs.CoreV1().Pods("llm").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	for id, want := range map[string]error{"e1": ErrOwnerSelectsRole, "e2": ErrNoSwitchURL} {
		if err := a.Start(controller.Move{EngineID: id, From: controller.RoleDecode, To: controller.RolePrefill}); err != nil {
			t.Fatal(err)
		}
		res := rec.wait(t)
		if res.id != id || !errors.Is(res.err, want) {
			t.Fatalf("%s: got %+v; want %v", id, res, want)
		}
	}
	if got := patches(cs); len(got) != 0 {
		t.Fatalf("refused moves patched pods: %q", got)
	}
	j := a.Journal()
	if len(j) != 2 || j[0].Result != "refused" || j[1].Result != "refused" || !strings.Contains(j[0].Error+j[1].Error, "Deployment dec") {
		t.Fatalf("journal %+v", j)
	}
}
