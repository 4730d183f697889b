package actuate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

var (
	// ErrInvalidMove: the move names no engine, no target role, or does
	// not change the role.
	ErrInvalidMove = errors.New("actuate: invalid move")
	// ErrUnknownEngine: no pod is known for the engine.
	ErrUnknownEngine = errors.New("actuate: unknown engine")
	// ErrBusy: a move of that engine is already in flight.
	ErrBusy = errors.New("actuate: engine already moving")
	// ErrRoleMismatch: the pod's role label is not the move's From role.
	ErrRoleMismatch = errors.New("actuate: pod role differs from move source")
	// ErrPodChanged: during the move the pod was deleted, replaced by
	// a pod of the same name, or given another role label by someone
	// else; the move leaves it as it is.
	ErrPodChanged = errors.New("actuate: pod changed during the move")
	// ErrDrainTimeout: the engine still had resident work at DrainTimeout.
	ErrDrainTimeout = errors.New("actuate: drain timed out")
	// ErrSwitchEndpoint: the engine's role-switch endpoint refused.
	ErrSwitchEndpoint = errors.New("actuate: role-switch endpoint failed")
	// ErrClosed: the actuator was closed.
	ErrClosed = errors.New("actuate: closed")
	// ErrOwnerSelectsRole: a relabel was refused because an owner of the
	// pod selects on the role label.
	ErrOwnerSelectsRole = errors.New("actuate: owner selects on the role label")
	// ErrWrongWorkload: a scale move's pod is not the pool's source
	// workload's (or not its highest StatefulSet ordinal).
	ErrWrongWorkload = errors.New("actuate: pod is not the pool's source workload's")
	// ErrNotReady: after a scale, the target workload was not Ready in
	// time.
	ErrNotReady = errors.New("actuate: target workload not ready")
	// ErrNoSwitchURL: a switch_url pool's pod has no switch URL.
	ErrNoSwitchURL = errors.New("actuate: pod has no role-switch URL")
	// ErrInvalidConfig is returned (wrapped) by New.
	ErrInvalidConfig = errors.New("actuate: invalid config")
)

// Locator finds an engine's pod; *discover.Discoverer satisfies it.
type Locator interface {
	PodFor(engineID string) (discover.PodRef, bool)
}

// DrainCheck reports whether the engine holds no resident work.
type DrainCheck func(ctx context.Context, engineID string) (bool, error)

// DoneFunc receives the outcome of a move; (*core.Core).MoveDone fits.
type DoneFunc func(engineID string, nowNs int64, err error)

// ResidentDrained is a DrainCheck over an engine table such as
// (*core.Core).Engines: drained when the engine has no queued or running
// prefill and no resident decode sequences or KV tokens. An engine missing
// from the table counts as drained (it has nothing left to finish).
func ResidentDrained(engines func() []controller.Engine) DrainCheck {
	return func(_ context.Context, id string) (bool, error) {
		for _, e := range engines() {
			if e.ID == id {
				return e.Resident == (controller.Resident{}), nil
			}
		}
		return true, nil
	}
}

