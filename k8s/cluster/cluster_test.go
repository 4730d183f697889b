package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/actuate"
	"github.com/narwhal-io/narwhal/k8s/clusterconfig"
	"github.com/narwhal-io/narwhal/k8s/leader"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
	"github.com/narwhal-io/narwhal/k8s/statestore"
)

type noDemand struct{}

func (noDemand) Window(_, _ int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	return dst, buckets.Window{}
}
func (noDemand) Evidence(int64, int64) buckets.Evidence { return buckets.Evidence{} }

// ctlCore is a core reduced to its controller, fed decode-starved inputs
// (TPOT 3× its SLO) so the controller wants a prefill engine to move to
// decode.
type ctlCore struct{ *controller.Controller }

func (c ctlCore) Step(nowNs int64) controller.Decision {
	return c.Controller.Step(nowNs, controller.Inputs{
		Arrivals: noDemand{}, Outputs: noDemand{}, PendingUnsized: 5,
		ObservedPrefill: controller.PhaseObservation{Count: 100, Mean: 0.1, Max: 0.2},
		ObservedDecode:  controller.PhaseObservation{Count: 100, Mean: 3, Max: 4},
	})
}

func enginePod(name, role string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name,
			Labels:      map[string]string{podmeta.LabelRole: role, podmeta.LabelGPU: "A100-80GB"},
			Annotations: map[string]string{podmeta.AnnotationModel: "facebook/opt-13b"}},
		Spec: corev1.PodSpec{NodeName: "n-" + name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func testConfig() Config {
	c := DefaultConfig()
	c.Namespace, c.PodName, c.EngineNamespace = "narwhal", "core-0", "llm"
	c.LeaseDurationS, c.RenewDeadlineS, c.RetryPeriodS = 1, 0.5, 0.1
	c.DrainPollS = 0.005
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}

func roles(t *testing.T, cs *fake.Clientset) map[string]string {
	t.Helper()
	pods, err := cs.CoreV1().Pods("llm").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Labels[podmeta.LabelRole]
	}
	return out
}

