package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/actuate"
	"github.com/narwhal-io/narwhal/k8s/discover"
	"github.com/narwhal-io/narwhal/k8s/kubetest"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

const llmdRole = "llm-d.ai/role"

type podMap map[string]discover.PodRef

func (m podMap) PodFor(id string) (discover.PodRef, bool) { r, ok := m[id]; return r, ok }

type outcome struct {
	id  string
	err error
}

func drainedNow(context.Context, string) (bool, error) { return true, nil }

func newActuator(t *testing.T, c kubernetes.Interface, cfg actuate.Config, loc podMap) (*actuate.Actuator, chan outcome) {
	t.Helper()
	ch := make(chan outcome, 4)
	cfg.DrainTimeout, cfg.DrainPoll, cfg.SwitchTimeout = 10*time.Second, 20*time.Millisecond, 10*time.Second
	a, err := actuate.New(c, cfg, loc, drainedNow, func(id string, _ int64, err error) { ch <- outcome{id, err} },
		actuate.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, ch
}

func await(t *testing.T, ch chan outcome, limit time.Duration) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(limit):
		t.Fatalf("no MoveDone within %v", limit)
	}
	return outcome{}
}

func llmdRoles() podmeta.Roles { return podmeta.Roles{Preset: "llm-d"} }

// TestRelabelMove: with the llm-d preset, a relabel move on the real API
// server drains the pod (annotation), flips llm-d.ai/role and removes the
// mark, touches no other pod, and records an Event on the pod.
func TestRelabelMove(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	createRunning(t, c, ns,
		enginePod("vllm-0", "node-a", map[string]string{llmdRole: "decode"}, nil),
		enginePod("vllm-1", "node-a", map[string]string{llmdRole: "decode"}, nil))
	a, ch := newActuator(t, c, actuate.Config{Roles: llmdRoles()}, podMap{"vllm-0": {Namespace: ns, Name: "vllm-0"}})
	if err := a.Start(controller.Move{EngineID: "vllm-0", From: controller.RoleDecode, To: controller.RolePrefill, DecisionSeq: 3}); err != nil {
		t.Fatal(err)
	}
	if o := await(t, ch, 20*time.Second); o.err != nil {
		t.Fatalf("move failed: %v", o.err)
	}
	ctx := context.Background()
	for name, want := range map[string]string{"vllm-0": "prefill", "vllm-1": "decode"} {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels[llmdRole] != want || p.Annotations[podmeta.AnnotationDraining] != "" {
			t.Fatalf("pod %s: labels %v annotations %v; want %s=%s and no draining mark", name, p.Labels, p.Annotations, llmdRole, want)
		}
		if _, ok := p.Labels[podmeta.LabelRole]; ok {
			t.Fatalf("pod %s got the narwhal.io/role label under the llm-d preset", name)
		}
	}
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=vllm-0"})
	if err != nil || len(evs.Items) != 1 || evs.Items[0].Reason != "NarwhalMoveDone" {
		t.Fatalf("events: %v %+v; want one NarwhalMoveDone", err, evs)
	}
	if j := a.Journal(); len(j) != 1 || j[0].Result != "done" || j[0].Method != "relabel" || j[0].DecisionSeq != 3 {
		t.Fatalf("journal %+v", j)
	}
}

// roleDeployment is one role's engines as llm-d's ModelService deploys
// them: a Deployment whose selector includes the role label.
func roleDeployment(name, role string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "qwen", llmdRole: role}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{
					Name: "vllm", Image: "vllm/vllm-openai:v0.11.0",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
				}}},
			},
		},
	}
}

func livePods(t *testing.T, c kubernetes.Interface, ns, role string) []corev1.Pod {
	t.Helper()
	pods, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: llmdRole + "=" + role})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

func deployRoles(t *testing.T, c kubernetes.Interface, ns string, prefill, decode int32) {
	t.Helper()
	for _, d := range []*appsv1.Deployment{roleDeployment("qwen-prefill", "prefill", prefill), roleDeployment("qwen-decode", "decode", decode)} {
		if _, err := c.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 60*time.Second, "role deployments ready", func() bool {
		return len(livePods(t, c, ns, "prefill")) == int(prefill) && len(livePods(t, c, ns, "decode")) == int(decode)
	})
}

