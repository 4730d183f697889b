package discover

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// tableSink is a mutex-and-map engine table standing in for *core.Core.
type tableSink struct {
	mu      sync.Mutex
	engines map[string]controller.Engine
	removed []string
}

func (s *tableSink) UpsertEngine(e controller.Engine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.engines == nil {
		s.engines = map[string]controller.Engine{}
	}
	s.engines[e.ID] = e
	return nil
}

func (s *tableSink) RemoveEngine(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.engines[id]; !ok {
		return fmt.Errorf("unknown engine %q", id)
	}
	delete(s.engines, id)
	s.removed = append(s.removed, id)
	return nil
}

// summary renders the table as "id:role:live" sorted, for comparison.
func (s *tableSink) summary() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for id, e := range s.engines {
		out = append(out, fmt.Sprintf("%s:%s:%v", id, e.Role, e.Live))
	}
	sort.Strings(out)
	return out
}

func enginePod(name, role, node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, Labels: map[string]string{
			"app": "engine", podmeta.LabelRole: role, podmeta.LabelGPU: "H100"}},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 5*time.Second, what, cond)
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestDiscoveryFollowsPods(t *testing.T) {
	other := enginePod("web-0", "decode", "n1", true)
	other.Labels["app"] = "web" // outside the selector
	cs := fake.NewSimpleClientset(
		enginePod("e0", "prefill", "n1", true),
		enginePod("e1", "decode", "n1", true),
		enginePod("e2", "decode", "n2", false),
		other,
	)
	sink := &tableSink{}
	d, ctx := runDiscoverer(t, cs, sink)

	want := []string{"e0:prefill:true", "e1:decode:true", "e2:decode:false"}
	waitFor(t, "initial engines", func() bool { return d.HasSynced() && equal(sink.summary(), want) })
	if ref, ok := d.PodFor("e2"); !ok || ref != (PodRef{Namespace: "llm", Name: "e2"}) {
		t.Fatalf("PodFor(e2) = %v, %v", ref, ok)
	}
	if got := d.Engines(); len(got) != 3 || got[2].Node != "n2" || got[2].GPU != "H100" {
		t.Fatalf("unexpected Engines(); got %+v", got)
	}

	pods := cs.CoreV1().Pods("llm")
	// A role change made by the leader's actuator reaches every replica.
	p, _ := pods.Get(ctx, "e1", metav1.GetOptions{})
	p.Labels[podmeta.LabelRole] = "prefill"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"e0:prefill:true", "e1:prefill:true", "e2:decode:false"}
	waitFor(t, "role change", func() bool { return equal(sink.summary(), want) })

	// A deleted pod leaves the live set, in the sink and in Engines().
	if err := pods.Delete(ctx, "e0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"e1:prefill:true", "e2:decode:false"}
	waitFor(t, "deletion", func() bool { return equal(sink.summary(), want) })
	if _, ok := d.PodFor("e0"); ok || d.Len() != 2 {
		t.Fatalf("deleted pod still known: PodFor ok=%v, Len=%d", ok, d.Len())
	}

	// Losing the role label or leaving the selector removes the engine too.
	p, _ = pods.Get(ctx, "e2", metav1.GetOptions{})
	delete(p.Labels, podmeta.LabelRole)
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []string{"e1:prefill:true"}
	waitFor(t, "role label removed", func() bool { return equal(sink.summary(), want) })

	p, _ = pods.Get(ctx, "e1", metav1.GetOptions{})
	p.Labels["app"] = "retired"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "selector left", func() bool { return len(sink.summary()) == 0 })
	sink.mu.Lock()
	removed := append([]string(nil), sink.removed...)
	sink.mu.Unlock()
	if !equal(removed, []string{"e0", "e2", "e1"}) {
		t.Fatalf("unexpected removals; got %v; want [e0 e2 e1]", removed)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	cs := fake.NewSimpleClientset()
	f := func(cfg Config, sink Sink) {
		t.Helper()
		if _, err := New(cs, cfg, sink, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("New(%+v): got %v; want ErrInvalidConfig", cfg, err)
		}
	}
	f(Config{Selector: "app in (a"}, &tableSink{})
	f(Config{ResyncPeriod: -time.Second}, &tableSink{})
	f(Config{}, nil)
}

