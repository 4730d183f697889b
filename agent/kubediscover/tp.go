package kubediscover

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/narwhal-io/narwhal/agent"
)

// AnnotationTP sets an engine pod's tensor-parallel degree explicitly.
const AnnotationTP = "narwhal.io/tensor-parallel-size"

// TP sources, as reported in the engine's debug log.
const (
	TPFromAnnotation = "annotation"
	TPFromFlags      = "flags"
	TPFromGPUs       = "gpus"
)

// tpFlags are the engines' tensor-parallel flags: vLLM's
// --tensor-parallel-size and -tp (its parser also takes underscores);
// SGLang's --tp-size, the --tensor-parallel-size alias and the --tp prefix
// argparse accepts.
var tpFlags = map[string]bool{
	"--tensor-parallel-size": true, "--tensor_parallel_size": true, "-tp": true,
	"--tp-size": true, "--tp_size": true, "--tp": true,
}

// engineContainer is the container serving the metrics port, else the
// first container.
func engineContainer(p *corev1.Pod, port uint16) *corev1.Container {
	for i := range p.Spec.Containers {
		for _, cp := range p.Spec.Containers[i].Ports {
			if cp.ContainerPort == int32(port) {
				return &p.Spec.Containers[i]
			}
		}
	}
	if len(p.Spec.Containers) > 0 {
		return &p.Spec.Containers[0]
	}
	return nil
}

// podTP resolves the engine's tensor-parallel degree: the annotation, else
// the engine container's command-line flag, else its GPU count (the pod's
// PodResources GPUs, else the container's GPU limit). It returns 0 and ""
// when nothing says; a malformed annotation is an error.
func podTP(p *corev1.Pod, c *corev1.Container, gpus []string) (int, string, error) {
	if v, ok := p.Annotations[AnnotationTP]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > agent.MaxTP {
			return 0, "", fmt.Errorf("pod %s/%s: %s %q: want an integer in [1, %d]", p.Namespace, p.Name, AnnotationTP, v, agent.MaxTP)
		}
		return n, TPFromAnnotation, nil
	}
	if c == nil {
		return 0, "", nil
	}
	if n := flagTP(c); n > 0 {
		return n, TPFromFlags, nil
	}
	if n := gpuTP(p, c, gpus); n > 0 {
		return n, TPFromGPUs, nil
	}
	return 0, "", nil
}

// flagTP reads the tensor-parallel flag from the container's command and
// args (each split on white space, so a `sh -c "vllm serve ..."` line is
// read too); the last occurrence wins, as in argparse. $(VAR) is expanded
// from the container's literal env values, as the kubelet does. A value
// that is not a number in range (e.g. a shell $TP) gives 0.
func flagTP(c *corev1.Container) int {
	var words []string
	for _, s := range append(append([]string(nil), c.Command...), c.Args...) {
		words = append(words, strings.Fields(s)...)
	}
	val := ""
	for i, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok && tpFlags[k] {
			val = v
		} else if tpFlags[w] && i+1 < len(words) {
			val = words[i+1]
		}
	}
	if strings.HasPrefix(val, "$(") && strings.HasSuffix(val, ")") {
		name := val[2 : len(val)-1]
		val = ""
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom == nil {
				val = e.Value
			}
		}
	}
	val = strings.Trim(val, `"'`)
	n, err := strconv.Atoi(val)
	if err != nil || n < 1 || n > agent.MaxTP {
		return 0
	}
	return n
}

// gpuTP is the engine's GPU count: the engine container's GPU limit when
// another container of the pod holds GPUs too (the pod's PodResources list
// is their union), else the pod's PodResources GPUs, else the limit.
func gpuTP(p *corev1.Pod, c *corev1.Container, gpus []string) int {
	lim := gpuLimit(c)
	others := false
	for i := range p.Spec.Containers {
		if &p.Spec.Containers[i] != c && gpuLimit(&p.Spec.Containers[i]) > 0 {
			others = true
		}
	}
	switch {
	case others && lim > 0:
		return lim
	case len(gpus) > 0 && len(gpus) <= agent.MaxTP:
		return len(gpus)
	case lim <= agent.MaxTP:
		return lim
	}
	return 0
}

// gpuLimit is the container's nvidia.com/gpu (or nvidia.com/mig-*) limit.
func gpuLimit(c *corev1.Container) int {
	n := int64(0)
	for name, q := range c.Resources.Limits {
		if name == "nvidia.com/gpu" || strings.HasPrefix(string(name), "nvidia.com/mig-") {
			n += q.Value()
		}
	}
	if n < 0 || n > agent.MaxTP {
		return 0
	}
	return int(n)
}
