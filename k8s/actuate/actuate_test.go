package actuate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

type podMap map[string]discover.PodRef

func (m podMap) PodFor(id string) (discover.PodRef, bool) { r, ok := m[id]; return r, ok }

func newPod(name, role string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name,
		Labels: map[string]string{"app": "engine", podmeta.LabelRole: role}}}
}

var locator = podMap{
	"e0": {Namespace: "llm", Name: "e0"},
	"e1": {Namespace: "llm", Name: "e1"},
	"e2": {Namespace: "llm", Name: "e2"},
}

type result struct {
	id    string
	nowNs int64
	err   error
}

type recorder struct {
	ch chan result
}

func (r *recorder) done(id string, nowNs int64, err error) { r.ch <- result{id, nowNs, err} }

func (r *recorder) wait(t *testing.T) result {
	t.Helper()
	select {
	case res := <-r.ch:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for MoveDone")
	}
	return result{}
}

func testConfig() Config {
	return Config{DrainTimeout: 2 * time.Second, DrainPoll: time.Millisecond, SwitchTimeout: 2 * time.Second}
}

func getPod(t *testing.T, cs *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("llm").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// patches returns "pod:body" for every patch action, in order.
func patches(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p.GetName()+":"+string(p.GetPatch()))
		}
	}
	return out
}

// TestMovePatchesOnlyTheMovedPodAfterDrain is acceptance 3 (actuation): the
// moved pod is marked draining, its label is untouched until the drain
// check reports no resident work and the switch endpoint answered, and no
// other pod is patched.
func TestMovePatchesOnlyTheMovedPodAfterDrain(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e0", "prefill"), newPod("e1", "decode"), newPod("e2", "decode"))

	var mu sync.Mutex
	var seen []string // what the world looked like at each step
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Role, From string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		p := getPod(t, cs, "e1")
		mu.Lock()
		seen = append(seen, "switch "+body.From+"->"+body.Role+" label="+p.Labels[podmeta.LabelRole]+" draining="+p.Annotations[podmeta.AnnotationDraining])
		mu.Unlock()
	}))
	defer srv.Close()
	p := getPod(t, cs, "e1")
	p.Annotations = map[string]string{podmeta.AnnotationRoleSwitchURL: srv.URL + "/role"}
	if _, err := cs.CoreV1().Pods("llm").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()

	resident := 3 // the engine reports resident work for three polls
	drained := func(_ context.Context, id string) (bool, error) {
		p := getPod(t, cs, id)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, "drain-check label="+p.Labels[podmeta.LabelRole]+" draining="+p.Annotations[podmeta.AnnotationDraining])
		resident--
		return resident < 0, nil
	}
	rec := &recorder{ch: make(chan result, 1)}
	a, err := New(cs, testConfig(), locator, drained, rec.done, WithClock(func() int64 { return 42 }))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill, DecisionSeq: 7}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	res := rec.wait(t)
	if res != (result{"e1", 42, nil}) {
		t.Fatalf("unexpected MoveDone; got %+v; want {e1 42 <nil>}", res)
	}
	wantSeen := []string{
		"drain-check label=decode draining=true",
		"drain-check label=decode draining=true",
		"drain-check label=decode draining=true",
		"drain-check label=decode draining=true",
		"switch decode->prefill label=decode draining=true",
	}
	if strings.Join(seen, "\n") != strings.Join(wantSeen, "\n") {
		t.Fatalf("unexpected sequence;\ngot  %q\nwant %q", seen, wantSeen)
	}
	wantPatches := []string{
		`e1:{"metadata":{"annotations":{"narwhal.io/draining":"true"}}}`,
		`e1:[{"op":"test","path":"/metadata/labels/narwhal.io~1role","value":"decode"},{"op":"replace","path":"/metadata/labels/narwhal.io~1role","value":"prefill"},{"op":"test","path":"/metadata/annotations/narwhal.io~1draining","value":"true"},{"op":"remove","path":"/metadata/annotations/narwhal.io~1draining"}]`,
	}
	if got := patches(cs); strings.Join(got, "\n") != strings.Join(wantPatches, "\n") {
		t.Fatalf("unexpected patches;\ngot  %q\nwant %q", got, wantPatches)
	}
	for name, role := range map[string]string{"e0": "prefill", "e1": "prefill", "e2": "decode"} {
		p := getPod(t, cs, name)
		if got := p.Labels[podmeta.LabelRole]; got != role {
			t.Fatalf("pod %s: role label %q; want %q", name, got, role)
		}
		if _, ok := p.Annotations[podmeta.AnnotationDraining]; ok {
			t.Fatalf("pod %s still carries the draining annotation", name)
		}
	}
	if a.InFlight() != 0 {
		t.Fatalf("InFlight = %d after done", a.InFlight())
	}
}

func TestDrainTimeoutAbortsAndKeepsRole(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"))
	rec := &recorder{ch: make(chan result, 1)}
	cfg := testConfig()
	cfg.DrainTimeout = 20 * time.Millisecond
	never := func(context.Context, string) (bool, error) { return false, nil }
	a, err := New(cs, cfg, locator, never, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}); err != nil {
		t.Fatal(err)
	}
	if res := rec.wait(t); !errors.Is(res.err, ErrDrainTimeout) {
		t.Fatalf("got %v; want ErrDrainTimeout", res.err)
	}
	p := getPod(t, cs, "e1")
	if p.Labels[podmeta.LabelRole] != "decode" || p.Annotations[podmeta.AnnotationDraining] != "" {
		t.Fatalf("aborted move left labels %v annotations %v", p.Labels, p.Annotations)
	}
}