// TestScaleMoveRemovesExactlyTheDrainedPod: a scale move (prefill ->
// decode) drains the chosen pod, gives it the lowest pod-deletion-cost,
// scales qwen-prefill down and qwen-decode up, and waits for the new
// decode pod. The real ReplicaSet controller removes exactly the drained
// pod, although it has been Ready the longest, which the controller would
// otherwise keep (it deletes the most recently ready pod first).
func TestScaleMoveRemovesExactlyTheDrainedPod(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	k := startKubelet(t, c, ns)
	deployRoles(t, c, ns, 3, 1)
	prefill := livePods(t, c, ns, "prefill")
	chosen := prefill[1].Name
	// Make the chosen pod the oldest ready one.
	k.mu.Lock()
	k.readySince[chosen] = time.Now().Add(-time.Hour)
	k.mu.Unlock()
	if err := setReady(context.Background(), c, ns, chosen, prefill[1].Status.PodIP, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}

	pool := actuate.Pool{Name: "qwen", Selector: "app=qwen", Method: actuate.MethodScale,
		Prefill: "Deployment/qwen-prefill", Decode: "Deployment/qwen-decode", ReadyTimeout: 60 * time.Second}
	a, ch := newActuator(t, c, actuate.Config{Roles: llmdRoles(), Pools: []actuate.Pool{pool}},
		podMap{"e": {Namespace: ns, Name: chosen}})
	t0 := time.Now()
	if err := a.Start(controller.Move{EngineID: "e", From: controller.RolePrefill, To: controller.RoleDecode}); err != nil {
		t.Fatal(err)
	}
	if o := await(t, ch, 90*time.Second); o.err != nil {
		t.Fatalf("scale move failed: %v", o.err)
	}
	t.Logf("scale move took %v", time.Since(t0).Round(time.Millisecond))
	left := livePods(t, c, ns, "prefill")
	if len(left) != 2 {
		t.Fatalf("%d prefill pods left; want 2", len(left))
	}
	for _, p := range left {
		if p.Name == chosen {
			t.Fatalf("drained pod %s survived the scale down", chosen)
		}
	}
	for _, want := range []string{prefill[0].Name, prefill[2].Name} {
		if !strings.Contains(podNames(left), want) {
			t.Fatalf("pod %s was removed instead of the drained %s; left %s", want, chosen, podNames(left))
		}
	}
	if got := len(livePods(t, c, ns, "decode")); got != 2 {
		t.Fatalf("%d decode pods; want 2", got)
	}
	for name, want := range map[string]int32{"qwen-prefill": 2, "qwen-decode": 2} {
		d, err := c.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || *d.Spec.Replicas != want || d.Status.ReadyReplicas != want {
			t.Fatalf("deployment %s: %v replicas %d ready %d; want %d", name, err, *d.Spec.Replicas, d.Status.ReadyReplicas, want)
		}
	}
	if j := a.Journal(); len(j) != 1 || j[0].Method != "scale" || j[0].Result != "done" {
		t.Fatalf("journal %+v", j)
	}
}

func podNames(ps []corev1.Pod) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

// TestRelabelRefusedWhenOwnerSelectsRole: a relabel of a pod whose
// Deployment selects on llm-d.ai/role is refused before the pod is
// touched: a clear error, a refused journal record, the refusal metric,
// a Warning Event on the pod, and no new pod started by the ReplicaSet.
func TestRelabelRefusedWhenOwnerSelectsRole(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	startKubelet(t, c, ns)
	deployRoles(t, c, ns, 2, 1)
	victim := livePods(t, c, ns, "prefill")[0]
	a, ch := newActuator(t, c, actuate.Config{Roles: llmdRoles()}, podMap{"e": {Namespace: ns, Name: victim.Name}})
	if err := a.Start(controller.Move{EngineID: "e", From: controller.RolePrefill, To: controller.RoleDecode, DecisionSeq: 9}); err != nil {
		t.Fatal(err)
	}
	o := await(t, ch, 20*time.Second)
	if !errors.Is(o.err, actuate.ErrOwnerSelectsRole) {
		t.Fatalf("got %v; want ErrOwnerSelectsRole", o.err)
	}
	for _, want := range []string{"Deployment qwen-prefill", llmdRole, "scale method"} {
		if !strings.Contains(o.err.Error(), want) {
			t.Fatalf("error %q does not name %q", o.err, want)
		}
	}
	ctx := context.Background()
	p, err := c.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[llmdRole] != "prefill" || len(p.Annotations) != 0 || p.ResourceVersion != victim.ResourceVersion {
		t.Fatalf("refused move touched the pod: labels %v annotations %v rv %s -> %s", p.Labels, p.Annotations, victim.ResourceVersion, p.ResourceVersion)
	}
	if j := a.Journal(); len(j) != 1 || j[0].Result != "refused" || j[0].DecisionSeq != 9 || !strings.Contains(j[0].Error, "qwen-prefill") {
		t.Fatalf("journal %+v", j)
	}
	if got := metricValue(t, a.Collectors(), "narwhal_k8s_move_refusals_total", "owner_selects_role"); got != 1 {
		t.Fatalf("narwhal_k8s_move_refusals_total{reason=owner_selects_role} = %v; want 1", got)
	}
	evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim.Name})
	if err != nil || len(evs.Items) != 1 || evs.Items[0].Reason != "NarwhalMoveRefused" || evs.Items[0].Type != corev1.EventTypeWarning {
		t.Fatalf("events: %v %+v; want one Warning NarwhalMoveRefused", err, evs)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(livePods(t, c, ns, "prefill")); n != 2 {
		t.Fatalf("%d prefill pods after the refusal; want 2 (no replacement)", n)
	}
}

// metricValue is the value of the counter name whose only label has
// value label.
func metricValue(t *testing.T, cols []prometheus.Collector, name, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cols...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{%s} not found", name, label)
	return 0
}
