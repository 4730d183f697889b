package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/actuate"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/leader"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
	"github.com/narwhal-io/narwhal/k8s/statestore"
)

// ErrNotBound is returned by Run before Bind.
var ErrNotBound = errors.New("cluster: Run before Bind")

// Core is what the cluster needs from the embedded core; *core.Core
// satisfies it.
type Core interface {
	UpsertEngine(e controller.Engine) error
	RemoveEngine(id string) error
	MoveDone(engineID string, nowNs int64, err error)
	Engines() []controller.Engine
	Step(nowNs int64) controller.Decision
}

// StateHolder saves and restores the controller state;
// *controller.Controller (core.Core.Controller()) satisfies it.
type StateHolder interface {
	State() controller.PersistedState
	Restore(st controller.PersistedState) error
}

// Cluster runs discovery, election, state and actuation for one replica.
type Cluster struct {
	client kubernetes.Interface
	cfg    Config
	logger *slog.Logger

	el    *leader.Elector
	store *statestore.Store
	act   *actuate.Actuator

	mu        sync.Mutex
	core      Core
	state     StateHolder
	disc      *discover.Discoverer
	stepEvery time.Duration

	steps     atomic.Uint64
	savedSeq  atomic.Uint64 // decision sequence of the last state saved
	saveFails prometheus.Counter
}

// New builds the replica's Kubernetes side from cfg (after FromEnv).
func New(client kubernetes.Interface, cfg Config, logger *slog.Logger) (*Cluster, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	k := &Cluster{client: client, cfg: cfg, logger: logger.With("component", "cluster")}
	var err error
	if k.el, err = leader.New(client, leaderConfig(cfg), logger); err != nil {
		return nil, err
	}
	if k.store, err = statestore.New(client, cfg.Namespace, cfg.StateConfigMap,
		statestore.WithFence(k.el.IsLeader), statestore.WithIdentity(cfg.PodName)); err != nil {
		return nil, err
	}
	if k.act, err = actuate.New(client, actuateConfig(cfg), k, actuate.ResidentDrained(k.engines), k.moveDone,
		actuate.WithLogger(logger)); err != nil {
		return nil, err
	}
	k.saveFails = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "narwhal_k8s_state_save_failures_total",
		Help: "Controller state saves to the ConfigMap that failed.",
	})
	return k, nil
}

// Actuator is the controller.Actuator to build the core with. It starts
// a move on the pods only once the state that records the move is saved.
func (k *Cluster) Actuator() controller.Actuator { return saveFirst{k} }

// saveFirst saves the controller state before it hands a move to the pod
// actuator: the state then records the decision (its sequence, the
// cooldown, the engine in its target role) before any pod changes, so a
// leader that dies during the move leaves it to the next, which neither
// reuses the decision's sequence nor moves again inside the cooldown. A
// save that fails refuses the move (the controller puts the engine back).
type saveFirst struct{ k *Cluster }

func (a saveFirst) Start(m controller.Move) error {
	k := a.k
	if _, st, _, _ := k.bound(); st != nil && k.savedSeq.Load() < m.DecisionSeq {
		ctx, cancel := context.WithTimeout(context.Background(), dur(k.cfg.RenewDeadlineS))
		defer cancel()
		if err := k.save(ctx, st); err != nil {
			return fmt.Errorf("cluster: move of %q not started: the state recording it is not saved: %w", m.EngineID, err)
		}
	}
	return k.act.Start(m)
}

// Elector exposes the election (IsLeader, Leader).
func (k *Cluster) Elector() *leader.Elector { return k.el }

// IsLeader reports whether this replica's controller decides now.
func (k *Cluster) IsLeader() bool { return k.el.IsLeader() }

// Steps counts the controller steps this replica has run as leader.
func (k *Cluster) Steps() uint64 { return k.steps.Load() }

// Bind attaches the core, its state holder and the step period.
func (k *Cluster) Bind(c Core, st StateHolder, stepEvery time.Duration) error {
	if c == nil || st == nil || stepEvery <= 0 {
		return fmt.Errorf("%w: Bind needs a core, a state holder and a step period > 0", ErrInvalidConfig)
	}
	d, err := discover.New(k.client, discoverConfig(k.cfg), c, k.logger)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.core, k.state, k.disc, k.stepEvery = c, st, d, stepEvery
	return nil
}

