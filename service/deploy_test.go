package service

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The config shipped in deploy/core-deployment.yaml loads and validates
// strictly (a renamed field would break it), and the Deployment runs the
// binary with it, probes /readyz and /healthz, and keeps one replica.
func TestDeployConfigLoads(t *testing.T) {
	f, err := os.Open("../deploy/core-deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var coreYAML string
	var kinds []string
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
			Spec struct {
				Replicas int `yaml:"replicas"`
				Strategy struct {
					Type string `yaml:"type"`
				} `yaml:"strategy"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, doc.Kind)
		if doc.Kind == "ConfigMap" {
			coreYAML = doc.Data["core.yaml"]
		}
		if doc.Kind == "Deployment" && (doc.Spec.Replicas != 1 || doc.Spec.Strategy.Type != "Recreate") {
			t.Fatalf("Deployment: replicas %d strategy %q; want 1 and Recreate (one deciding core)", doc.Spec.Replicas, doc.Spec.Strategy.Type)
		}
	}
	if got := strings.Join(kinds, ","); got != "ConfigMap,PersistentVolumeClaim,Deployment,Service" {
		t.Fatalf("unexpected kinds %s", got)
	}
	tok := writeFile(t, "token", "x")
	cfg, err := Load([]string{"--config", writeFile(t, "core.yaml", coreYAML)}, envOf(map[string]string{"NARWHAL_AUTH_TOKEN_FILE": tok, "NARWHAL_AUTH_AGENT_TOKEN_FILE": writeFile(t, "agent-token", "y")}))
	if err != nil {
		t.Fatalf("deploy config: %v", err)
	}
	if cfg.DataDir != "/var/lib/narwhal" || !cfg.Agents.Required || cfg.Listen != ":8080" {
		t.Fatalf("deploy config: unexpected %+v", cfg)
	}
}
