package fuzz

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/narwhal-io/narwhal/agent"
)

// FuzzAgentConfig feeds arbitrary YAML to the agent's configuration
// loader (the DaemonSet's agent.yaml): it must never panic, must fail
// only with agent.ErrConfig, and what it accepts must validate again.
func FuzzAgentConfig(f *testing.F) {
	f.Add([]byte("node: t1\nscrape_interval_s: 0.02\nstale_after_s: 0.3\nliveness: none\nengines:\n  - id: e1\n    kind: vllm\n    metrics_url: http://127.0.0.1:1/metrics\n    gpus: [\"0\"]\n"))
	f.Add([]byte("core_url: http://narwhal-core-leader.narwhal.svc:8080/v1/agent/reports\ntoken_file: /var/run/secrets/narwhal/token\nliveness: auto\nkubernetes:\n  enabled: true\n  namespace: narwhal\n  roles:\n    preset: narwhal\n  default_kind: vllm\n"))
	f.Add([]byte("node: n\nengines:\n  - id: e1\n    kind: sglang\n    gpus: [\"0\", \"0\"]\n"))
	f.Add([]byte("scrape_interval_s: -1\n"))
	f.Add([]byte("::"))
	f.Fuzz(func(t *testing.T, yaml []byte) {
		path := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := agent.LoadConfig(path)
		if err != nil {
			if !errors.Is(err, agent.ErrConfig) {
				t.Fatalf("error without ErrConfig: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded a configuration that does not validate: %v", err)
		}
	})
}
