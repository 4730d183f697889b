package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// runMover runs a leader over four prefill pods and one decode pod whose
// controller wants one prefill engine moved to decode at once.
func runMover(t *testing.T, cs *fake.Clientset) (*Cluster, *controller.Controller) {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.ConfirmSteps, cfg.CooldownS, cfg.DwellS, cfg.MaxMovesPerStep = 1, 600, 0, 1
	return runReplica(t, cs, testConfig(), cfg, true)
}

// runReplica runs one replica over cs until the test ends: its
// controller (ccfg) steps with a decode deficit (ctlCore) when
// deciding, else holds (idleCore).
func runReplica(t *testing.T, cs *fake.Clientset, cfg Config, ccfg controller.Config, deciding bool) (*Cluster, *controller.Controller) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	k, err := New(cs, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	tm := controller.Timing{StepNs: 50e6, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1, TPOTSLOS: 0.1}
	ctl, err := controller.New(ccfg, tm, nil, controller.WithActuator(k.Actuator()), controller.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	var core Core = idleCore{ctl}
	if deciding {
		core = ctlCore{ctl}
	}
	if err := k.Bind(core, ctl, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return k, ctl
}

func moverPods() []runtime.Object {
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0"}}
	return []runtime.Object{self, enginePod("p0", "prefill"), enginePod("p1", "prefill"),
		enginePod("p2", "prefill"), enginePod("p3", "prefill"), enginePod("d0", "decode")}
}

func moveDecision(ctl *controller.Controller) (controller.Decision, bool) {
	for _, d := range ctl.Decisions(0, 1000) {
		if len(d.Moves) > 0 {
			return d, true
		}
	}
	return controller.Decision{}, false
}

// The state that records a move is in the ConfigMap before the move's
// first pod write: a leader that dies during the move leaves the next
// one the decision's sequence, the cooldown and the engine's target role.
func TestStateSavedBeforeMoveStarts(t *testing.T) {
	cs := fake.NewSimpleClientset(moverPods()...)
	var (
		mu      sync.Mutex
		atPatch *controller.PersistedState
	)
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "llm" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if atPatch != nil {
			return false, nil, nil
		}
		atPatch = &controller.PersistedState{}
		obj, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "narwhal", "narwhal-core-state")
		if err == nil {
			err = json.Unmarshal([]byte(obj.(*corev1.ConfigMap).Data["controller-state.json"]), atPatch)
		}
		if err != nil {
			t.Errorf("no saved state at the move's first pod write: %v", err)
		}
		return false, nil, nil
	})
	_, ctl := runMover(t, cs)
	waitFor(t, "a move's first pod write", func() bool { mu.Lock(); defer mu.Unlock(); return atPatch != nil })
	d, ok := moveDecision(ctl)
	if !ok {
		t.Fatal("no move decision")
	}
	mu.Lock()
	st := *atPatch
	mu.Unlock()
	roles := map[string]controller.Role{}
	for _, e := range st.Engines {
		roles[e.ID] = e.Role
	}
	if m := d.Moves[0]; st.Seq < d.Seq || st.LastMoveNs != d.AtNs || roles[m.EngineID] != controller.RoleDecode {
		t.Fatalf("state at the first pod write: seq %d, last move %d, roles %v; want decision %d at %d with %s decode",
			st.Seq, st.LastMoveNs, roles, d.Seq, d.AtNs, m.EngineID)
	}
}

// When the state cannot be saved the move is not started: no pod is
// touched, and the engine serves on in its role.
func TestMoveRefusedWhenStateNotSaved(t *testing.T) {
	cs := fake.NewSimpleClientset(moverPods()...)
	for _, verb := range []string{"create", "update"} {
		cs.PrependReactor(verb, "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd unavailable")
		})
	}
	k, ctl := runMover(t, cs)
	waitFor(t, "a move decision", func() bool { _, ok := moveDecision(ctl); return ok })
	waitFor(t, "more steps", func() bool { return k.Steps() >= 3 })
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetNamespace() == "llm" {
			t.Fatalf("engine pod patched without a saved state: %s %s", p.GetName(), p.GetPatch())
		}
	}
	d, _ := moveDecision(ctl)
	if k.act.InFlight() != 0 {
		t.Fatal("a move is in flight")
	}
	for _, e := range ctl.Engines() {
		if e.ID == d.Moves[0].EngineID && (e.Role != controller.RolePrefill || e.State != controller.StateServing) {
			t.Fatalf("engine %+v; want serving as prefill", e)
		}
	}
}
