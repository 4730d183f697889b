package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/kubetest"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

type noDemand struct{}

func (noDemand) Window(_, _ int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	return dst, buckets.Window{}
}
func (noDemand) Evidence(int64, int64) buckets.Evidence { return buckets.Evidence{} }

// ctlCore is a core reduced to its controller, fed decode-starved inputs
// (TPOT three times its SLO): the controller wants prefill engines moved
// to decode, one per cooldown.
type ctlCore struct{ *controller.Controller }

func (c ctlCore) Step(nowNs int64) controller.Decision {
	return c.Controller.Step(nowNs, controller.Inputs{
		Arrivals: noDemand{}, Outputs: noDemand{}, PendingUnsized: 5,
		ObservedPrefill: controller.PhaseObservation{Count: 100, Mean: 0.1, Max: 0.2},
		ObservedDecode:  controller.PhaseObservation{Count: 100, Mean: 3, Max: 4},
	})
}

func newCtl(t *testing.T, act controller.Actuator) ctlCore {
	t.Helper()
	cfg := controller.DefaultConfig()
	cfg.ConfirmSteps, cfg.CooldownS, cfg.DwellS, cfg.MaxMovesPerStep = 1, 600, 0, 1
	tm := controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1, TPOTSLOS: 0.1}
	c, err := controller.New(cfg, tm, nil, controller.WithLogger(quiet), controller.WithActuator(act))
	if err != nil {
		t.Fatal(err)
	}
	return ctlCore{c}
}

type replica struct {
	name   string
	k      *cluster.Cluster
	ctl    ctlCore
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, c kubernetes.Interface, ns, name string) *replica {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.Namespace, cfg.PodName, cfg.EngineNamespace = ns, name, ns
	cfg.LeaseName, cfg.StateConfigMap = "narwhal-core-leader", "narwhal-core-state"
	cfg.LeaseDurationS, cfg.RenewDeadlineS, cfg.RetryPeriodS = 2, 1.5, 0.25
	cfg.DrainPollS = 0.02
	k, err := cluster.New(c, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctl := newCtl(t, k.Actuator())
	if err := k.Bind(ctl, ctl.Controller, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, k: k, ctl: ctl, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- k.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("replica %s: %v", r.name, err)
		}
		r.done <- nil // later stops return at once
	case <-time.After(20 * time.Second):
		t.Errorf("replica %s did not stop", r.name)
	}
}

func roleCount(t *testing.T, c kubernetes.Interface, ns, role string) int {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: podmeta.LabelRole + "=" + role})
	if err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}

func leaders(rs []*replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if r.k.IsLeader() {
			out = append(out, r)
		}
	}
	return out
}

// TestLeaderFailoverAcrossThreeCores: three cores campaign for one Lease
// on the real API server. Exactly one leads, labels its pod, decides one
// prefill->decode move and relabels exactly one pod, and saves its state
// in the ConfigMap. When it dies without releasing the Lease, one of the
// other two takes over after the Lease expires, restores the state, and
// the cooldown the first leader started still holds: no second move.
func TestLeaderFailoverAcrossThreeCores(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	labels := func(role string) map[string]string {
		return map[string]string{podmeta.LabelRole: role, podmeta.LabelGPU: "A100-80GB"}
	}
	ann := map[string]string{podmeta.AnnotationModel: "facebook/opt-13b"}
	createRunning(t, c, ns,
		enginePod("p0", "n0", labels("prefill"), ann), enginePod("p1", "n0", labels("prefill"), ann),
		enginePod("p2", "n1", labels("prefill"), ann), enginePod("p3", "n1", labels("prefill"), ann),
		enginePod("d0", "n2", labels("decode"), ann),
		enginePod("core-0", "n3", nil, nil), enginePod("core-1", "n4", nil, nil), enginePod("core-2", "n5", nil, nil))

	rs := []*replica{startReplica(t, c, ns, "core-0"), startReplica(t, c, ns, "core-1"), startReplica(t, c, ns, "core-2")}
	testwait.For(t, 30*time.Second, "one leader that moved one engine", func() bool {
		return len(leaders(rs)) == 1 && roleCount(t, c, ns, "decode") == 2
	})
	first := leaders(rs)[0]
	ctx := context.Background()
	lease, err := c.CoordinationV1().Leases(ns).Get(ctx, "narwhal-core-leader", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first.name {
		t.Fatalf("lease %+v, %v; want held by %s", lease, err, first.name)
	}
	testwait.For(t, 10*time.Second, "leader label on the leader's pod only", func() bool {
		n := 0
		for _, r := range rs {
			p, err := c.CoreV1().Pods(ns).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			lead := p.Labels[cluster.LabelLeader] == "true"
			if lead != (r == first) {
				return false
			}
			if lead {
				n++
			}
		}
		return n == 1
	})
	testwait.For(t, 10*time.Second, "controller state saved", func() bool {
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "narwhal-core-state", metav1.GetOptions{})
		return err == nil && len(cm.Data["controller-state.json"]) > 0
	})
	if roleCount(t, c, ns, "prefill") != 3 {
		t.Fatalf("prefill pods %d; want 3", roleCount(t, c, ns, "prefill"))
	}

	// The leader dies without releasing the Lease.
	killed := time.Now()
	first.stop(t)
	var rest []*replica
	for _, r := range rs {
		if r != first {
			rest = append(rest, r)
		}
	}
	testwait.For(t, 30*time.Second, "a new leader", func() bool { return len(leaders(rest)) == 1 })
	second := leaders(rest)[0]
	took := time.Since(killed)
	lease, err = c.CoordinationV1().Leases(ns).Get(ctx, "narwhal-core-leader", metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity != second.name {
		t.Fatalf("lease after failover: %+v, %v; want held by %s", lease.Spec, err, second.name)
	}
	t.Logf("failover %s -> %s after %v (lease 2 s)", first.name, second.name, took.Round(time.Millisecond))
	testwait.For(t, 10*time.Second, "the new leader stepping", func() bool { return second.k.Steps() >= 5 })
	if d, p := roleCount(t, c, ns, "decode"), roleCount(t, c, ns, "prefill"); d != 2 || p != 3 {
		t.Fatalf("after failover: %d decode %d prefill pods; want 2 and 3 (the restored cooldown blocks a second move)", d, p)
	}
	p, err := c.CoreV1().Pods(ns).Get(ctx, second.name, metav1.GetOptions{})
	if err != nil || p.Labels[cluster.LabelLeader] != "true" {
		t.Fatalf("new leader's pod labels %v, %v", p.Labels, err)
	}
}
