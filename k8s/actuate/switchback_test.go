package actuate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// switchEngine is a role-switch endpoint that records each call as
// "from->role"; slow makes the first call outlast the switch timeout
// (the engine switches, the answer never arrives), refuse answers 409.
type switchEngine struct {
	mu     sync.Mutex
	calls  []string
	role   string
	slow   time.Duration
	refuse bool
}

func (e *switchEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ Role, From string }
	_ = json.NewDecoder(r.Body).Decode(&body)
	e.mu.Lock()
	e.calls = append(e.calls, body.From+"->"+body.Role)
	first, refuse := len(e.calls) == 1, e.refuse
	if !refuse {
		e.role = body.Role
	}
	e.mu.Unlock()
	if refuse {
		http.Error(w, "busy", http.StatusConflict)
		return
	}
	if first && e.slow > 0 {
		time.Sleep(e.slow)
	}
}

func (e *switchEngine) state() ([]string, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...), e.role
}

func switchMove(t *testing.T, eng *switchEngine, cfg Config, setup func(*fake.Clientset)) (result, *fake.Clientset) {
	t.Helper()
	srv := httptest.NewServer(eng)
	t.Cleanup(srv.Close)
	p := newPod("e1", "prefill")
	p.Annotations = map[string]string{podmeta.AnnotationRoleSwitchURL: srv.URL}
	cs := fake.NewSimpleClientset(p)
	if setup != nil {
		setup(cs)
	}
	rec := &recorder{ch: make(chan result, 1)}
	a, err := New(cs, cfg, locator, func(context.Context, string) (bool, error) { return true, nil }, rec.done)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.Start(controller.Move{EngineID: "e1", From: controller.RolePrefill, To: controller.RoleDecode, DecisionSeq: 7}); err != nil {
		t.Fatal(err)
	}
	return rec.wait(t), cs
}

// A switch call that times out may have switched the engine while the
// label stays prefill: the engine is asked to take prefill again.
func TestSwitchTimeoutSwitchesTheEngineBack(t *testing.T) {
	eng := &switchEngine{role: "prefill", slow: 300 * time.Millisecond}
	cfg := testConfig()
	cfg.SwitchTimeout = 100 * time.Millisecond
	res, cs := switchMove(t, eng, cfg, nil)
	if !errors.Is(res.err, ErrSwitchEndpoint) {
		t.Fatalf("move: %v; want ErrSwitchEndpoint", res.err)
	}
	calls, role := eng.state()
	if len(calls) != 2 || calls[0] != "prefill->decode" || calls[1] != "decode->prefill" || role != "prefill" {
		t.Fatalf("switch calls %v, engine role %s; want the move then its reversal, prefill", calls, role)
	}
	if p := getPod(t, cs, "e1"); p.Labels[podmeta.LabelRole] != "prefill" || p.Annotations[podmeta.AnnotationDraining] != "" {
		t.Fatalf("pod labels %v annotations %v; want prefill, not draining", p.Labels, p.Annotations)
	}
}

// The engine switched, then the relabel failed for good (403): the label
// says prefill, so the engine is switched back to prefill.
func TestRelabelFailureSwitchesTheEngineBack(t *testing.T) {
	eng := &switchEngine{role: "prefill"}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "e1", errors.New("rbac"))
	res, cs := switchMove(t, eng, testConfig(), func(cs *fake.Clientset) { failPatches(cs, forbidden, 2) })
	if res.err == nil {
		t.Fatal("move succeeded; want the relabel's error")
	}
	calls, role := eng.state()
	if len(calls) != 2 || calls[1] != "decode->prefill" || role != "prefill" {
		t.Fatalf("switch calls %v, engine role %s; want the move then its reversal, prefill", calls, role)
	}
	if got := getPod(t, cs, "e1").Labels[podmeta.LabelRole]; got != "prefill" {
		t.Fatalf("role label %q; want prefill", got)
	}
}

// An engine that answers a refusal did not switch: it is not called again.
func TestSwitchRefusalIsNotReversed(t *testing.T) {
	eng := &switchEngine{role: "prefill", refuse: true}
	res, _ := switchMove(t, eng, testConfig(), nil)
	if !errors.Is(res.err, ErrSwitchEndpoint) {
		t.Fatalf("move: %v; want ErrSwitchEndpoint", res.err)
	}
	if calls, role := eng.state(); len(calls) != 1 || role != "prefill" {
		t.Fatalf("switch calls %v, engine role %s; want one refused call, prefill", calls, role)
	}
}