func TestDuplicateEngineIDKeepsFirstOwner(t *testing.T) {
	sink := &tableSink{}
	d, err := New(fake.NewSimpleClientset(), Config{}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := enginePod("a", "decode", "n1", true)
	a.Labels[podmeta.LabelEngineID] = "shared"
	b := enginePod("b", "prefill", "n2", true)
	b.Labels[podmeta.LabelEngineID] = "shared"
	d.apply(a)
	d.apply(b)
	if got := sink.summary(); !equal(got, []string{"shared:decode:true"}) {
		t.Fatalf("unexpected table; got %v", got)
	}
	d.remove(b) // not the owner: nothing happens
	if got := sink.summary(); !equal(got, []string{"shared:decode:true"}) {
		t.Fatalf("removing the non-owner changed the table; got %v", got)
	}
	d.remove(a)
	d.apply(b)
	if got := sink.summary(); !equal(got, []string{"shared:prefill:true"}) {
		t.Fatalf("second pod did not take over the id; got %v", got)
	}
}

// listingSink also lists its table, as *core.Core does.
type listingSink struct{ tableSink }

func (s *listingSink) Engines() []controller.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []controller.Engine{}
	for _, e := range s.engines {
		out = append(out, e)
	}
	return out
}

func TestPodEventsKeepAgentFields(t *testing.T) {
	sink := &listingSink{}
	d, err := New(fake.NewSimpleClientset(), Config{}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := enginePod("e1", "decode", "n1", true)
	d.apply(p)
	// The agent reports residency and capacity; the controller moved it once.
	sink.mu.Lock()
	e := sink.engines["e1"]
	e.Resident = controller.Resident{DecodeSeqs: 4, KVTokens: 900}
	e.KVCapacityTokens, e.LastMoveNs = 50_000, 123
	e.TP = 4 // from the agent (the engine's flags); the pod says nothing
	sink.engines["e1"] = e
	sink.mu.Unlock()
	// The actuator marks the pod draining: it stops being live everywhere,
	// and the agent's numbers survive the upsert.
	p = p.DeepCopy()
	p.Annotations = map[string]string{podmeta.AnnotationDraining: "true"}
	d.apply(p)
	sink.mu.Lock()
	got := sink.engines["e1"]
	sink.mu.Unlock()
	want := controller.Engine{ID: "e1", Node: "n1", GPU: "H100", TP: 4, Role: controller.RoleDecode, Live: false,
		KVCapacityTokens: 50_000, LastMoveNs: 123, Resident: controller.Resident{DecodeSeqs: 4, KVTokens: 900}}
	if got != want {
		t.Fatalf("unexpected row after draining mark;\ngot  %+v\nwant %+v", got, want)
	}
}

// Two pods claim one engine id (a one-replica Deployment per engine with
// narwhal.io/engine-id in its template, during a rollout): when the first
// pod is deleted, the second takes the id over at once, without waiting
// for an event of its own (there may be none: resync is off).
func TestDuplicateEngineIDHandsOverOnDelete(t *testing.T) {
	a := enginePod("a", "decode", "n1", false)
	a.Labels[podmeta.LabelEngineID] = "shared"
	cs := fake.NewSimpleClientset(a)
	sink := &tableSink{}
	d, ctx := runDiscoverer(t, cs, sink)
	waitFor(t, "first pod", func() bool { return d.HasSynced() && equal(sink.summary(), []string{"shared:decode:false"}) })

	pods := cs.CoreV1().Pods("llm")
	b := enginePod("b", "prefill", "n2", true)
	b.Labels[podmeta.LabelEngineID] = "shared"
	if _, err := pods.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The handler sees events in order: once a's update shows, b's
	// creation has been handled (and ignored: a owns the id).
	a = a.DeepCopy()
	a.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := pods.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first pod ready", func() bool { return equal(sink.summary(), []string{"shared:decode:true"}) })

	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second pod to take the id over", func() bool { return equal(sink.summary(), []string{"shared:prefill:true"}) })
	if ref, ok := d.PodFor("shared"); !ok || ref.Name != "b" {
		t.Fatalf("PodFor(shared) = %v, %v; want pod b", ref, ok)
	}
}

// A pod relabelled to an engine id another pod holds releases the id it
// had (before, that id stayed registered to it for good), waits behind
// the owner, and takes the id over when the owner goes.
func TestPodRelabelledToATakenIDReleasesItsOld(t *testing.T) {
	a := enginePod("a", "decode", "n1", true)
	a.Labels[podmeta.LabelEngineID] = "x"
	b := enginePod("b", "prefill", "n2", true)
	b.Labels[podmeta.LabelEngineID] = "y"
	cs := fake.NewSimpleClientset(a, b)
	sink := &tableSink{}
	d, ctx := runDiscoverer(t, cs, sink)
	waitFor(t, "both pods", func() bool {
		return d.HasSynced() && equal(sink.summary(), []string{"x:decode:true", "y:prefill:true"})
	})

	pods := cs.CoreV1().Pods("llm")
	a = a.DeepCopy()
	a.Labels[podmeta.LabelEngineID] = "y"
	if _, err := pods.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "x released, y kept by b", func() bool { return equal(sink.summary(), []string{"y:prefill:true"}) })
	if _, ok := d.PodFor("x"); ok {
		t.Fatal("PodFor(x) still answers after a left it")
	}
	if err := pods.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to take y over", func() bool { return equal(sink.summary(), []string{"y:decode:true"}) })
	if ref, ok := d.PodFor("y"); !ok || ref.Name != "a" {
		t.Fatalf("PodFor(y) = %v, %v; want pod a", ref, ok)
	}
}