// Collectors returns every metric of the Kubernetes side.
func (k *Cluster) Collectors() []prometheus.Collector {
	cs := append(k.el.Collectors(), k.act.Collectors()...)
	cs = append(cs, k.saveFails)
	k.mu.Lock()
	if k.disc != nil {
		cs = append(cs, k.disc.Collectors()...)
	}
	k.mu.Unlock()
	return cs
}

// PodFor makes the cluster the actuator's pod locator (via discovery).
func (k *Cluster) PodFor(id string) (discover.PodRef, bool) {
	k.mu.Lock()
	d := k.disc
	k.mu.Unlock()
	if d == nil {
		return discover.PodRef{}, false
	}
	return d.PodFor(id)
}

func (k *Cluster) bound() (Core, StateHolder, *discover.Discoverer, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.core, k.state, k.disc, k.stepEvery
}

func (k *Cluster) engines() []controller.Engine {
	if c, _, _, _ := k.bound(); c != nil {
		return c.Engines()
	}
	return nil
}

func (k *Cluster) moveDone(id string, nowNs int64, err error) {
	if c, _, _, _ := k.bound(); c != nil {
		c.MoveDone(id, nowNs, err)
	}
}

// Run discovers engines and campaigns until ctx ends; while leading it
// steps the controller. It waits for moves in flight before returning.
func (k *Cluster) Run(ctx context.Context) error {
	_, _, disc, _ := k.bound()
	if disc == nil {
		return ErrNotBound
	}
	// A replica that crashed while leading (its container restarted in
	// the same pod) left narwhal.io/leader=true on its pod, and the
	// leader Service would select it beside the real leader: start as a
	// follower, unlabelled.
	k.follow()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := disc.Run(ctx); err != nil {
			k.logger.Error("discovery stopped", "err", err)
		}
	}()
	err := k.el.Run(ctx, k.lead, k.follow)
	wg.Wait()
	if cerr := k.act.Close(); err == nil {
		err = cerr
	}
	return err
}

// lead runs one leadership term.
func (k *Cluster) lead(ctx context.Context) {
	c, st, disc, every := k.bound()
	if !k.restore(ctx, st) || !k.resync(ctx, disc) {
		return
	}
	k.labelSelf(ctx, true)
	stale := k.drainingPods(ctx)
	sweepAt := time.Now().Add(k.staleDrainAfter())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !k.el.IsLeader() {
				return
			}
			if len(stale) > 0 && !now.Before(sweepAt) {
				k.clearStaleDrains(ctx, stale)
				stale = nil
			}
			c.Step(now.UnixNano())
			k.steps.Add(1)
			_ = k.save(ctx, st) // counted and logged
		}
	}
}

// staleDrainAfter is how long after a term starts a draining mark seen
// then is taken as left behind: longer than any move an earlier leader
// started before its term ended can still take (drain, switch call,
// undo), plus a lease duration and a renew deadline for its retries.
func (k *Cluster) staleDrainAfter() time.Duration {
	return dur(k.cfg.DrainTimeoutS) + 2*dur(k.cfg.SwitchTimeoutS) + dur(k.cfg.LeaseDurationS) + dur(k.cfg.RenewDeadlineS)
}

// drainingPods lists the engine pods marked draining when a term starts
// (best effort: an error is logged and nothing is swept this term).
func (k *Cluster) drainingPods(ctx context.Context) []corev1.Pod {
	dc := discoverConfig(k.cfg)
	list, err := k.client.CoreV1().Pods(dc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: dc.Selector})
	if err != nil {
		k.logger.Warn("cannot list engine pods for stale drain marks", "err", err)
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if podmeta.Draining(&p) {
			out = append(out, p)
		}
	}
	return out
}

