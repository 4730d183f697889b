package leader_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/leader"
	"github.com/narwhal-io/narwhal/k8s/statestore"
)

const stateKey = "controller-state.json"

// noDemand is an empty demand history: the controller decides on observed
// pressure (demand is incomplete while offers are pending).
type noDemand struct{}

func (noDemand) Window(_, _ int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	return dst, buckets.Window{}
}
func (noDemand) Evidence(int64, int64) buckets.Evidence { return buckets.Evidence{} }

// decodeStarved: TPOT three times its SLO, TTFT well within it; the
// controller wants to move a prefill engine to decode.
var decodeStarved = controller.Inputs{
	Arrivals: noDemand{}, Outputs: noDemand{}, PendingUnsized: 5,
	ObservedPrefill: controller.PhaseObservation{Count: 100, Mean: 0.1, Max: 0.2},
	ObservedDecode:  controller.PhaseObservation{Count: 100, Mean: 3, Max: 4},
}

const cooldownS = 60

// newReplica builds one replica's controller with the engines every
// replica learns from discovery; it has not decided anything yet.
func newReplica(t *testing.T) *controller.Controller {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.ConfirmSteps, cfg.CooldownS, cfg.DwellS = 1, cooldownS, 0
	cfg.MaxMovesPerStep = 1 // the test counts single moves; a confirmed deficit may otherwise move several at once
	tm := controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1, TPOTSLOS: 0.1}
	c, err := controller.New(cfg, tm, nil, controller.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("controller.New: %v", err)
	}
	for _, e := range []controller.Engine{
		{ID: "p0", Role: controller.RolePrefill},
		{ID: "p1", Role: controller.RolePrefill},
		{ID: "p2", Role: controller.RolePrefill},
		{ID: "p3", Role: controller.RolePrefill},
		{ID: "d0", Role: controller.RoleDecode},
	} {
		e.Model, e.GPU, e.Live, e.Node = "facebook/opt-13b", "A100-80GB", true, "n0"
		if err := c.UpsertEngine(e); err != nil {
			t.Fatalf("UpsertEngine(%s): %v", e.ID, err)
		}
	}
	return c
}

// candidate is one narwhal-core replica: its own controller, an elector
// and the shared ConfigMap store fenced by its leadership.
type candidate struct {
	ctl     *controller.Controller
	el      *leader.Elector
	store   *statestore.Store
	started chan struct{} // closed when its term starts and state is restored
	stopped chan struct{} // closed when its term ends
	cancel  context.CancelFunc
	done    chan error
	restore error
}

