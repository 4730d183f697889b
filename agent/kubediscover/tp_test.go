package kubediscover

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/podresources"
)

// enginePod is a Running engine pod whose container "engine" serves the
// metrics port 8000 and holds gpuLimit nvidia.com/gpu.
func enginePod(name string, ann map[string]string, command, args []string, gpuLimit int64) *corev1.Pod {
	p := runningPod(name, map[string]string{"narwhal.io/role": "decode", "narwhal.io/model": "llama-3.1-70b"}, ann,
		corev1.ContainerPort{Name: "http", ContainerPort: 8000})
	c := &p.Spec.Containers[0]
	c.Name, c.Command, c.Args = "engine", command, args
	if gpuLimit > 0 {
		c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpuLimit, resource.DecimalSI)}
	}
	return p
}

// Each source alone gives its value: the annotation, each engine's flag
// spellings in args or command, and the GPU count.
func TestTPFromEachSource(t *testing.T) {
	d := newD(t, Config{})
	vllm := []string{"vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"}
	four := []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}
	cases := []struct {
		name      string
		ann       map[string]string
		cmd, args []string
		env       []corev1.EnvVar
		limit     int64
		gpus      []string
		want      int
		wantSrc   string
	}{
		{name: "annotation", ann: map[string]string{AnnotationTP: "8"}, want: 8, wantSrc: TPFromAnnotation},
		{name: "vllm-long", cmd: vllm, args: []string{"--tensor-parallel-size", "4"}, want: 4, wantSrc: TPFromFlags},
		{name: "vllm-short", cmd: vllm, args: []string{"-tp", "2"}, want: 2, wantSrc: TPFromFlags},
		{name: "vllm-equals", cmd: vllm, args: []string{"--max-model-len=8192", "--tensor-parallel-size=8"}, want: 8, wantSrc: TPFromFlags},
		{name: "vllm-in-command", cmd: append(append([]string(nil), vllm...), "--tensor-parallel-size", "2"), want: 2, wantSrc: TPFromFlags},
		{name: "vllm-shell", cmd: []string{"/bin/sh", "-c"}, args: []string{"exec vllm serve m --port 8000 --tensor-parallel-size 4 --enforce-eager"},
			want: 4, wantSrc: TPFromFlags},
		{name: "vllm-env", cmd: vllm, args: []string{"--tensor-parallel-size", "$(TP)"}, env: []corev1.EnvVar{{Name: "TP", Value: "4"}},
			want: 4, wantSrc: TPFromFlags},
		{name: "sglang-tp-size", cmd: []string{"python3", "-m", "sglang.launch_server"}, args: []string{"--model-path", "m", "--tp-size", "8"},
			want: 8, wantSrc: TPFromFlags},
		{name: "sglang-tp", cmd: []string{"python3", "-m", "sglang.launch_server"}, args: []string{"--tp", "2", "--port", "8000"},
			want: 2, wantSrc: TPFromFlags},
		{name: "last-flag-wins", cmd: vllm, args: []string{"-tp", "2", "--tensor-parallel-size", "4"}, want: 4, wantSrc: TPFromFlags},
		{name: "podresources", cmd: vllm, gpus: four, want: 4, wantSrc: TPFromGPUs},
		{name: "gpu-limit", cmd: vllm, limit: 2, want: 2, wantSrc: TPFromGPUs},
		{name: "nothing", cmd: vllm, want: 0, wantSrc: ""},
		// a shell variable the agent cannot resolve falls through to the GPUs
		{name: "shell-var", cmd: []string{"sh", "-c"}, args: []string{"vllm serve m --tensor-parallel-size $TP"}, limit: 4, want: 4, wantSrc: TPFromGPUs},
		{name: "env-from-secret", cmd: vllm, args: []string{"-tp", "$(TP)"},
			env: []corev1.EnvVar{{Name: "TP", ValueFrom: &corev1.EnvVarSource{}}}, limit: 2, want: 2, wantSrc: TPFromGPUs},
		{name: "flag-without-value", cmd: vllm, args: []string{"--tensor-parallel-size"}, limit: 2, want: 2, wantSrc: TPFromGPUs},
	}
	for _, c := range cases {
		p := enginePod(c.name, c.ann, c.cmd, c.args, c.limit)
		p.Spec.Containers[0].Env = c.env
		tp, src, err := podTP(p, engineContainer(p, 8000), c.gpus)
		if err != nil || tp != c.want || src != c.wantSrc {
			t.Errorf("%s: tp %d from %q, %v; want %d from %q", c.name, tp, src, err, c.want, c.wantSrc)
		}
		e, err := d.EngineFromPod(p, c.gpus)
		if err != nil || e.TP != c.want {
			t.Errorf("%s: EngineFromPod tp %d, %v; want %d", c.name, e.TP, err, c.want)
		}
	}
}

