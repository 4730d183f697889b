package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/kubediscover"
	"github.com/narwhal-io/narwhal/agent/podresources"
	"github.com/narwhal-io/narwhal/internal/testwait"
	"github.com/narwhal-io/narwhal/k8s/kubetest"
	"github.com/narwhal-io/narwhal/k8s/podmeta"
)

type gpuMap map[podresources.PodRef][]string

func (g gpuMap) GPUs(context.Context) (map[podresources.PodRef][]string, error) { return g, nil }

type engineSink struct {
	mu   sync.Mutex
	last []agent.EngineConfig
	n    int
}

func (s *engineSink) set(l []agent.EngineConfig) {
	s.mu.Lock()
	s.last, s.n = l, s.n+1
	s.mu.Unlock()
}

func (s *engineSink) get() map[string]agent.EngineConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]agent.EngineConfig{}
	for _, e := range s.last {
		out[e.ID] = e
	}
	return out
}

func runDiscovery(t *testing.T, c kubernetes.Interface, cfg kubediscover.Config, node string, opts ...kubediscover.Option) *engineSink {
	t.Helper()
	sink := &engineSink{}
	d, err := kubediscover.New(c, cfg, node, sink.set, append(opts, kubediscover.WithLogger(quiet))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return sink
}

// TestAgentDiscoversPodsOnItsNode: the agent on node-a lists and watches
// engine pods through the API server with the field selector
// spec.nodeName=node-a and the llm-d role label; a pod becomes an engine
// when its status (set through the status subresource, as the kubelet
// does) says Running with an IP; the metrics endpoint is the pod IP and
// the named port, or the annotation's port and path; GPUs come from the
// PodResources map; deletion removes the engine.
func TestAgentDiscoversPodsOnItsNode(t *testing.T) {
	s := kubetest.Get(t)
	ns, c := s.Namespace(t), s.Client()
	ctx := context.Background()
	role := func(r string) map[string]string { return map[string]string{llmdRole: r} }
	mk := func(name, node string, labels, ann map[string]string) {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, enginePod(name, node, labels, ann), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("decode-a", "node-a", role("decode"), map[string]string{podmeta.AnnotationModel: "Qwen/Qwen3-8B"})
	mk("prefill-a", "node-a", role("prefill"), map[string]string{
		kubediscover.AnnotationMetricsPort: "9090", kubediscover.AnnotationMetricsPath: "/prom", kubediscover.AnnotationEngineKind: "sglang"})
	mk("router-a", "node-a", map[string]string{"app": "router"}, nil) // not an engine: no role label
	mk("decode-b", "node-b", role("decode"), nil)                     // another node
	mk("pending-a", "node-a", role("decode"), nil)                    // never started

	gpus := gpuMap{{Namespace: ns, Name: "decode-a"}: {"GPU-1111", "GPU-2222"}}
	sink := runDiscovery(t, c, kubediscover.Config{Namespace: ns, Roles: podmeta.Roles{Preset: "llm-d"}}, "node-a",
		kubediscover.WithGPUs(gpus))
	time.Sleep(300 * time.Millisecond)
	if got := sink.get(); len(got) != 0 {
		t.Fatalf("engines before any pod runs: %+v", got)
	}
	for name, ip := range map[string]string{"decode-a": "10.9.0.1", "prefill-a": "10.9.0.2", "router-a": "10.9.0.3", "decode-b": "10.9.0.4"} {
		if err := setReady(ctx, c, ns, name, ip, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 10*time.Second, "two engines on node-a", func() bool { return len(sink.get()) == 2 })
	got := sink.get()
	d, p := got["decode-a"], got["prefill-a"]
	if d.MetricsURL != "http://10.9.0.1:8000/metrics" || d.Kind != "vllm" || d.Role != "decode" || d.Node != "node-a" ||
		d.Model != "Qwen/Qwen3-8B" || len(d.GPUs) != 2 || d.GPUs[0] != "GPU-1111" {
		t.Fatalf("decode-a: %+v", d)
	}
	if p.MetricsURL != "http://10.9.0.2:9090/prom" || p.Kind != "sglang" || p.Role != "prefill" || len(p.GPUs) != 0 {
		t.Fatalf("prefill-a: %+v", p)
	}
	// A relabel is seen (the core moved it); a deleted pod leaves.
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "decode-a", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"llm-d.ai/role":"prefill"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "decode-a's new role", func() bool { return sink.get()["decode-a"].Role == "prefill" })
	if err := c.CoreV1().Pods(ns).Delete(ctx, "prefill-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "prefill-a gone", func() bool { _, ok := sink.get()["prefill-a"]; return !ok && len(sink.get()) == 1 })
}
