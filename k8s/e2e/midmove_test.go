package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/kubetest"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

// The leader dies in the middle of a move, at the two worst moments:
// after the draining mark and before the relabel, and after the relabel
// before its controller learns the move is done (and before the state
// it saves after the decision lands). A second replica takes over; the
// tests then read back the pods, the new leader's engine and role
// tables, the saved state and the fake engines' own roles, and require
// them to agree.

// Timing of these tests: short enough for a run of about 25 s, long
// enough that the new leader's first move comes after the failover and
// after any stale draining mark has been swept.
const (
	midDrainS, midSwitchS           = 2.0, 2.0
	midLeaseS, midRenewS, midRetryS = 2.0, 1.5, 0.25
	midCooldownS                    = 18
	midStateCM, midStateKey         = "narwhal-core-state", "controller-state.json"
)

// midStaleAfter is cluster's stale-drain delay under this timing.
func midStaleAfter() time.Duration {
	return time.Duration((midDrainS + 2*midSwitchS + midLeaseS + midRenewS) * float64(time.Second))
}

var errCrashed = errors.New("e2e: replica crashed")

// crashable is one replica's transport to the API server. crash cuts it:
// every request from then on fails, as from a process that died (the
// replica can no longer renew, save, undo a drain or record an event).
// While holdStateWrites is set, its ConfigMap writes wait until the
// crash and then fail: a state save that never lands.
type crashable struct {
	rt              http.RoundTripper
	dead            chan struct{}
	once            sync.Once
	holdStateWrites atomic.Bool
}

func (c *crashable) crash() { c.once.Do(func() { close(c.dead) }) }

func (c *crashable) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-c.dead:
		return nil, errCrashed
	default:
	}
	if c.holdStateWrites.Load() && r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/configmaps") {
		select {
		case <-c.dead:
		case <-r.Context().Done():
		}
		return nil, errCrashed
	}
	return c.rt.RoundTrip(r)
}

// hookCore is ctlCore with two test hooks: afterStep runs on the
// leader's step goroutine after each step (before the cluster saves the
// state), moveDone sees every move outcome and drops it when it returns
// false (the controller never learns it).
type hookCore struct {
	ctlCore
	afterStep func(controller.Decision)
	moveDone  func(id string, err error) bool
}

func (h hookCore) Step(nowNs int64) controller.Decision {
	d := h.ctlCore.Step(nowNs)
	if h.afterStep != nil {
		h.afterStep(d)
	}
	return d
}

func (h hookCore) MoveDone(id string, nowNs int64, err error) {
	if h.moveDone != nil && !h.moveDone(id, err) {
		return
	}
	h.ctlCore.MoveDone(id, nowNs, err)
}

type midHooks struct {
	afterStep func(r *midReplica, d controller.Decision)
	moveDone  func(r *midReplica, id string, err error) bool
}

type midReplica struct {
	name   string
	k      *cluster.Cluster
	ctl    *controller.Controller
	net    *crashable
	cancel context.CancelFunc
	done   chan error
}

// startMid starts a replica with its own crashable connection. The
// controller confirms a move over 3 steps (so a leader saves states
// before its first move) and waits midCooldownS between moves.
func startMid(t *testing.T, s *kubetest.Server, ns, name string, h midHooks) *midReplica {
	t.Helper()
	net := &crashable{dead: make(chan struct{})}
	rc := s.Config()
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { net.rt = rt; return net })
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.Namespace, cfg.PodName, cfg.EngineNamespace = ns, name, ns
	cfg.LeaseName, cfg.StateConfigMap, cfg.StateKey = "narwhal-core-leader", midStateCM, midStateKey
	cfg.LeaseDurationS, cfg.RenewDeadlineS, cfg.RetryPeriodS = midLeaseS, midRenewS, midRetryS
	cfg.DrainTimeoutS, cfg.DrainPollS, cfg.SwitchTimeoutS = midDrainS, 0.02, midSwitchS
	k, err := cluster.New(client, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := controller.DefaultConfig()
	ccfg.ConfirmSteps, ccfg.CooldownS, ccfg.DwellS, ccfg.MaxMovesPerStep = 3, midCooldownS, 0, 1
	tm := controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1, TPOTSLOS: 0.1}
	c, err := controller.New(ccfg, tm, nil, controller.WithLogger(quiet), controller.WithActuator(k.Actuator()))
	if err != nil {
		t.Fatal(err)
	}
	r := &midReplica{name: name, k: k, ctl: c, net: net, done: make(chan error, 1)}
	hc := hookCore{ctlCore: ctlCore{c}}
	if h.afterStep != nil {
		hc.afterStep = func(d controller.Decision) { h.afterStep(r, d) }
	}
	if h.moveDone != nil {
		hc.moveDone = func(id string, err error) bool { return h.moveDone(r, id, err) }
	}
	if err := k.Bind(hc, c, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- k.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the replica as the failover test does: its context ends,
// the Lease is not released (it expires). The actuator aborts a move in
// flight and removes its draining mark.
func (r *midReplica) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("replica %s: %v", r.name, err)
		}
		r.done <- nil
	case <-time.After(20 * time.Second):
		t.Errorf("replica %s did not stop", r.name)
	}
}