// The annotation beats the flags, which beat the GPU count; a malformed
// annotation makes the pod no engine rather than silently falling back.
func TestTPPrecedence(t *testing.T) {
	d := newD(t, Config{})
	vllm := []string{"vllm", "serve", "m"}
	eight := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	f := func(p *corev1.Pod, gpus []string, want int) {
		t.Helper()
		e, err := d.EngineFromPod(p, gpus)
		if err != nil || e.TP != want {
			t.Fatalf("%s: tp %d, %v; want %d", p.Name, e.TP, err, want)
		}
	}
	// 8 GPUs, two engines' worth of flags: annotation 4 wins over flag 2 and 8 GPUs
	f(enginePod("ann-over-all", map[string]string{AnnotationTP: "4"}, vllm, []string{"-tp", "2"}, 8), eight, 4)
	// flag 2 wins over 8 GPUs (PodResources) and the limit 8 (e.g. TP 2 × DP 4 in one pod)
	f(enginePod("flag-over-gpus", nil, vllm, []string{"-tp", "2"}, 8), eight, 2)
	// PodResources count wins over the container limit
	f(enginePod("podres-over-limit", nil, vllm, nil, 8), []string{"0", "1", "2", "3"}, 4)
	// flags are read from the engine container (the one serving the
	// metrics port), not from a sidecar
	side := enginePod("sidecar", nil, vllm, []string{"-tp", "4"}, 4)
	side.Spec.Containers = append([]corev1.Container{{Name: "proxy", Args: []string{"--tp", "1"},
		Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 9000}}}}, side.Spec.Containers...)
	f(side, nil, 4)
	// another container holds GPUs too: the pod's PodResources list is the
	// union, so the engine container's limit counts
	two := enginePod("two-gpu-containers", nil, vllm, nil, 2)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "embedder",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(1, resource.DecimalSI)}}})
	f(two, []string{"0", "1", "2"}, 2)
	for _, v := range []string{"0", "-2", "four", "2000", ""} {
		p := enginePod("bad-ann", map[string]string{AnnotationTP: v}, vllm, []string{"-tp", "2"}, 2)
		if _, err := d.EngineFromPod(p, nil); err == nil || !strings.Contains(err.Error(), AnnotationTP) {
			t.Fatalf("annotation %q: %v; want an error naming %s", v, err, AnnotationTP)
		}
	}
}

type staticGPUs map[podresources.PodRef][]string

func (s staticGPUs) GPUs(context.Context) (map[podresources.PodRef][]string, error) { return s, nil }

// A discovered engine's TP reaches the wire report the agent sends to the
// core (wire.EngineReport.TP), where it keys the (model, GPU, TP) profile.
func TestDiscoveredTPReachesTheReport(t *testing.T) {
	a, err := agent.New(agent.Config{Node: "node-a", ScrapeTimeoutS: 0.2, StaleAfterS: 10})
	if err != nil {
		t.Fatal(err)
	}
	var sinkErr error
	d, err := New(fake.NewSimpleClientset(), Config{}, "node-a", func(l []agent.EngineConfig) { sinkErr = a.SetEngines(l) },
		WithGPUs(staticGPUs{{Namespace: "llm", Name: "by-gpus"}: {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}}))
	if err != nil {
		t.Fatal(err)
	}
	byFlag := enginePod("by-flag", nil, []string{"vllm", "serve", "m"}, []string{"--tensor-parallel-size", "2"}, 2)
	byGPUs := enginePod("by-gpus", nil, []string{"vllm", "serve", "m"}, nil, 4)
	for _, p := range []*corev1.Pod{byFlag, byGPUs} {
		p.Status.PodIP = "127.0.0.1" // nothing listens on 8000: the scrape fails fast, the report stays
		d.put(p)
	}
	ctx := context.Background()
	d.publish(ctx)
	if sinkErr != nil {
		t.Fatal(sinkErr)
	}
	got := map[string]int{}
	for _, r := range a.Collect(ctx, 1e9).Engines {
		got[r.ID] = r.TP
		if r.Model != "llama-3.1-70b" {
			t.Fatalf("report %+v: model lost", r)
		}
	}
	if got["by-flag"] != 2 || got["by-gpus"] != 4 || len(got) != 2 {
		t.Fatalf("report TP %v; want by-flag 2, by-gpus 4", got)
	}
}
