package service

import (
	"errors"
	"strings"
	"testing"
)

// TestKubeConfig: the section loads from file, environment and flags; a
// disabled section is not validated; an enabled one names the bad field;
// the demand URL derives from the namespace and the listen port.
func TestKubeConfig(t *testing.T) {
	file := writeFile(t, "c.yaml", `
listen: ":9090"
auth: {allow_unauthenticated: true}
kubernetes:
  enabled: true
  lease_name: narwhal-core-leader
  engine_namespace: llm
  ship_every_s: 3
`)
	env := map[string]string{"POD_NAMESPACE": "narwhal", "POD_NAME": "core-7", "NARWHAL_KUBERNETES_DRAIN_TIMEOUT_S": "60"}
	cfg, err := Load([]string{"--config", file, "--kubernetes.retry_period_s", "1"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Kubernetes
	if !k.Enabled || k.Namespace != "narwhal" || k.PodName != "core-7" || k.EngineNamespace != "llm" ||
		k.ShipEveryS != 3 || k.DrainTimeoutS != 60 || k.RetryPeriodS != 1 || k.LeaseDurationS != 15 {
		t.Fatalf("kubernetes section: %+v", k)
	}
	if got := cfg.DemandURL(); got != "http://narwhal-core-leader.narwhal.svc:9090/v1/demand/deltas" {
		t.Fatalf("derived demand URL %q", got)
	}

	// Disabled: nothing of the section is checked.
	off := DefaultConfig()
	off.Auth.AllowUnauthenticated = true
	off.Kubernetes.ShipEveryS = -1
	if err := off.Validate(); err != nil {
		t.Fatalf("disabled section validated: %v", err)
	}
	f := func(mut func(*KubernetesConfig), want string) {
		t.Helper()
		c := DefaultConfig()
		c.Auth.AllowUnauthenticated = true
		c.Kubernetes.Enabled, c.Kubernetes.Namespace, c.Kubernetes.PodName = true, "narwhal", "core-0"
		mut(&c.Kubernetes)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v; want an error containing %q", err, want)
		}
	}
	f(func(k *KubernetesConfig) { k.ShipEveryS = 0 }, "kubernetes.ship_every_s must be in (0, 3600], got 0")
	f(func(k *KubernetesConfig) { k.DemandURL = "leader:8080" }, `kubernetes.demand_url must be an absolute http(s) URL, got "leader:8080"`)
	f(func(k *KubernetesConfig) { k.PodName = "" }, `kubernetes.pod_name must be set (or POD_NAME)`)
	f(func(k *KubernetesConfig) { k.DrainTimeoutS = -1 }, `kubernetes.drain_timeout_s must be in (0, 86400], got -1`)
}