// Config sets the actuator's timing.
type Config struct {
	DrainTimeout         time.Duration `json:"drain_timeout" yaml:"drain_timeout"`
	DrainPoll            time.Duration `json:"drain_poll" yaml:"drain_poll"`
	SwitchTimeout        time.Duration `json:"switch_timeout" yaml:"switch_timeout"`
	SwitchOnDrainTimeout bool          `json:"switch_on_drain_timeout" yaml:"switch_on_drain_timeout"`
	// Roles is the role label (zero: the narwhal preset).
	Roles podmeta.Roles `json:"roles" yaml:"roles"`
	// Pools choose the move method per engine pod; none: relabel.
	Pools []Pool `json:"pools" yaml:"pools"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{DrainTimeout: 5 * time.Minute, DrainPoll: time.Second, SwitchTimeout: 10 * time.Second}
}

// Option configures an Actuator.
type Option func(*Actuator)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(a *Actuator) { a.logger = l } }

// WithHTTPClient sets the client used for role-switch endpoints.
func WithHTTPClient(c *http.Client) Option { return func(a *Actuator) { a.http = c } }

// WithClock sets the clock that stamps done's nowNs (Unix ns).
func WithClock(now func() int64) Option { return func(a *Actuator) { a.now = now } }

// Actuator implements controller.Actuator on pods.
type Actuator struct {
	client  kubernetes.Interface
	cfg     Config
	locate  Locator
	drained DrainCheck
	done    DoneFunc
	logger  *slog.Logger
	http    *http.Client
	now     func() int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	moving map[string]bool
	closed bool

	moves    *prometheus.CounterVec
	refusals *prometheus.CounterVec
	journal  journal
}

var _ controller.Actuator = (*Actuator)(nil)

// New returns an actuator. Every argument is required.
func New(client kubernetes.Interface, cfg Config, locate Locator, drained DrainCheck, done DoneFunc, opts ...Option) (*Actuator, error) {
	if client == nil || locate == nil || drained == nil || done == nil {
		return nil, fmt.Errorf("%w: client, locator, drain check and done callback are required", ErrInvalidConfig)
	}
	if cfg.DrainTimeout <= 0 || cfg.DrainPoll <= 0 || cfg.SwitchTimeout <= 0 {
		return nil, fmt.Errorf("%w: drain_timeout %v, drain_poll %v, switch_timeout %v must all be > 0",
			ErrInvalidConfig, cfg.DrainTimeout, cfg.DrainPoll, cfg.SwitchTimeout)
	}
	roles, err := cfg.Roles.Resolve()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Roles = roles
	cfg.Pools = append([]Pool(nil), cfg.Pools...)
	for i := range cfg.Pools {
		if err := cfg.Pools[i].validate(i); err != nil {
			return nil, err
		}
	}
	a := &Actuator{
		client: client, cfg: cfg, locate: locate, drained: drained, done: done,
		logger: slog.Default(), http: http.DefaultClient,
		now:    func() int64 { return time.Now().UnixNano() },
		moving: map[string]bool{},
	}
	for _, o := range opts {
		o(a)
	}
	a.logger = a.logger.With("component", "actuate")
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_k8s_moves_total",
		Help: "Role moves carried out on pods, by result (done, failed).",
	}, []string{"result"})
	a.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_k8s_move_refusals_total",
		Help: "Moves refused before touching the pod, by reason (owner_selects_role, wrong_workload, no_switch_url, role_mismatch).",
	}, []string{"reason"})
	for _, r := range []string{"owner_selects_role", "wrong_workload", "no_switch_url", "role_mismatch"} {
		a.refusals.WithLabelValues(r)
	}
	return a, nil
}

// Collectors returns the actuator's metrics.
func (a *Actuator) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.moves, a.refusals}
}

// Start validates m and begins the move in the background.
func (a *Actuator) Start(m controller.Move) error {
	if m.EngineID == "" || m.To == controller.RoleNone || m.From == m.To {
		return fmt.Errorf("%w: %+v", ErrInvalidMove, m)
	}
	ref, ok := a.locate.PodFor(m.EngineID)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownEngine, m.EngineID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if a.moving[m.EngineID] {
		return fmt.Errorf("%w: %q", ErrBusy, m.EngineID)
	}
	a.moving[m.EngineID] = true
	a.wg.Add(1)
	go a.run(m, ref)
	return nil
}

// InFlight reports how many moves are running.
func (a *Actuator) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.moving)
}

// Moving reports whether a move of the engine is in flight here.
func (a *Actuator) Moving(engineID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.moving[engineID]
}

// ClearDrainMark removes the narwhal.io/draining annotation from the pod
// ref names, provided it is still the pod with uid, still marked, and no
// move of engineID is in flight here; it reports whether it removed the
// mark. It is for marks an earlier leader left behind (it died, or could
// not reach the API server, in the middle of a move).
func (a *Actuator) ClearDrainMark(ctx context.Context, ref discover.PodRef, uid types.UID, engineID string) (bool, error) {
	if a.Moving(engineID) {
		return false, nil
	}
	ann := "/metadata/annotations/" + jsonPointerEscape(podmeta.AnnotationDraining)
	ops := append(sameUID(uid), patchOp{"test", ann, "true"}, patchOp{Op: "remove", Path: ann})
	err := a.jsonPatch(ctx, ref, ops)
	return err == nil, err
}

// SwitchToLabel asks the engine of pod, when the pod carries a
// role-switch URL, to hold the role its label says (the reverse of the
// move a stale draining mark belongs to: its leader may have died after
// the engine switched and before the relabel). A pod without a URL, or
// whose engine is moving here, needs no call.
func (a *Actuator) SwitchToLabel(ctx context.Context, pod *corev1.Pod) error {
	url := pod.Annotations[podmeta.AnnotationRoleSwitchURL]
	if url == "" || a.Moving(podmeta.EngineID(pod)) {
		return nil
	}
	role, err := podmeta.RoleWith(a.cfg.Roles, pod)
	if err != nil {
		return fmt.Errorf("actuate: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	other := controller.RolePrefill
	if role == controller.RolePrefill {
		other = controller.RoleDecode
	}
	return a.callSwitch(ctx, url, controller.Move{EngineID: podmeta.EngineID(pod), From: other, To: role})
}

// Close cancels moves in flight and waits for them to report.
func (a *Actuator) Close() error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
	return nil
}

func (a *Actuator) run(m controller.Move, ref discover.PodRef) {
	defer a.wg.Done()
	startNs := a.now()
	method, err := a.move(a.ctx, m, ref)
	a.mu.Lock()
	delete(a.moving, m.EngineID)
	a.mu.Unlock()
	log := a.logger.With("engine", m.EngineID, "pod", ref.Namespace+"/"+ref.Name,
		"from", m.From.String(), "to", m.To.String(), "decision_seq", m.DecisionSeq)
	rec := MoveRecord{EngineID: m.EngineID, Pod: ref.Namespace + "/" + ref.Name, From: m.From.String(), To: m.To.String(),
		Method: string(method), DecisionSeq: m.DecisionSeq, StartNs: startNs, Result: "done"}
	if reason := refusalReason(err); reason != "" {
		a.refusals.WithLabelValues(reason).Inc()
		rec.Result = "refused"
	}
	if err != nil {
		if rec.Result == "done" {
			rec.Result = "failed"
		}
		rec.Error = err.Error()
		a.moves.WithLabelValues("failed").Inc()
		log.Warn("move "+rec.Result, "method", method, "err", err)
		a.event(ref, corev1.EventTypeWarning, "NarwhalMove"+strings.ToUpper(rec.Result[:1])+rec.Result[1:],
			fmt.Sprintf("%s -> %s (%s, decision %d): %v", m.From, m.To, method, m.DecisionSeq, err))
	} else {
		a.moves.WithLabelValues("done").Inc()
		log.Info("move done", "method", method)
		a.event(ref, corev1.EventTypeNormal, "NarwhalMoveDone",
			fmt.Sprintf("%s -> %s (%s, decision %d)", m.From, m.To, method, m.DecisionSeq))
	}
	now := a.now()
	rec.EndNs = now
	a.journal.add(rec)
	a.done(m.EngineID, now, err)
}

// move performs the steps in the package doc and returns the method used.
func (a *Actuator) move(ctx context.Context, m controller.Move, ref discover.PodRef) (Method, error) {
	pods := a.client.CoreV1().Pods(ref.Namespace)
	pod, err := pods.Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return MethodRelabel, a.wrapCtx(fmt.Errorf("actuate: get pod %s/%s: %w", ref.Namespace, ref.Name, err))
	}
	method := MethodRelabel
	pool := a.poolFor(pod)
	if pool != nil {
		method = pool.Method
	}
	key := a.cfg.Roles.Key
	if got := pod.Labels[key]; got != a.cfg.Roles.Value(m.From) {
		return method, fmt.Errorf("%w: pod %s/%s has %s=%q, move is from %q",
			ErrRoleMismatch, ref.Namespace, ref.Name, key, got, a.cfg.Roles.Value(m.From))
	}
	if method == MethodScale {
		return method, a.scaleMove(ctx, m, ref, pod, pool)
	}
	url := pod.Annotations[podmeta.AnnotationRoleSwitchURL]
	if method == MethodSwitchURL && url == "" {
		return method, fmt.Errorf("%w: pod %s/%s in pool %q (method switch_url) has no %s annotation",
			ErrNoSwitchURL, ref.Namespace, ref.Name, pool.Name, podmeta.AnnotationRoleSwitchURL)
	}
	if err := a.ownerSelectsRole(ctx, pod); err != nil {
		return method, a.wrapCtx(err)
	}
	if err := a.patch(ctx, ref, nil, map[string]any{podmeta.AnnotationDraining: "true"}); err != nil {
		return method, a.wrapCtx(fmt.Errorf("actuate: mark draining: %w", err))
	}
	fail := func(err error) error {
		// Undo the drain mark even when ctx is cancelled: the engine
		// keeps its role and must take work again.
		uctx, cancel := context.WithTimeout(context.Background(), a.cfg.SwitchTimeout)
		defer cancel()
		if uerr := a.patch(uctx, ref, nil, map[string]any{podmeta.AnnotationDraining: nil}); uerr != nil {
			a.logger.Error("could not clear draining annotation", "pod", ref.Namespace+"/"+ref.Name, "err", uerr)
		}
		return a.wrapCtx(err)
	}
	if err := a.waitDrained(ctx, m.EngineID); err != nil {
		if !errors.Is(err, ErrDrainTimeout) || !a.cfg.SwitchOnDrainTimeout {
			return method, fail(err)
		}
		a.logger.Warn("drain timed out; switching anyway", "engine", m.EngineID)
	}
	if url != "" {
		if err := a.callSwitch(ctx, url, m); err != nil {
			if !errors.Is(err, errSwitchAnswered) {
				// No answer (a timeout, a reset connection): the engine
				// may have switched, and the label stays at m.From.
				a.switchBack(url, m)
			}
			return method, fail(err)
		}
	}
	if err := a.relabel(ctx, ref, pod.UID, m); err != nil {
		if url != "" && !errors.Is(err, ErrPodChanged) {
			// The engine switched but its label says m.From: routers
			// would send it the other role's work. (A pod changed by
			// someone else is left to what its label now says.)
			a.switchBack(url, m)
		}
		return method, fail(fmt.Errorf("actuate: patch role label: %w", err))
	}
	return method, nil
}

// switchBack asks the engine to take m.From again after a move that will
// not relabel its pod, even when the move's context has ended; a failure
// is logged (the engine's role is then unknown until an operator looks).
func (a *Actuator) switchBack(url string, m controller.Move) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.SwitchTimeout)
	defer cancel()
	back := controller.Move{EngineID: m.EngineID, From: m.To, To: m.From, DecisionSeq: m.DecisionSeq}
	if err := a.callSwitch(ctx, url, back); err != nil {
		a.logger.Error("engine may hold the other role than its pod label says: switching it back failed",
			"engine", m.EngineID, "label", m.From.String(), "err", err)
		return
	}
	a.logger.Warn("move abandoned after the engine's switch: switched it back", "engine", m.EngineID, "role", m.From.String())
}

// relabel sets the role label to m.To and removes the draining mark in
// one JSON patch that applies only while the pod is the one the move
// drained (its UID) and still carries m.From: a pod deleted, recreated
// under the same name, or relabelled by someone else during the drain is
// left as it is (ErrPodChanged).
func (a *Actuator) relabel(ctx context.Context, ref discover.PodRef, uid types.UID, m controller.Move) error {
	key := a.cfg.Roles.Key
	from, to := a.cfg.Roles.Value(m.From), a.cfg.Roles.Value(m.To)
	pods := a.client.CoreV1().Pods(ref.Namespace)
	var err error
	for try := 0; try < 3; try++ {
		var pod *corev1.Pod
		if err = retryTransient(ctx, func() (gerr error) {
			pod, gerr = pods.Get(ctx, ref.Name, metav1.GetOptions{})
			return gerr
		}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: pod %s/%s was deleted", ErrPodChanged, ref.Namespace, ref.Name)
			}
			return err
		}
		switch {
		case pod.UID != uid:
			return fmt.Errorf("%w: pod %s/%s was replaced (uid %s, drained %s)", ErrPodChanged, ref.Namespace, ref.Name, pod.UID, uid)
		case pod.Labels[key] != from:
			return fmt.Errorf("%w: pod %s/%s now has %s=%q, move is from %q", ErrPodChanged, ref.Namespace, ref.Name, key, pod.Labels[key], from)
		}
		label := "/metadata/labels/" + jsonPointerEscape(key)
		ops := append(sameUID(uid), patchOp{"test", label, from}, patchOp{"replace", label, to})
		if v, ok := pod.Annotations[podmeta.AnnotationDraining]; ok {
			ann := "/metadata/annotations/" + jsonPointerEscape(podmeta.AnnotationDraining)
			ops = append(ops, patchOp{"test", ann, v}, patchOp{Op: "remove", Path: ann})
		}
		if err = a.jsonPatch(ctx, ref, ops); err == nil || ctx.Err() != nil {
			return err
		}
		// A failed test (422 from the API server) means the pod changed
		// between the read and the patch: read it again. Anything else
		// the server said is final.
		if !apierrors.IsInvalid(err) && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return err
}

// patchOp is one JSON patch (RFC 6902) operation. Value is an interface:
// omitempty drops only a nil one, so a test of "" keeps its value.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// sameUID is the test that the pod is still the one with uid (none when
// uid is empty; every pod an API server stores has one).
func sameUID(uid types.UID) []patchOp {
	if uid == "" {
		return nil
	}
	return []patchOp{{"test", "/metadata/uid", string(uid)}}
}

// jsonPatch applies ops to the pod ref names, retried on transient API
// errors; a failed test comes back as Invalid (422).
func (a *Actuator) jsonPatch(ctx context.Context, ref discover.PodRef, ops []patchOp) error {
	body, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("BUG: encode patch: %w", err)
	}
	return retryTransient(ctx, func() error {
		_, err := a.client.CoreV1().Pods(ref.Namespace).Patch(ctx, ref.Name, types.JSONPatchType, body, metav1.PatchOptions{})
		return err
	})
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// wrapCtx reports a cancellation caused by Close as ErrClosed.
func (a *Actuator) wrapCtx(err error) error {
	if a.ctx.Err() != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

func (a *Actuator) waitDrained(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(a.cfg.DrainPoll)
	defer tick.Stop()
	for {
		ok, err := a.drained(ctx, id)
		if err != nil {
			a.logger.Warn("drain check failed; retrying", "engine", id, "err", err)
		} else if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if a.ctx.Err() != nil {
				return fmt.Errorf("actuate: drain of %q: %w", id, ErrClosed)
			}
			return fmt.Errorf("%w: engine %q after %v", ErrDrainTimeout, id, a.cfg.DrainTimeout)
		case <-tick.C:
		}
	}
}

func (a *Actuator) callSwitch(ctx context.Context, url string, m controller.Move) error {
	body, err := json.Marshal(struct {
		Role string `json:"role"`
		From string `json:"from"`
	}{m.To.String(), m.From.String()})
	if err != nil {
		return fmt.Errorf("BUG: encode switch body: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.SwitchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSwitchEndpoint, url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSwitchEndpoint, url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: %s: %w %d", ErrSwitchEndpoint, url, errSwitchAnswered, resp.StatusCode)
	}
	return nil
}

// errSwitchAnswered marks a switch call the engine answered with a
// refusal (it did not switch), unlike one that got no answer.
var errSwitchAnswered = errors.New("refused with status")

// patch applies a JSON merge patch to the pod's labels and annotations; a
// nil value removes the key.
func (a *Actuator) patch(ctx context.Context, ref discover.PodRef, labels, annotations map[string]any) error {
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("BUG: encode patch: %w", err)
	}
	return retryTransient(ctx, func() error {
		_, err := a.client.CoreV1().Pods(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
}

// patchAttempts bounds the tries of one pod write on transient API
// errors; the waits between them double from patchBackoff (about 1.5 s in
// all), and ctx ends them sooner.
const (
	patchAttempts = 6
	patchBackoff  = 50 * time.Millisecond
)

// retryTransient runs fn until it succeeds, fails with an error that is
// not transient (see transient), patchAttempts have been made or ctx
// ends, and returns fn's last error.
func retryTransient(ctx context.Context, fn func() error) error {
	wait := patchBackoff
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i == patchAttempts || !transient(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
}

// transient reports whether an API error may pass on its own: the server
// overloaded, timing out or failing internally, or a write conflict.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		apierrors.IsUnexpectedServerError(err) || apierrors.IsConflict(err)
}