func startCandidate(t *testing.T, cs *fake.Clientset, id string) *candidate {
	t.Helper()
	cfg := leader.Config{Namespace: "narwhal", LeaseName: "narwhal-core-leader", Identity: id,
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	el, err := leader.New(cs, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("leader.New(%s): %v", id, err)
	}
	store, err := statestore.New(cs, "narwhal", "narwhal-core-state", statestore.WithFence(el.IsLeader), statestore.WithIdentity(id))
	if err != nil {
		t.Fatal(err)
	}
	c := &candidate{ctl: newReplica(t), el: el, store: store,
		started: make(chan struct{}), stopped: make(chan struct{}), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	var once sync.Once
	go func() {
		c.done <- el.Run(ctx, func(ctx context.Context) {
			// A new leader first reads the saved state.
			blob, err := store.Load(ctx, stateKey)
			switch {
			case errors.Is(err, statestore.ErrNotFound):
			case err != nil:
				c.restore = err
			default:
				var st controller.PersistedState
				if err = json.Unmarshal(blob, &st); err == nil {
					err = c.ctl.Restore(st)
				}
				c.restore = err
			}
			close(c.started)
		}, func() { once.Do(func() { close(c.stopped) }) })
	}()
	return c
}

// step runs one decision and, as the wiring does on every decision,
// saves the controller state to the ConfigMap.
func (c *candidate) step(t *testing.T, nowNs int64) controller.Decision {
	t.Helper()
	d := c.ctl.Step(nowNs, decodeStarved)
	blob, err := json.Marshal(c.ctl.State())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.Save(context.Background(), stateKey, blob); err != nil {
		t.Fatalf("save state: %v", err)
	}
	return d
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestFailoverKeepsCooldown is acceptance 2: two candidates on client-go's
// fake clientset; A leads and moves an engine; A dies without releasing
// the lease; B takes over once the lease expires, restores the state A
// saved in the ConfigMap, and the next move stays blocked by cooldown
// until the cooldown has passed.
func TestFailoverKeepsCooldown(t *testing.T) {
	cs := fake.NewSimpleClientset()
	a := startCandidate(t, cs, "core-a")
	wait(t, a.started, "core-a to lead")
	if a.restore != nil {
		t.Fatalf("core-a restore: %v", a.restore)
	}
	b := startCandidate(t, cs, "core-b")
	defer func() { b.cancel(); <-b.done }()

	t0 := int64(1_800_000_000) * 1e9
	d := a.step(t, t0)
	if len(d.Moves) != 1 || d.Moves[0].From != controller.RolePrefill || d.Moves[0].To != controller.RoleDecode {
		t.Fatalf("leader's first decision: got action %q moves %+v blocked %q reason %q; want one prefill->decode move",
			d.Action, d.Moves, d.Blocked, d.Reason)
	}
	moved := d.Moves[0].EngineID
	if !a.el.IsLeader() || b.el.IsLeader() {
		t.Fatalf("leadership: a=%v b=%v; want a only", a.el.IsLeader(), b.el.IsLeader())
	}
	select {
	case <-b.started:
		t.Fatal("core-b started leading while core-a holds the lease")
	default:
	}

	// core-a dies: its context ends, the lease is not released.
	killedAt := time.Now()
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("core-a Run: %v", err)
	}
	wait(t, a.stopped, "core-a to stop leading")
	if a.el.IsLeader() {
		t.Fatal("core-a still reports leadership after its term ended")
	}
	// A deposed leader cannot overwrite its successor's state.
	if err := a.store.Save(context.Background(), stateKey, []byte("{}")); !errors.Is(err, statestore.ErrFenced) {
		t.Fatalf("save by the deposed leader: got %v; want ErrFenced", err)
	}

	wait(t, b.started, "core-b to take over")
	if waited := time.Since(killedAt); waited < 500*time.Millisecond {
		t.Fatalf("core-b took over %v after core-a died; want after the lease (1 s) expired", waited)
	}
	if b.restore != nil {
		t.Fatalf("core-b restore: %v", b.restore)
	}
	if !b.el.IsLeader() || b.el.Leader() != "core-b" {
		t.Fatalf("core-b: IsLeader=%v Leader=%q", b.el.IsLeader(), b.el.Leader())
	}
	lease, err := cs.CoordinationV1().Leases("narwhal").Get(context.Background(), "narwhal-core-leader", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "core-b" {
		t.Fatalf("lease holder after failover: %v, %v", lease, err)
	}

	// The new leader continues from the saved state: the moved engine is in
	// its new role and the cooldown started by core-a still holds.
	if got := b.ctl.Roles().RoleOf(moved); got != controller.RoleDecode {
		t.Fatalf("core-b role of %s: %v; want decode", moved, got)
	}
	d = b.step(t, t0+10e9)
	if len(d.Moves) != 0 || d.Blocked != controller.GateCooldown {
		t.Fatalf("core-b 10 s after the move: action %q blocked %q moves %+v; want blocked by %q",
			d.Action, d.Blocked, d.Moves, controller.GateCooldown)
	}
	// Control: a replica that did not restore the state would have moved.
	fresh := newReplica(t)
	if d := fresh.Step(t0+10e9, decodeStarved); len(d.Moves) != 1 {
		t.Fatalf("control without saved state: action %q blocked %q; want a move", d.Action, d.Blocked)
	}
	// After the cooldown the new leader moves again.
	d = b.step(t, t0+(cooldownS+1)*1e9)
	if len(d.Moves) != 1 || d.Moves[0].EngineID == moved {
		t.Fatalf("core-b after the cooldown: action %q blocked %q moves %+v; want one move of another engine",
			d.Action, d.Blocked, d.Moves)
	}
	if d.Seq <= 2 {
		t.Fatalf("decision sequence restarted after failover: seq %d", d.Seq)
	}
}
