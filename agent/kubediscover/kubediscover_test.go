package kubediscover

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/podresources"
	"github.com/narwhal-io/narwhal/nvml"
)

func newD(t *testing.T, cfg Config, opts ...Option) *Discoverer {
	t.Helper()
	d, err := New(fake.NewSimpleClientset(), cfg, "node-a", func([]agent.EngineConfig) {}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func runningPod(name string, labels, ann map[string]string, ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name, UID: types.UID("uid-" + name), Labels: labels, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
	}
}

func TestEngineFromPodEndpoints(t *testing.T) {
	d := newD(t, Config{})
	role := map[string]string{"narwhal.io/role": "prefill"}
	f := func(p *corev1.Pod, wantURL string, wantPort uint16) {
		t.Helper()
		e, err := d.EngineFromPod(p, nil)
		if err != nil || e.MetricsURL != wantURL || e.Port != wantPort {
			t.Fatalf("%s: %+v, %v; want %s port %d", p.Name, e, err, wantURL, wantPort)
		}
	}
	f(runningPod("named", role, nil, corev1.ContainerPort{Name: "grpc", ContainerPort: 9000}, corev1.ContainerPort{Name: "http", ContainerPort: 8000}),
		"http://10.0.0.7:8000/metrics", 8000)
	f(runningPod("first", role, nil, corev1.ContainerPort{ContainerPort: 30000}), "http://10.0.0.7:30000/metrics", 30000)
	f(runningPod("ann", role, map[string]string{AnnotationMetricsPort: "grpc", AnnotationMetricsPath: "/m"},
		corev1.ContainerPort{Name: "grpc", ContainerPort: 9000}), "http://10.0.0.7:9000/m", 9000)
	for _, p := range []*corev1.Pod{
		runningPod("noport", role, nil),
		runningPod("badann", role, map[string]string{AnnotationMetricsPort: "70000"}, corev1.ContainerPort{ContainerPort: 1}),
		runningPod("missingname", role, map[string]string{AnnotationMetricsPort: "metrics"}, corev1.ContainerPort{ContainerPort: 1}),
		runningPod("kind", role, map[string]string{AnnotationEngineKind: "trt"}, corev1.ContainerPort{ContainerPort: 1}),
		runningPod("norole", nil, nil, corev1.ContainerPort{ContainerPort: 1}),
	} {
		if _, err := d.EngineFromPod(p, nil); err == nil {
			t.Fatalf("%s accepted", p.Name)
		}
	}
	pending := runningPod("pending", role, nil, corev1.ContainerPort{ContainerPort: 1})
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending}
	if _, err := d.EngineFromPod(pending, nil); err == nil {
		t.Fatal("pending pod accepted")
	}
	if _, err := New(fake.NewSimpleClientset(), Config{DefaultKind: "trt"}, "n", func([]agent.EngineConfig) {}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad default_kind: %v", err)
	}
}

// The engine PID is the pod's process on its GPUs (its cgroup names the
// pod UID, in either systemd or cgroupfs spelling); a process of another
// pod on the same GPU is a counted disagreement.
func TestCrossCheckWithNVMLProcesses(t *testing.T) {
	proc := t.TempDir()
	cg := func(pid int, body string) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := runningPod("vllm-0", map[string]string{"narwhal.io/role": "decode"}, nil)
	pod.UID = "0a1b2c3d-1111-2222-3333-444455556666"
	cg(4100, "0::/kubepods.slice/kubepods-pod0a1b2c3d_1111_2222_3333_444455556666.slice/cri-containerd-abc.scope\n")
	cg(4000, "0::/kubepods/besteffort/pod0a1b2c3d-1111-2222-3333-444455556666/def\n")
	cg(5000, "0::/kubepods.slice/kubepods-podffffffff_0000_0000_0000_000000000000.slice/x\n")
	cg(6000, "0::/system.slice/nvidia-persistenced.service\n")
	d := newD(t, Config{}, WithProcRoot(proc))
	devs := []nvml.Device{
		{Index: 0, UUID: "GPU-a", Processes: []nvml.Process{{PID: 4100}, {PID: 5000}, {PID: 6000}}},
		{Index: 1, UUID: "GPU-b", Processes: []nvml.Process{{PID: 4000}, {PID: 7777}}}, // 7777 gone from /proc
		{Index: 2, UUID: "GPU-c", Processes: []nvml.Process{{PID: 5000}}},              // not the pod's GPU
	}
	if pid := d.crossCheck(pod, []string{"GPU-a", "1"}, devs); pid != 4000 {
		t.Fatalf("pid %d; want 4000 (the lowest of the pod's processes)", pid)
	}
	if n := testutil.ToFloat64(d.disagr); n != 1 {
		t.Fatalf("disagreements %v; want 1 (pid 5000 of another pod on GPU-a)", n)
	}
	if pid := d.crossCheck(pod, nil, devs); pid != 0 {
		t.Fatalf("no GPUs: pid %d", pid)
	}
}

// kubeletGPUs is a PodResources source whose assignments change.
type kubeletGPUs struct {
	mu sync.Mutex
	m  map[podresources.PodRef][]string
}

func (k *kubeletGPUs) GPUs(context.Context) (map[podresources.PodRef][]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[podresources.PodRef][]string{}
	for p, g := range k.m {
		out[p] = append([]string(nil), g...)
	}
	return out, nil
}