// clearStaleDrains removes the draining mark from pods that still carry
// it (same UID) and that this replica is not moving: an earlier leader
// that died or lost the API server in the middle of a move left it, and
// nothing else would ever clear it (the engine would stay not live on
// every replica, and the leader's row in the role the saved state gave it
// rather than its label's). The pod event that follows upserts the
// engine, live, in its label's role. An engine with a role-switch URL is
// first asked to hold its label's role (the dead leader may have switched
// it before the relabel); a failed call is logged and the mark cleared
// anyway (an engine that cannot be reached is not live either).
func (k *Cluster) clearStaleDrains(ctx context.Context, pods []corev1.Pod) {
	for i := range pods {
		p := &pods[i]
		ref := discover.PodRef{Namespace: p.Namespace, Name: p.Name}
		if err := k.act.SwitchToLabel(ctx, p); err != nil {
			k.logger.Error("engine may hold the other role than its pod label says: asking it to take the label's failed",
				"pod", p.Namespace+"/"+p.Name, "err", err)
		}
		cleared, err := k.act.ClearDrainMark(ctx, ref, p.UID, podmeta.EngineID(p))
		switch {
		case cleared:
			k.logger.Warn("cleared a draining mark an earlier leader left", "pod", p.Namespace+"/"+p.Name)
		case err != nil:
			k.logger.Info("draining mark not cleared (pod changed, gone or moving)", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

// restore loads the saved state; false when the term ended first.
func (k *Cluster) restore(ctx context.Context, st StateHolder) bool {
	retry := dur(k.cfg.RetryPeriodS)
	for {
		blob, err := k.store.Load(ctx, k.cfg.StateKey)
		switch {
		case err == nil:
			var ps controller.PersistedState
			if err := json.Unmarshal(blob, &ps); err != nil {
				k.logger.Error("saved controller state unreadable; starting fresh", "err", err)
				return true
			}
			if err := st.Restore(ps); err != nil {
				k.logger.Error("saved controller state refused; starting fresh", "err", err)
				return true
			}
			k.logger.Info("restored controller state", "seq", ps.Seq, "engines", len(ps.Engines))
			return true
		case errors.Is(err, statestore.ErrNotFound):
			k.logger.Info("no saved controller state; starting fresh")
			return true
		}
		k.logger.Warn("cannot read controller state; not deciding yet", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(retry):
		}
	}
}

// resync puts the pods' roles back into the engine table after restore:
// Restore gives every engine the role the state saved, which is a move's
// target role when the leader that saved it died in the middle of the
// move or aborted it after its last save, and discovery (which owns the
// role) passes on no pod event that changes nothing. It waits for
// discovery's first list, since an engine first upserted after the
// restore would take the saved role too. False when the term ended first.
func (k *Cluster) resync(ctx context.Context, disc *discover.Discoverer) bool {
	for !disc.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := disc.Resync(); err != nil {
		k.logger.Warn("engine table not fully resynced with the pods", "err", err)
	}
	return true
}

// save writes the controller state to the ConfigMap (failures are
// counted and logged).
func (k *Cluster) save(ctx context.Context, st StateHolder) error {
	ps := st.State()
	blob, err := json.Marshal(ps)
	if err == nil {
		err = k.store.Save(ctx, k.cfg.StateKey, blob)
	}
	if err != nil {
		k.saveFails.Inc()
		k.logger.Error("save controller state", "err", err)
		return err
	}
	k.savedSeq.Store(ps.Seq)
	return nil
}

func (k *Cluster) follow() {
	ctx, cancel := context.WithTimeout(context.Background(), dur(k.cfg.RenewDeadlineS))
	defer cancel()
	k.labelSelf(ctx, false)
}

// labelSelf sets or removes narwhal.io/leader on this replica's own pod
// (best effort: logged on failure).
func (k *Cluster) labelSelf(ctx context.Context, leading bool) {
	if !k.cfg.LabelLeader {
		return
	}
	var v any
	if leading {
		v = "true"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelLeader: v}}})
	if err != nil {
		k.logger.Error("BUG: encode leader label patch", "err", err)
		return
	}
	if _, err := k.client.CoreV1().Pods(k.cfg.Namespace).Patch(ctx, k.cfg.PodName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		k.logger.Warn("cannot label own pod", "leading", leading, "err", err)
	}
}