// TestLeaderDecidesAndActuatesPods: the whole Kubernetes side around a
// real controller. The replica becomes leader, restores nothing (no saved
// state), labels its pod, discovers the engines from pods, decides one
// prefill→decode move, drains and relabels exactly that pod, and saves the
// state in the ConfigMap; the cooldown holds every later step. On
// shutdown its pod loses the leader label.
func TestLeaderDecidesAndActuatesPods(t *testing.T) {
	self := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0"}}
	cs := fake.NewSimpleClientset(self, enginePod("p0", "prefill"), enginePod("p1", "prefill"),
		enginePod("p2", "prefill"), enginePod("p3", "prefill"), enginePod("d0", "decode"))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	k, err := New(cs, testConfig(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.DefaultConfig()
	cfg.ConfirmSteps, cfg.CooldownS, cfg.DwellS = 1, 600, 0
	cfg.MaxMovesPerStep = 1 // the test counts single moves; a confirmed deficit may otherwise move several at once
	tm := controller.Timing{StepNs: 50e6, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1, TPOTSLOS: 0.1}
	ctl, err := controller.New(cfg, tm, nil, controller.WithActuator(k.Actuator()), controller.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Run(context.Background()); !errors.Is(err, ErrNotBound) {
		t.Fatalf("Run before Bind: got %v", err)
	}
	if err := k.Bind(ctlCore{ctl}, ctl, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()

	var moved string
	waitFor(t, "one pod to move to decode", func() bool {
		n := 0
		for name, r := range roles(t, cs) {
			if name != "d0" && r == "decode" {
				moved = name
				n++
			}
		}
		return n == 1
	})
	self, _ = cs.CoreV1().Pods("narwhal").Get(ctx, "core-0", metav1.GetOptions{})
	if self.Labels[LabelLeader] != "true" {
		t.Fatalf("leader pod labels %v; want %s=true", self.Labels, LabelLeader)
	}
	waitFor(t, "the controller to see the move done", func() bool {
		return ctl.Roles().RoleOf(moved) == controller.RoleDecode
	})
	// Some more steps: the cooldown blocks further moves.
	steps := k.Steps()
	waitFor(t, "more steps", func() bool { return k.Steps() >= steps+3 })
	if d, ok := ctl.Latest(); !ok || d.Blocked != controller.GateCooldown {
		t.Fatalf("latest decision %+v; want blocked by cooldown", d)
	}

	// Exactly the moved pod was patched: drained, then relabelled.
	var patched []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetNamespace() == "llm" {
			patched = append(patched, p.GetName()+" "+string(p.GetPatch()))
		}
	}
	want := []string{
		moved + ` {"metadata":{"annotations":{"narwhal.io/draining":"true"}}}`,
		moved + ` [{"op":"test","path":"/metadata/labels/narwhal.io~1role","value":"prefill"},{"op":"replace","path":"/metadata/labels/narwhal.io~1role","value":"decode"},{"op":"test","path":"/metadata/annotations/narwhal.io~1draining","value":"true"},{"op":"remove","path":"/metadata/annotations/narwhal.io~1draining"}]`,
	}
	if len(patched) != 2 || patched[0] != want[0] || patched[1] != want[1] {
		t.Fatalf("engine pod patches:\ngot  %q\nwant %q", patched, want)
	}
	got := roles(t, cs)
	wantRoles := map[string]string{"p0": "prefill", "p1": "prefill", "p2": "prefill", "p3": "prefill", "d0": "decode"}
	wantRoles[moved] = "decode"
	if fmt.Sprint(got) != fmt.Sprint(wantRoles) {
		t.Fatalf("pod roles %v; want %v", got, wantRoles)
	}

	// The state in the ConfigMap carries the move for the next leader.
	store, _ := statestore.New(cs, "narwhal", "narwhal-core-state")
	blob, err := store.Load(ctx, "controller-state.json")
	if err != nil {
		t.Fatal(err)
	}
	var st controller.PersistedState
	if err := json.Unmarshal(blob, &st); err != nil {
		t.Fatal(err)
	}
	if st.LastMoveNs == 0 || st.Seq < 4 {
		t.Fatalf("saved state %+v; want a move time and the decision sequence", st)
	}
	var ids []string
	for _, e := range st.Engines {
		ids = append(ids, e.ID+"="+e.Role.String())
	}
	sort.Strings(ids)
	if len(ids) != 5 {
		t.Fatalf("saved engines %v", ids)
	}
	for _, e := range st.Engines {
		if e.Role.String() != wantRoles[e.ID] {
			t.Fatalf("saved engines %v; want roles %v", ids, wantRoles)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	self, _ = cs.CoreV1().Pods("narwhal").Get(context.Background(), "core-0", metav1.GetOptions{})
	if _, ok := self.Labels[LabelLeader]; ok {
		t.Fatalf("leader label left on a stopped replica: %v", self.Labels)
	}
}

func TestConfigValidate(t *testing.T) {
	env := map[string]string{"POD_NAMESPACE": "narwhal", "POD_NAME": "core-1"}
	c := DefaultConfig().FromEnv(func(k string) string { return env[k] })
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults from env: %v", err)
	}
	if c.Namespace != "narwhal" || c.PodName != "core-1" {
		t.Fatalf("FromEnv: %+v", c)
	}
	f := func(mut func(*Config)) {
		t.Helper()
		c := testConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("config %+v: got %v; want ErrInvalidConfig", c, err)
		}
	}
	f(func(c *Config) { c.Namespace = "" })
	f(func(c *Config) { c.PodName = "" })
	f(func(c *Config) { c.StateKey = "" })
	f(func(c *Config) { c.StateConfigMap = "" })
	f(func(c *Config) { c.DrainTimeoutS = 0 })
	f(func(c *Config) { c.RetryPeriodS = -1 })
	f(func(c *Config) { c.LeaseDurationS = c.RenewDeadlineS })
}

// The kubernetes section's defaults and lease rule live in
// k8s/clusterconfig, which links no Kubernetes client: they must stay the
// ones k8s/leader, k8s/actuate and client-go use.
func TestClusterConfigMatchesItsPackages(t *testing.T) {
	c, l, a := DefaultConfig(), leader.DefaultConfig(), actuate.DefaultConfig()
	if c.LeaseName != l.LeaseName || dur(c.LeaseDurationS) != l.LeaseDuration ||
		dur(c.RenewDeadlineS) != l.RenewDeadline || dur(c.RetryPeriodS) != l.RetryPeriod {
		t.Fatalf("lease defaults %+v; k8s/leader's %+v", c, l)
	}
	if dur(c.DrainTimeoutS) != a.DrainTimeout || dur(c.DrainPollS) != a.DrainPoll || dur(c.SwitchTimeoutS) != a.SwitchTimeout {
		t.Fatalf("drain and switch defaults %+v; k8s/actuate's %+v", c, a)
	}
	if clusterconfig.LeaseJitterFactor != leaderelection.JitterFactor {
		t.Fatalf("LeaseJitterFactor %v; client-go's %v", clusterconfig.LeaseJitterFactor, leaderelection.JitterFactor)
	}
	// A config the section accepts is one k8s/leader accepts, at the
	// boundary of the jitter rule too.
	for _, renew := range []float64{2.41, 2.5, 3} {
		c := testConfig()
		c.RetryPeriodS, c.RenewDeadlineS, c.LeaseDurationS = 2, renew, renew+1
		if (c.Validate() == nil) != (leaderConfig(c).Validate() == nil) {
			t.Fatalf("renew %v: section %v, leader %v", renew, c.Validate(), leaderConfig(c).Validate())
		}
	}
	c = testConfig()
	c.RetryPeriodS, c.RenewDeadlineS = 2, 2.4
	if c.Validate() == nil || leaderConfig(c).Validate() == nil {
		t.Fatalf("renew 2.4 = 1.2 × retry 2: section %v, leader %v; want both refused", c.Validate(), leaderConfig(c).Validate())
	}
}