// A pod that starts on the node after discovery began is published with
// the GPUs the kubelet gave it: the GPU map is re-read on a pod change,
// not only every gpu_refresh_s.
func TestNewPodGetsItsGPUsWithoutWaitingForTheRefresh(t *testing.T) {
	client := fake.NewSimpleClientset()
	kubelet := &kubeletGPUs{m: map[podresources.PodRef][]string{{Namespace: "llm", Name: "a"}: {"GPU-a"}}}
	var (
		mu   sync.Mutex
		last []agent.EngineConfig
	)
	d, err := New(client, Config{GPURefreshS: 3600}, "node-a", func(l []agent.EngineConfig) { mu.Lock(); last = l; mu.Unlock() },
		WithGPUs(kubelet))
	if err != nil {
		t.Fatal(err)
	}
	gpusOf := func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for _, e := range last {
			out[e.ID] = e.GPUs
		}
		return out
	}
	waitUntil := func(what string, cond func(map[string][]string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond(gpusOf()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; engines' GPUs %v", what, gpusOf())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(enginePod("a", nil, nil, nil, 1))
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitUntil("engine a", func(g map[string][]string) bool { return len(g["a"]) == 1 })
	// the kubelet admits pod b with GPU-b; b starts running
	kubelet.mu.Lock()
	kubelet.m[podresources.PodRef{Namespace: "llm", Name: "b"}] = []string{"GPU-b"}
	kubelet.mu.Unlock()
	create(enginePod("b", nil, nil, nil, 1))
	waitUntil("engine b", func(g map[string][]string) bool { _, ok := g["b"]; return ok })
	time.Sleep(50 * time.Millisecond) // a later publish, if any, has landed
	if g := gpusOf(); !reflect.DeepEqual(g["b"], []string{"GPU-b"}) || !reflect.DeepEqual(g["a"], []string{"GPU-a"}) {
		t.Fatalf("engines' GPUs %v; want a [GPU-a], b [GPU-b]", g)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// procSource is an NVML process source whose answer changes.
type procSource struct {
	devs []nvml.Device
	err  error
}

func (p *procSource) Devices(context.Context, int64) ([]nvml.Device, error) { return p.devs, p.err }

// NVML faults do not churn a discovered engine's PID: while NVML cannot
// list the processes on the pod's GPUs (unreadable as a whole, or that
// GPU's list failed) the last PID found stands, with its port watch; a
// list that NVML reads and that lacks the pod's process clears it. A
// process of another pod on the pod's GPU is counted and logged once
// while NVML keeps listing it, not at every publish.
func TestEnginePIDThroughNVMLFaults(t *testing.T) {
	proc := t.TempDir()
	for pid, body := range map[int]string{
		4000: "0::/kubepods/besteffort/poduid-a/c1\n",
		5000: "0::/kubepods.slice/kubepods-podffffffff_0000_0000_0000_000000000000.slice/x\n",
	} {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := &procSource{}
	kubelet := &kubeletGPUs{m: map[podresources.PodRef][]string{{Namespace: "llm", Name: "a"}: {"GPU-a"}}}
	var published [][]agent.EngineConfig
	d, err := New(fake.NewSimpleClientset(), Config{}, "node-a", func(l []agent.EngineConfig) { published = append(published, l) },
		WithGPUs(kubelet), WithNVML(src), WithProcRoot(proc))
	if err != nil {
		t.Fatal(err)
	}
	d.put(enginePod("a", nil, nil, nil, 1))
	ctx := context.Background()
	step := func(what string, devs []nvml.Device, err error, wantPID int32, wantPublishes int, wantDisagr float64) {
		t.Helper()
		src.devs, src.err = devs, err
		d.publish(ctx)
		e := d.Engines()[0]
		if e.PID != wantPID || (e.Port != 0) != (wantPID != 0) || len(published) != wantPublishes {
			t.Fatalf("%s: engine pid %d port %d after %d publishes; want pid %d (port watched with it), %d publishes",
				what, e.PID, e.Port, len(published), wantPID, wantPublishes)
		}
		if n := testutil.ToFloat64(d.disagr); n != wantDisagr {
			t.Fatalf("%s: %v disagreements; want %v", what, n, wantDisagr)
		}
	}
	both := []nvml.Device{{Index: 0, UUID: "GPU-a", Processes: []nvml.Process{{PID: 4000}, {PID: 5000}}}}
	step("first read", both, nil, 4000, 1, 1)
	step("same again", both, nil, 4000, 1, 1) // pid 5000 still there: not counted again
	step("NVML unreadable", nil, nvml.ErrUnavailable, 4000, 1, 1)
	lost := []nvml.Device{{Index: 0, Notes: []string{"DeviceGetHandleByIndex: ERROR_GPU_IS_LOST"}, Problem: true}}
	step("GPU lost", lost, nil, 4000, 1, 1)
	unread := []nvml.Device{{Index: 0, UUID: "GPU-a", Notes: []string{"GetComputeRunningProcesses: ERROR_UNKNOWN"}, Problem: true}}
	step("process list failed", unread, nil, 4000, 1, 1)
	step("engine process gone", []nvml.Device{{Index: 0, UUID: "GPU-a", Processes: []nvml.Process{}}}, nil, 0, 2, 1)
	step("back, with the other pod's process again", both, nil, 4000, 3, 2)
}
