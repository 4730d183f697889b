package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/cluster"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/service/servicetest"
)

func kubeEnginePod(name, role string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name,
			Labels:      map[string]string{podmeta.LabelRole: role, podmeta.LabelGPU: "A100-80GB"},
			Annotations: map[string]string{podmeta.AnnotationModel: "facebook/opt-13b"}},
		Spec: corev1.PodSpec{NodeName: "n-" + name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// kubeTestConfig is a replica with second-scale lease timings and a
// controller that acts on its first confirmation (one move, then a long
// cooldown).
func kubeTestConfig(pod, demandURL string) service.Config {
	cfg := testConfig()
	cfg.Core.StepS, cfg.Core.DemandWindowS, cfg.Core.MinEvidenceSpanS, cfg.Core.MonitorIntervalS = 0.2, 10, 2, 1
	cfg.Core.Controller.ConfirmSteps, cfg.Core.Controller.DwellS, cfg.Core.Controller.CooldownS = 1, 0, 600
	// The test's 80 arrivals are a prediction from few arrivals in a 2 s
	// short window; its subject is replication, not that rule.
	cfg.Core.Controller.PredictionArrivals = 0
	k := &cfg.Kubernetes
	k.Enabled = true
	k.Namespace, k.PodName, k.EngineNamespace = "narwhal", pod, "llm"
	k.LeaseDurationS, k.RenewDeadlineS, k.RetryPeriodS = 1, 0.5, 0.1
	k.DrainPollS = 0.005
	k.DemandURL, k.ShipEveryS = demandURL, 0.1
	return cfg
}

func kubeWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}

// leaderProxy plays the narwhal-core-leader Service: it forwards to the
// replica whose pod carries narwhal.io/leader=true in the fake cluster.
type leaderProxy struct {
	cs    *fake.Clientset
	mu    sync.Mutex
	addrs map[string]string // pod name -> host:port
}

func (p *leaderProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pods, err := p.cs.CoreV1().Pods("narwhal").List(r.Context(), metav1.ListOptions{LabelSelector: cluster.LabelLeader + "=true"})
	if err != nil || len(pods.Items) != 1 {
		http.Error(w, "no leader endpoint", http.StatusServiceUnavailable)
		return
	}
	p.mu.Lock()
	addr := p.addrs[pods.Items[0].Name]
	p.mu.Unlock()
	target := &url.URL{Scheme: "http", Host: addr}
	(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}).ServeHTTP(w, r)
}