// crash kills the replica: its API connection is cut first, so nothing
// it would still do on the way out reaches the API server.
func (r *midReplica) crash(t *testing.T) {
	r.net.crash()
	r.stop(t)
}

func (r *midReplica) moveDecisions() []controller.Decision {
	var out []controller.Decision
	for _, d := range r.ctl.Decisions(0, 1<<20) {
		if len(d.Moves) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// soleLeader is the one replica of rs that leads, failing the test
// unless exactly one does (when says at which point).
func soleLeader(t *testing.T, rs []*midReplica, when string) *midReplica {
	t.Helper()
	var out []*midReplica
	for _, r := range rs {
		if r.k.IsLeader() {
			out = append(out, r)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d leaders %s", len(out), when)
	}
	return out[0]
}

// fakeEngines serves the engines' role-switch endpoints
// (/switch/<pod>) and keeps the role each engine serves: it switches on
// a request whose "from" is its role, and answers 2xx only then. With
// blockFirst the first request blocks until its caller goes away (the
// engine never answers, and never switches); its pod is sent on first.
type fakeEngines struct {
	srv        *httptest.Server
	blockFirst bool
	first      chan string

	mu    sync.Mutex
	role  map[string]string
	calls int
}

func newFakeEngines(t *testing.T, blockFirst bool) *fakeEngines {
	f := &fakeEngines{blockFirst: blockFirst, first: make(chan string, 1), role: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngines) serve(w http.ResponseWriter, r *http.Request) {
	pod := strings.TrimPrefix(r.URL.Path, "/switch/")
	var body struct{ Role, From string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls++
	block := f.blockFirst && f.calls == 1
	f.mu.Unlock()
	if block {
		f.first <- pod
		<-r.Context().Done()
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.role[pod] != body.From {
		http.Error(w, fmt.Sprintf("engine serves %q, not %q", f.role[pod], body.From), http.StatusConflict)
		return
	}
	f.role[pod] = body.Role
}

func (f *fakeEngines) roleOf(pod string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.role[pod]
}

// midPods creates four prefill engines, one decode engine (each with a
// switch URL on f) and the two replicas' pods.
func midPods(t *testing.T, c kubernetes.Interface, ns string, f *fakeEngines) {
	t.Helper()
	var pods []*corev1.Pod
	for i, name := range []string{"p0", "p1", "p2", "p3", "d0"} {
		role := "prefill"
		if name == "d0" {
			role = "decode"
		}
		f.mu.Lock()
		f.role[name] = role
		f.mu.Unlock()
		pods = append(pods, enginePod(name, fmt.Sprintf("n%d", i),
			map[string]string{podmeta.LabelRole: role, podmeta.LabelGPU: "A100-80GB"},
			map[string]string{podmeta.AnnotationModel: "facebook/opt-13b", podmeta.AnnotationRoleSwitchURL: f.srv.URL + "/switch/" + name}))
	}
	pods = append(pods, enginePod("core-0", "n8", nil, nil), enginePod("core-1", "n9", nil, nil))
	createRunning(t, c, ns, pods...)
}

// podHistory records, from a watch opened before the pods exist, every
// state of every engine pod's role label and draining mark.
type podHistory struct {
	mu     sync.Mutex
	states map[string][]podState
	ended  bool
}

type podState struct {
	role     string
	draining bool
}

func watchPods(t *testing.T, c kubernetes.Interface, ns string) *podHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: podmeta.LabelRole})
	if err != nil {
		t.Fatal(err)
	}
	h := &podHistory{states: map[string][]podState{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			st := podState{role: p.Labels[podmeta.LabelRole], draining: podmeta.Draining(p)}
			h.mu.Lock()
			if s := h.states[p.Name]; len(s) == 0 || s[len(s)-1] != st {
				h.states[p.Name] = append(s, st)
			}
			h.mu.Unlock()
		}
		h.mu.Lock()
		h.ended = ctx.Err() == nil
		h.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return h
}

// counts returns, per pod, how often its role label changed and how
// often it was marked draining.
func (h *podHistory) counts(t *testing.T) (roleChanges, drains map[string]int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		t.Fatal("the pod watch ended early: the history is incomplete")
	}
	roleChanges, drains = map[string]int{}, map[string]int{}
	for pod, s := range h.states {
		for i, st := range s {
			if i > 0 && st.role != s[i-1].role {
				roleChanges[pod]++
			}
			if st.draining && (i == 0 || !s[i-1].draining) {
				drains[pod]++
			}
		}
	}
	return roleChanges, drains
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

var decisionRe = regexp.MustCompile(`decision (\d+)\)`)

// movesDone maps each decision sequence named by a NarwhalMoveDone event
// to the pods it names.
func movesDone(t *testing.T, c kubernetes.Interface, ns string) map[uint64][]string {
	t.Helper()
	evs, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=NarwhalMoveDone"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64][]string{}
	for _, e := range evs.Items {
		m := decisionRe.FindStringSubmatch(e.Message)
		if m == nil {
			t.Fatalf("NarwhalMoveDone event without a decision: %q", e.Message)
		}
		seq, _ := strconv.ParseUint(m[1], 10, 64)
		out[seq] = append(out[seq], e.InvolvedObject.Name)
	}
	return out
}

func savedState(c kubernetes.Interface, ns string) (controller.PersistedState, error) {
	var st controller.PersistedState
	cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), midStateCM, metav1.GetOptions{})
	if err != nil {
		return st, err
	}
	err = json.Unmarshal([]byte(cm.Data[midStateKey]), &st)
	return st, err
}

// disagreements lists every way in which the engine pods (role label,
// draining mark), the leader's engine table and role table, its saved
// state and the engines' own roles fail to agree that every engine
// serves, live, in its pod's role.
func disagreements(c kubernetes.Interface, ns string, lead *midReplica, f *fakeEngines) []string {
	ctx := context.Background()
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podmeta.LabelRole})
	if err != nil {
		return []string{err.Error()}
	}
	st, err := savedState(c, ns)
	if err != nil {
		return []string{"saved state: " + err.Error()}
	}
	saved := map[string]string{}
	for _, e := range st.Engines {
		saved[e.ID] = e.Role.String()
	}
	engines := map[string]controller.Engine{}
	for _, e := range lead.ctl.Engines() {
		engines[e.ID] = e
	}
	table := lead.ctl.Roles()
	var out []string
	for _, p := range pods.Items {
		id, label := podmeta.EngineID(&p), p.Labels[podmeta.LabelRole]
		e, ok := engines[id]
		switch {
		case podmeta.Draining(&p):
			out = append(out, id+": pod still marked draining")
		case !ok:
			out = append(out, id+": not in the leader's engine table")
		case e.Role.String() != label || e.State != controller.StateServing || !e.Live:
			out = append(out, fmt.Sprintf("%s: leader's engine row %s/%s live=%v, pod label %s", id, e.Role, e.State, e.Live, label))
		}
		if r := table.RoleOf(id).String(); r != label {
			out = append(out, fmt.Sprintf("%s: leader's role table %s, pod label %s", id, r, label))
		}
		if saved[id] != label {
			out = append(out, fmt.Sprintf("%s: saved state %q, pod label %s", id, saved[id], label))
		}
		if r := f.roleOf(p.Name); r != label {
			out = append(out, fmt.Sprintf("%s: engine serves %s, pod label %s", id, r, label))
		}
	}
	if len(st.Engines) != len(pods.Items) {
		out = append(out, fmt.Sprintf("saved state has %d engines, %d pods", len(st.Engines), len(pods.Items)))
	}
	sort.Strings(out)
	return out
}

