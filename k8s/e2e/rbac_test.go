package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/actuate"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/kubetest"
	"github.com/narwhal-io/narwhal/k8s/podmeta"

	"github.com/narwhal-io/narwhal/agent/kubediscover"
)

// renderedPath is the chart's rendered output (helm template narwhal
// charts/narwhal -n narwhal ...; .ci/run checks it is current).
const renderedPath = "../../deploy/narwhal.yaml"

func rendered(t *testing.T) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(renderedPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 || !bytes.Contains(doc, []byte("kind:")) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", renderedPath, err)
		}
		out = append(out, obj)
	}
	return out
}

// forbidden records every request the API server refused with 403.
type forbidden struct {
	mu   sync.Mutex
	seen []string
	next http.RoundTripper
}

func (f *forbidden) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		f.mu.Lock()
		f.seen = append(f.seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		f.mu.Unlock()
	}
	return resp, err
}

func (f *forbidden) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func saClient(t *testing.T, s *kubetest.Server, ns, name string) (kubernetes.Interface, *forbidden) {
	t.Helper()
	tok, err := s.ServiceAccountToken(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.ConfigFor(tok)
	f := &forbidden{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { f.next = rt; return f }
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

// coreClusterConfig reads the kubernetes section of the rendered core.yaml.
func coreClusterConfig(t *testing.T, objs []runtime.Object) cluster.Config {
	t.Helper()
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok || cm.Data["core.yaml"] == "" {
			continue
		}
		var file struct {
			Kubernetes struct {
				Config     cluster.Config `yaml:",inline"`
				Enabled    bool           `yaml:"enabled"`
				DemandURL  string         `yaml:"demand_url"`
				ShipEveryS float64        `yaml:"ship_every_s"`
			} `yaml:"kubernetes"`
		}
		file.Kubernetes.Config = cluster.DefaultConfig()
		if err := yaml.Unmarshal([]byte(cm.Data["core.yaml"]), &file); err != nil {
			t.Fatal(err)
		}
		return file.Kubernetes.Config
	}
	t.Fatal("no core.yaml in the rendered chart")
	return cluster.Config{}
}

// TestChartRBAC: the chart's rendered RBAC, applied to the real API server
// and bound to ServiceAccount tokens, allows every call the core and the
// agent make — leader election, controller state, the leader label,
// discovery, a relabel move, the owner check, a scale move, Events, the
// agent's node-scoped pod watch — with not one 403, and denies calls
// outside it.
func TestChartRBAC(t *testing.T) {
	s := kubetest.Get(t)
	admin := s.Client()
	ctx := context.Background()
	const ns = "narwhal" // the namespace the chart was rendered for
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	objs := rendered(t)
	applied := 0
	for _, o := range objs {
		var err error
		switch v := o.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, v, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("apply %T: %v", o, err)
		}
		applied++
	}
	if applied < 6 {
		t.Fatalf("applied %d RBAC objects from %s; want the core's and the agent's", applied, renderedPath)
	}
	coreC, coreDenied := saClient(t, s, ns, "narwhal-core")
	agentC, agentDenied := saClient(t, s, ns, "narwhal-agent")

	// The core: one replica with the rendered configuration (timings
	// shortened), deciding a relabel move.
	labels := func(role string) map[string]string {
		return map[string]string{podmeta.LabelRole: role, podmeta.LabelGPU: "A100-80GB"}
	}
	ann := map[string]string{podmeta.AnnotationModel: "facebook/opt-13b"}
	createRunning(t, admin, ns,
		enginePod("p0", "n0", labels("prefill"), ann), enginePod("p1", "n0", labels("prefill"), ann),
		enginePod("p2", "n1", labels("prefill"), ann), enginePod("d0", "n2", labels("decode"), ann),
		enginePod("narwhal-core-0", "n3", nil, nil))
	cfg := coreClusterConfig(t, objs)
	cfg.Namespace, cfg.PodName = ns, "narwhal-core-0"
	cfg.LeaseDurationS, cfg.RenewDeadlineS, cfg.RetryPeriodS, cfg.DrainPollS = 2, 1.5, 0.25, 0.02
	k, err := cluster.New(coreC, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctl := newCtl(t, k.Actuator())
	if err := k.Bind(ctl, ctl.Controller, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(rctx) }()
	testwait.For(t, 30*time.Second, "the core leading and moving one engine", func() bool {
		return k.IsLeader() && roleCount(t, admin, ns, "decode") == 2
	})
	testwait.For(t, 10*time.Second, "state saved and leader label set", func() bool {
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, cfg.StateConfigMap, metav1.GetOptions{})
		p, perr := admin.CoreV1().Pods(ns).Get(ctx, "narwhal-core-0", metav1.GetOptions{})
		return err == nil && len(cm.Data[cfg.StateKey]) > 0 && perr == nil && p.Labels[cluster.LabelLeader] == "true"
	})
	stop()
	<-done

	// Scale move and owner-check refusal through the core's token.
	startKubelet(t, admin, ns)
	deployRoles(t, admin, ns, 2, 1)
	pool := actuate.Pool{Name: "qwen", Selector: "app=qwen", Method: actuate.MethodScale,
		Prefill: "Deployment/qwen-prefill", Decode: "Deployment/qwen-decode", ReadyTimeout: 60 * time.Second}
	victim := livePods(t, admin, ns, "prefill")
	a, ch := newActuator(t, coreC, actuate.Config{Roles: llmdRoles(), Pools: []actuate.Pool{pool}},
		podMap{"s": {Namespace: ns, Name: victim[0].Name}, "r": {Namespace: ns, Name: victim[1].Name}})
	if err := a.Start(controller.Move{EngineID: "s", From: controller.RolePrefill, To: controller.RoleDecode}); err != nil {
		t.Fatal(err)
	}
	if o := await(t, ch, 90*time.Second); o.err != nil {
		t.Fatalf("scale move with the core's token: %v", o.err)
	}
	r, rch := newActuator(t, coreC, actuate.Config{Roles: llmdRoles()}, podMap{"r": {Namespace: ns, Name: victim[1].Name}})
	if err := r.Start(controller.Move{EngineID: "r", From: controller.RolePrefill, To: controller.RoleDecode}); err != nil {
		t.Fatal(err)
	}
	if o := await(t, rch, 20*time.Second); o.err == nil || !strings.Contains(o.err.Error(), "owner selects") {
		t.Fatalf("owner check with the core's token: %v; want the owner refusal", o.err)
	}

	// The agent: its node's engine pods.
	sink := runDiscovery(t, agentC, kubediscover.Config{Namespace: ns}, "n0")
	testwait.For(t, 10*time.Second, "the agent's engines on n0", func() bool { return len(sink.get()) == 2 })

	if d := coreDenied.list(); len(d) > 0 {
		t.Fatalf("the chart's RBAC refused the core's calls: %v", d)
	}
	if d := agentDenied.list(); len(d) > 0 {
		t.Fatalf("the chart's RBAC refused the agent's calls: %v", d)
	}
	// Outside the rules: denied.
	denied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s: got %v; want Forbidden", what, err)
		}
	}
	_, err = coreC.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	denied("core lists secrets", err)
	denied("core deletes a pod", coreC.CoreV1().Pods(ns).Delete(ctx, "p0", metav1.DeleteOptions{}))
	_, err = agentC.CoreV1().Pods(ns).Patch(ctx, "p0", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	denied("agent patches a pod", err)
	_, err = agentC.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	denied("agent lists pods outside the engine namespace", err)
}