// runDiscoverer runs a discoverer of the app=engine pods in llm on cs
// into sink until the test ends; ctx ends with it, and Run must then
// return nil.
func runDiscoverer(t *testing.T, cs *fake.Clientset, sink *tableSink) (*Discoverer, context.Context) {
	t.Helper()
	d, err := New(cs, Config{Namespace: "llm", Selector: "app=engine"}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d, ctx
}

// A controller that restores a saved state changes its rows behind
// discovery's back (a dead leader saved a move's target role; the pod
// kept its old label). A repeated event of the unchanged pod would be
// skipped; Resync upserts every engine again as its pod says, keeping
// the fields discovery does not own.
func TestResyncRestoresPodRoles(t *testing.T) {
	sink := &listingSink{}
	d, err := New(fake.NewSimpleClientset(), Config{}, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	p0, d0 := enginePod("p0", "prefill", "n1", true), enginePod("d0", "decode", "n2", true)
	d.apply(p0)
	d.apply(d0)
	sink.mu.Lock()
	e := sink.engines["p0"]
	e.Role, e.LastMoveNs, e.KVCapacityTokens = controller.RoleDecode, 77, 5000 // restored over the row
	sink.engines["p0"] = e
	sink.mu.Unlock()
	d.apply(p0.DeepCopy()) // no change Narwhal cares about: skipped
	if got := sink.summary(); !equal(got, []string{"d0:decode:true", "p0:decode:true"}) {
		t.Fatalf("before Resync %v", got)
	}
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if got := sink.summary(); !equal(got, []string{"d0:decode:true", "p0:prefill:true"}) {
		t.Fatalf("after Resync %v; want the pods' roles", got)
	}
	sink.mu.Lock()
	e = sink.engines["p0"]
	sink.mu.Unlock()
	if e.LastMoveNs != 77 || e.KVCapacityTokens != 5000 {
		t.Fatalf("Resync lost the sink's fields: %+v", e)
	}
}