// waitAgree waits up to limit for disagreements to be empty and returns
// how long that took.
func waitAgree(t *testing.T, limit time.Duration, what string, c kubernetes.Interface, ns string, lead *midReplica, f *fakeEngines) time.Duration {
	t.Helper()
	t0 := time.Now()
	var last []string
	for {
		if last = disagreements(c, ns, lead, f); len(last) == 0 {
			return time.Since(t0)
		}
		if time.Since(t0) > limit {
			t.Fatalf("%s: no agreement after %v:\n  %s", what, limit, strings.Join(last, "\n  "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// takeOver waits for the other replica to lead after first died.
func takeOver(t *testing.T, rs []*midReplica, first *midReplica) *midReplica {
	t.Helper()
	var second *midReplica
	for _, r := range rs {
		if r != first {
			second = r
		}
	}
	testwait.For(t, 5*midLeaseS*time.Second, "the second replica to lead", second.k.IsLeader)
	return second
}

// newLeaderMoves waits for the new leader's first move after the
// restored cooldown, checks it, and checks the agreement once it is done.
func newLeaderMoves(t *testing.T, c kubernetes.Interface, ns string, second *midReplica, f *fakeEngines, d1 controller.Decision) controller.Decision {
	t.Helper()
	testwait.For(t, (midCooldownS+10)*time.Second, "the new leader's first move", func() bool { return len(second.moveDecisions()) > 0 })
	ds := second.moveDecisions()
	d2 := ds[0]
	if len(ds) != 1 || len(d2.Moves) != 1 || d2.Seq <= d1.Seq {
		t.Fatalf("new leader's moves %+v; want one decision moving one engine after decision %d", ds, d1.Seq)
	}
	if gap := time.Duration(d2.AtNs - d1.AtNs); gap < midCooldownS*time.Second {
		t.Fatalf("new leader moved %v after the dead leader's decision %d; the cooldown is %ds", gap, d1.Seq, midCooldownS)
	}
	waitAgree(t, 10*time.Second, "after the new leader's move", c, ns, second, f)
	st, err := savedState(c, ns)
	if err != nil || st.Seq < d2.Seq {
		t.Fatalf("saved state seq %d, %v; want >= %d", st.Seq, err, d2.Seq)
	}
	return d2
}

// leaderDiesWhileDraining: the leader decides a prefill->decode move,
// marks the pod draining and calls its switch URL, which never answers;
// then the leader crashes (crash) or is stopped without releasing the
// Lease (its actuator aborts the move and removes the mark). The second
// replica leads after the Lease expires. Within a bound (the stale-drain
// delay after a crash, a Lease duration after a stop) the mark is gone
// and pods, the new leader's engine and role tables, its saved state and
// the engines agree: the engine serves, live, in its old role. No role
// label changed for the dead leader's decision; the new leader's first
// move comes after the restored cooldown, moves one engine once, and
// everything agrees again.
func leaderDiesWhileDraining(t *testing.T, crash bool) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	f := newFakeEngines(t, true)
	hist := watchPods(t, c, ns)
	midPods(t, c, ns, f)
	rs := []*midReplica{startMid(t, s, ns, "core-0", midHooks{}), startMid(t, s, ns, "core-1", midHooks{})}

	var moving string
	select {
	case moving = <-f.first:
	case <-time.After(30 * time.Second):
		t.Fatal("no switch call within 30 s")
	}
	first := soleLeader(t, rs, "at the switch call")
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), moving, metav1.GetOptions{})
	if err != nil || !podmeta.Draining(p) || p.Labels[podmeta.LabelRole] != "prefill" {
		t.Fatalf("at the switch call pod %s is %v %v, %v; want prefill and draining", moving, p.Labels, p.Annotations, err)
	}
	ds := first.moveDecisions()
	if len(ds) != 1 || ds[0].Moves[0].EngineID != moving || ds[0].Moves[0].To != controller.RoleDecode {
		t.Fatalf("first leader's moves %+v; want one decision moving %s to decode", ds, moving)
	}
	d1 := ds[0]

	killed := time.Now()
	if crash {
		first.crash(t)
	} else {
		first.stop(t)
	}
	second := takeOver(t, rs, first)
	t.Logf("%s died while %s drained (decision %d); %s leads after %v", first.name, moving, d1.Seq, second.name, time.Since(killed).Round(time.Millisecond))

	limit := midLeaseS*time.Second + 5*time.Second
	if crash {
		// Until the new leader sweeps the mark, the engine takes no work,
		// but everything already agrees on its role: the pod's.
		testwait.For(t, 3*time.Second, "the new leader's row and saved state of "+moving+" in the pod's role", func() bool {
			st, err := savedState(c, ns)
			if err != nil || st.Seq <= d1.Seq {
				return false
			}
			for _, e := range st.Engines {
				if e.ID == moving && e.Role != controller.RolePrefill {
					return false
				}
			}
			e := engineRow(second, moving)
			return e.Role == controller.RolePrefill && !e.Live && second.ctl.Roles().RoleOf(moving) == controller.RoleNone
		})
		if p, err := c.CoreV1().Pods(ns).Get(context.Background(), moving, metav1.GetOptions{}); err != nil || !podmeta.Draining(p) {
			t.Fatalf("pod %s lost its draining mark before the stale-drain delay (%v): %v, %v", moving, midStaleAfter(), p.Annotations, err)
		}
		limit = midStaleAfter() + 5*time.Second // the mark stays until the sweep
	}
	took := waitAgree(t, limit, "after the failover", c, ns, second, f)
	t.Logf("pods, leader tables, saved state and engines agree %v after the takeover", took.Round(time.Millisecond))
	if p, _ := c.CoreV1().Pods(ns).Get(context.Background(), moving, metav1.GetOptions{}); p.Labels[podmeta.LabelRole] != "prefill" {
		t.Fatalf("pod %s role %q after the failover; want prefill (the move never finished)", moving, p.Labels[podmeta.LabelRole])
	}
	if roles, drains := hist.counts(t); sum(roles) != 0 || drains[moving] != 1 || sum(drains) != 1 {
		t.Fatalf("before the new leader's move: role changes %v, drains %v; want none, and one drain of %s", roles, drains, moving)
	}

	d2 := newLeaderMoves(t, c, ns, second, f, d1)
	moved := d2.Moves[0].EngineID
	roles, drains := hist.counts(t)
	if sum(roles) != 1 || roles[moved] != 1 || sum(drains) != 2 {
		t.Fatalf("role changes %v, drains %v; want one role change (%s, decision %d) and two drains", roles, drains, moved, d2.Seq)
	}
	if done := movesDone(t, c, ns); len(done) != 1 || len(done[d2.Seq]) != 1 || done[d2.Seq][0] != moved {
		t.Fatalf("NarwhalMoveDone events by decision %v; want only decision %d on %s", done, d2.Seq, moved)
	}
}

func engineRow(r *midReplica, id string) controller.Engine {
	for _, e := range r.ctl.Engines() {
		if e.ID == id {
			return e
		}
	}
	return controller.Engine{}
}

// TestLeaderCrashesWhileDraining: see leaderDiesWhileDraining; the
// leader's process dies (its API connection is cut), so the draining
// mark stays until the new leader sweeps it.
func TestLeaderCrashesWhileDraining(t *testing.T) { leaderDiesWhileDraining(t, true) }

// TestLeaderStopsWhileDraining: see leaderDiesWhileDraining; the leader
// is stopped as TestLeaderFailoverAcrossThreeCores stops it (Lease not
// released), so its actuator removes the mark on the way out.
func TestLeaderStopsWhileDraining(t *testing.T) { leaderDiesWhileDraining(t, false) }

// TestLeaderDiesAfterRelabel: the leader decides a prefill->decode move
// (after two steps that saved states confirming it); the cluster's
// state save after that step never lands (held, then failed); the
// relabel patch lands, and the leader dies before its controller learns
// the move is done. The state it left must record the move, so the
// second replica restores the engine in its new role and the cooldown:
// pods, engine and role tables, saved state and engines agree within a
// Lease duration, the engine serves, live, as decode; its role changed
// once; the new leader's first move comes after the cooldown, under a
// new decision sequence, and moves one engine once.
func TestLeaderDiesAfterRelabel(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	f := newFakeEngines(t, false)
	hist := watchPods(t, c, ns)
	midPods(t, c, ns, f)

	var decided, reported atomic.Bool
	relabelled := make(chan string, 1)
	hooks := midHooks{
		afterStep: func(r *midReplica, d controller.Decision) {
			if len(d.Moves) > 0 && decided.CompareAndSwap(false, true) {
				r.net.holdStateWrites.Store(true) // the save after this step
			}
		},
		moveDone: func(r *midReplica, id string, err error) bool {
			if !reported.CompareAndSwap(false, true) {
				return true
			}
			if err != nil {
				t.Errorf("first move failed: %v", err)
			}
			relabelled <- id
			<-r.net.dead
			return false
		},
	}
	rs := []*midReplica{startMid(t, s, ns, "core-0", hooks), startMid(t, s, ns, "core-1", hooks)}
	t.Cleanup(func() { // on a failure before the crash: release the held hook
		for _, r := range rs {
			r.net.crash()
		}
	})

	var moved string
	select {
	case moved = <-relabelled:
	case <-time.After(30 * time.Second):
		t.Fatal("no move done within 30 s")
	}
	first := soleLeader(t, rs, "after the relabel")
	ds := first.moveDecisions()
	if len(ds) != 1 || ds[0].Moves[0].EngineID != moved || ds[0].Moves[0].To != controller.RoleDecode {
		t.Fatalf("first leader's moves %+v; want one decision moving %s to decode", ds, moved)
	}
	d1 := ds[0]
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), moved, metav1.GetOptions{})
	if err != nil || podmeta.Draining(p) || p.Labels[podmeta.LabelRole] != "decode" {
		t.Fatalf("after the relabel pod %s is %v %v, %v; want decode, not draining", moved, p.Labels, p.Annotations, err)
	}
	if e := engineRow(first, moved); e.State == controller.StateServing {
		t.Fatalf("first leader's row of %s is %+v; want it still moving (MoveDone not delivered)", moved, e)
	}

	killed := time.Now()
	first.crash(t)
	st, err := savedState(c, ns)
	if err != nil {
		t.Fatalf("the dead leader left no state: %v", err)
	}
	savedRole := controller.RoleNone
	for _, e := range st.Engines {
		if e.ID == moved {
			savedRole = e.Role
		}
	}
	if st.Seq < d1.Seq || st.LastMoveNs != d1.AtNs || savedRole != controller.RoleDecode {
		t.Fatalf("the dead leader's saved state is at seq %d, last move %d, %s %v; want decision %d (at %d) recorded before its move, %s decode",
			st.Seq, st.LastMoveNs, moved, savedRole, d1.Seq, d1.AtNs, moved)
	}
	second := takeOver(t, rs, first)
	t.Logf("%s died after relabelling %s (decision %d); %s leads after %v", first.name, moved, d1.Seq, second.name, time.Since(killed).Round(time.Millisecond))

	took := waitAgree(t, midLeaseS*time.Second+5*time.Second, "after the failover", c, ns, second, f)
	t.Logf("pods, leader tables, saved state and engines agree %v after the takeover", took.Round(time.Millisecond))
	if roles, drains := hist.counts(t); sum(roles) != 1 || roles[moved] != 1 || sum(drains) != 1 {
		t.Fatalf("before the new leader's move: role changes %v, drains %v; want one each, of %s", roles, drains, moved)
	}

	d2 := newLeaderMoves(t, c, ns, second, f, d1)
	moved2 := d2.Moves[0].EngineID
	roles, drains := hist.counts(t)
	if sum(roles) != 2 || roles[moved] != 1 || roles[moved2] != 1 || sum(drains) != 2 {
		t.Fatalf("role changes %v, drains %v; want one each of %s (decision %d) and %s (decision %d)", roles, drains, moved, d1.Seq, moved2, d2.Seq)
	}
	done := movesDone(t, c, ns)
	if len(done) != 2 || len(done[d1.Seq]) != 1 || done[d1.Seq][0] != moved || len(done[d2.Seq]) != 1 || done[d2.Seq][0] != moved2 {
		t.Fatalf("NarwhalMoveDone events by decision %v; want decision %d on %s and %d on %s", done, d1.Seq, moved, d2.Seq, moved2)
	}
}