func TestSwitchOnDrainTimeoutProceeds(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"))
	rec := &recorder{ch: make(chan result, 1)}
	cfg := testConfig()
	cfg.DrainTimeout = 10 * time.Millisecond
	cfg.SwitchOnDrainTimeout = true
	a, err := New(cs, cfg, locator, func(context.Context, string) (bool, error) { return false, errors.New("agent down") }, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}); err != nil {
		t.Fatal(err)
	}
	if res := rec.wait(t); res.err != nil {
		t.Fatalf("got %v; want success", res.err)
	}
	if got := getPod(t, cs, "e1").Labels[podmeta.LabelRole]; got != "prefill" {
		t.Fatalf("role label %q; want prefill", got)
	}
}

func TestSwitchEndpointFailureKeepsRole(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	p := newPod("e1", "prefill")
	p.Annotations = map[string]string{podmeta.AnnotationRoleSwitchURL: srv.URL}
	cs := fake.NewSimpleClientset(p)
	rec := &recorder{ch: make(chan result, 1)}
	a, err := New(cs, testConfig(), locator, func(context.Context, string) (bool, error) { return true, nil }, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RolePrefill, To: controller.RoleDecode}); err != nil {
		t.Fatal(err)
	}
	if res := rec.wait(t); !errors.Is(res.err, ErrSwitchEndpoint) {
		t.Fatalf("got %v; want ErrSwitchEndpoint", res.err)
	}
	got := getPod(t, cs, "e1")
	if got.Labels[podmeta.LabelRole] != "prefill" || got.Annotations[podmeta.AnnotationDraining] != "" {
		t.Fatalf("failed switch left labels %v annotations %v", got.Labels, got.Annotations)
	}
}

func TestStartRefusals(t *testing.T) {
	cs := fake.NewSimpleClientset(newPod("e1", "decode"), newPod("e2", "decode"))
	rec := &recorder{ch: make(chan result, 4)}
	release := make(chan struct{})
	blocking := func(ctx context.Context, _ string) (bool, error) {
		select {
		case <-release:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	a, err := New(cs, testConfig(), locator, blocking, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	f := func(m controller.Move, want error) {
		t.Helper()
		if err := a.Start(m); !errors.Is(err, want) {
			t.Fatalf("Start(%+v): got %v; want %v", m, err, want)
		}
	}
	f(controller.Move{From: controller.RoleDecode, To: controller.RolePrefill}, ErrInvalidMove)
	f(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RoleDecode}, ErrInvalidMove)
	f(controller.Move{EngineID: "e1", From: controller.RoleDecode}, ErrInvalidMove)
	f(controller.Move{EngineID: "nope", From: controller.RoleDecode, To: controller.RolePrefill}, ErrUnknownEngine)
	f(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}, nil)
	f(controller.Move{EngineID: "e1", From: controller.RoleDecode, To: controller.RolePrefill}, ErrBusy)
	// The pod says decode; a move from prefill is stale.
	f(controller.Move{EngineID: "e2", From: controller.RolePrefill, To: controller.RoleDecode}, nil)
	if res := rec.wait(t); res.id != "e2" || !errors.Is(res.err, ErrRoleMismatch) {
		t.Fatalf("got %+v; want e2 ErrRoleMismatch", res)
	}
	// Close cancels e1's drain; it reports ErrClosed and keeps its role.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if res := rec.wait(t); res.id != "e1" || !errors.Is(res.err, ErrClosed) {
		t.Fatalf("got %+v; want e1 ErrClosed", res)
	}
	p := getPod(t, cs, "e1")
	if p.Labels[podmeta.LabelRole] != "decode" || p.Annotations[podmeta.AnnotationDraining] != "" {
		t.Fatalf("cancelled move left labels %v annotations %v", p.Labels, p.Annotations)
	}
	f(controller.Move{EngineID: "e2", From: controller.RoleDecode, To: controller.RolePrefill}, ErrClosed)
	close(release)
}

func TestResidentDrained(t *testing.T) {
	table := []controller.Engine{
		{ID: "busy", Resident: controller.Resident{DecodeSeqs: 1, KVTokens: 10}},
		{ID: "queued", Resident: controller.Resident{QueuedPrefillS: 0.5}},
		{ID: "idle"},
	}
	check := ResidentDrained(func() []controller.Engine { return table })
	for id, want := range map[string]bool{"busy": false, "queued": false, "idle": true, "gone": true} {
		if got, err := check(context.Background(), id); err != nil || got != want {
			t.Fatalf("ResidentDrained(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	cs := fake.NewSimpleClientset()
	ok := func(context.Context, string) (bool, error) { return true, nil }
	done := func(string, int64, error) {}
	if _, err := New(cs, Config{}, locator, ok, done); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("zero config: got %v", err)
	}
	if _, err := New(cs, testConfig(), locator, nil, done); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil drain check: got %v", err)
	}
	if _, err := New(cs, DefaultConfig(), locator, ok, done); err != nil {
		t.Fatalf("default config: %v", err)
	}
}