// TestKubeTwoReplicas: two narwhal-core replicas on loopback share one
// (fake) cluster. One takes the Lease; events posted to the other reach
// the leader's merged demand through the shipping loop and the leader
// Service; only the leader decides (its journal grows, the follower's
// stays empty); its move drains and relabels exactly one engine pod, and
// the follower's role table follows the pod label.
func TestKubeTwoReplicas(t *testing.T) {
	cs := fake.NewSimpleClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-0"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "narwhal", Name: "core-1"}},
		kubeEnginePod("p0", "prefill"), kubeEnginePod("p1", "prefill"), kubeEnginePod("p2", "prefill"),
		kubeEnginePod("p3", "prefill"), kubeEnginePod("d0", "decode"))
	proxy := &leaderProxy{cs: cs, addrs: map[string]string{}}
	leaderSvc := httptest.NewServer(proxy)
	defer leaderSvc.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	type replica struct {
		name string
		srv  *service.Server
		kube *Replica
		core *core.Core
		done chan error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reps []*replica
	for _, name := range []string{"core-0", "core-1"} {
		srv, k, err := NewServer(kubeTestConfig(name, leaderSvc.URL+service.DemandDeltasPath), cs, quiet)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{name: name, srv: srv, kube: k, core: k.Core(), done: make(chan error, 1)}
		proxy.mu.Lock()
		proxy.addrs[name] = srv.Addr().String()
		proxy.mu.Unlock()
		go func() { r.done <- srv.Serve(ctx) }()
		reps = append(reps, r)
	}
	var lead, follow *replica
	kubeWait(t, "one replica to lead and label its pod", func() bool {
		lead, follow = nil, nil
		for _, r := range reps {
			if r.kube.Cluster().IsLeader() {
				lead = r
			} else {
				follow = r
			}
		}
		if lead == nil || follow == nil {
			return false
		}
		p, err := cs.CoreV1().Pods("narwhal").Get(ctx, lead.name, metav1.GetOptions{})
		return err == nil && p.Labels[cluster.LabelLeader] == "true"
	})
	kubeWait(t, "the follower to discover the engines", func() bool { return len(follow.core.Engines()) == 5 })

	client := &http.Client{Timeout: 5 * time.Second}
	do := func(r *replica, method, path, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+r.srv.Addr().String()+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The deltas endpoint needs the write token; a follower refuses deltas.
	if code, _ := do(lead, http.MethodPost, service.DemandDeltasPath, "", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("delta without token: status %d; want 401", code)
	}
	if code, _ := do(follow, http.MethodPost, service.DemandDeltasPath, testToken, `{}`); code != http.StatusConflict {
		t.Fatalf("delta to the follower: status %d; want 409", code)
	}

	// 80 requests over the last 8 s, decode-heavy (200 in, 1,500 out),
	// all on the follower: the one decode engine would miss the TPOT SLO
	// (the default scoring moves only for predicted misses).
	const n = 80
	now := time.Now().UnixNano()
	var lines []string
	for i := range n {
		a := now - 8500e6 + int64(i)*100e6
		lines = append(lines, fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":200,"requested_output_tokens":1500}`, now, a))
	}
	if code, reply := do(follow, http.MethodPost, "/v1/events", testToken, strings.Join(lines, "\n")); code != 200 || !strings.Contains(reply, fmt.Sprintf(`"accepted":%d,"refused":0`, n)) {
		t.Fatalf("POST /v1/events to the follower: %d %s", code, reply)
	}
	merged := lead.kube.Store().History(buckets.KindArrivals)
	kubeWait(t, "the follower's arrivals in the leader's merged demand", func() bool { return merged.Stats().Observations == n })
	if got := lead.core.Demand().Arrivals.Stats().Observations; got != 0 {
		t.Fatalf("leader's own arrivals %d; want 0 (the events went to the follower)", got)
	}

	var moved string
	kubeWait(t, "one prefill pod to move to decode", func() bool {
		pods, err := cs.CoreV1().Pods("llm").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		moved = ""
		k := 0
		for _, p := range pods.Items {
			if p.Name != "d0" && p.Labels[podmeta.LabelRole] == "decode" {
				moved, k = p.Name, k+1
			}
		}
		return k == 1
	})
	kubeWait(t, "the follower's role table to follow the pod label", func() bool {
		return follow.core.Roles().RoleOf(moved) == controller.RoleDecode
	})

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
	if fmt.Sprint(patched) != fmt.Sprint(want) {
		t.Fatalf("engine pod patches:\ngot  %q\nwant %q", patched, want)
	}

	// Only the leader decides, on the merged demand.
	ds := lead.core.Decisions(0, 1000)
	var move *controller.Decision
	for i := range ds {
		if len(ds[i].Moves) > 0 {
			if move != nil {
				t.Fatalf("two moves in the leader's journal: %+v and %+v", *move, ds[i])
			}
			move = &ds[i]
		}
	}
	if move == nil || move.Direction != "prefill_to_decode" || move.Moves[0].EngineID != moved {
		t.Fatalf("leader journal has no prefill_to_decode move of %s: %+v", moved, move)
	}
	if move.Snapshot.Long.Requests <= 0 || move.Snapshot.Long.MeanInput != 200 {
		t.Fatalf("the move's demand %+v; want the follower's requests (mean input 200)", move.Snapshot.Long)
	}
	if got := follow.core.Decisions(0, 1000); len(got) != 0 {
		t.Fatalf("follower decided %d times; want 0", len(got))
	}
	if follow.kube.Cluster().Steps() != 0 || lead.kube.Cluster().Steps() == 0 {
		t.Fatalf("steps: leader %d, follower %d", lead.kube.Cluster().Steps(), follow.kube.Cluster().Steps())
	}
	code, body := do(lead, http.MethodGet, "/metrics", "", "")
	if code != 200 || !strings.Contains(body, "narwhal_leader_is_leader 1") || !strings.Contains(body, `narwhal_demand_merge_buckets_total{result="applied"}`) {
		t.Fatalf("leader /metrics: %d, missing cluster or merge metrics", code)
	}

	cancel()
	for _, r := range reps {
		select {
		case err := <-r.done:
			if err != nil {
				t.Fatalf("%s Serve: %v", r.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s Serve did not return", r.name)
		}
	}
}

// TestKubeDeployConfigLoads: the core.yaml of deploy/narwhal.yaml (the
// chart's rendered output) loads strictly with the pod's environment,
// enables the Kubernetes side and builds a replica on a (fake) cluster.
func TestKubeDeployConfigLoads(t *testing.T) {
	b, err := os.ReadFile("../../deploy/narwhal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if strings.Contains(doc, "core.yaml: |") {
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cm.Kind != "ConfigMap" || cm.Data["core.yaml"] == "" {
		t.Fatalf("no ConfigMap with core.yaml in deploy/narwhal.yaml (kind %q)", cm.Kind)
	}
	env := map[string]string{"POD_NAMESPACE": "narwhal", "POD_NAME": "narwhal-core-abc",
		"NARWHAL_AUTH_TOKEN_FILE": writeFile(t, "token", "x"), "NARWHAL_AUTH_AGENT_TOKEN_FILE": writeFile(t, "agent-token", "y"), "NARWHAL_LISTEN": "127.0.0.1:0"}
	cfg, err := service.Load([]string{"--config", writeFile(t, "core.yaml", cm.Data["core.yaml"])}, envOf(env))
	if err != nil {
		t.Fatalf("deploy config: %v", err)
	}
	k := cfg.Kubernetes
	if !k.Enabled || k.Namespace != "narwhal" || k.PodName != "narwhal-core-abc" || k.EngineNamespace != "narwhal" || cfg.Agents.Required {
		t.Fatalf("deploy config: %+v", k)
	}
	cfg.Listen = "127.0.0.1:0"
	srv, kube, err := NewServer(cfg, fake.NewSimpleClientset(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if kube.DemandURL() != "http://narwhal-core-leader.narwhal.svc:8080/v1/demand/deltas" {
		t.Fatalf("demand URL %q", kube.DemandURL())
	}
}

// New refuses a config whose kubernetes section is off (service.ErrConfig).
func TestNewNeedsTheSectionEnabled(t *testing.T) {
	if _, err := New(service.DefaultConfig(), fake.NewSimpleClientset(), nil); !errors.Is(err, service.ErrConfig) {
		t.Fatalf("New with kubernetes.enabled=false: got %v; want ErrConfig", err)
	}
}

// Test helpers (package service's tests keep their own).

const testToken = "s3cret-token"

func testConfig() service.Config {
	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token = testToken
	cfg.Auth.AgentToken = "agent-s3cret"
	cfg.Agents.Required = false
	cfg.HTTP.MaxBodyBytes = 64 << 10
	cfg.HTTP.MaxLineBytes = 512
	return cfg
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	return servicetest.WriteFile(t, name, content)
}

var envOf = servicetest.EnvOf
