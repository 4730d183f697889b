package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/agent"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestDaemonSetManifest decodes deploy/agent-daemonset.yaml strictly into
// the Kubernetes types and checks the privileges it asks for, and that the
// agent accepts its ConfigMap.
func TestDaemonSetManifest(t *testing.T) {
	b, err := os.ReadFile("../../deploy/agent-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	for _, doc := range strings.Split(string(b), "\n---\n") {
		switch {
		case strings.Contains(doc, "kind: DaemonSet"):
			if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
				t.Fatalf("DaemonSet: %v", err)
			}
		case strings.Contains(doc, "kind: ConfigMap"):
			if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
				t.Fatalf("ConfigMap: %v", err)
			}
		}
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostPID || spec.RuntimeClassName == nil || *spec.RuntimeClassName != "nvidia" ||
		spec.PriorityClassName != "system-node-critical" || spec.HostNetwork {
		t.Fatalf("unexpected pod spec: hostPID %v runtimeClass %v priority %q", spec.HostPID, spec.RuntimeClassName, spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "nvidia.com/gpu" }) {
		t.Fatal("no GPU toleration")
	}
	sc := spec.Containers[0].SecurityContext
	caps := sc.Capabilities
	if *sc.Privileged || len(caps.Drop) != 1 || caps.Drop[0] != "ALL" || !slices.Equal(caps.Add, []corev1.Capability{"BPF", "PERFMON"}) {
		t.Fatalf("unexpected capabilities: %+v", caps)
	}
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(cm.Data["agent.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_NAME", "gpu-node-1")
	c, err := agent.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "gpu-node-1" || len(c.Engines) != 1 || c.Engines[0].Node != "gpu-node-1" {
		t.Fatalf("unexpected config: %+v", c)
	}
}
