package service

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Acceptance 5: `promtool check metrics` (Debian package prometheus)
// passes on the /metrics output after events of every outcome were served.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (install Debian's prometheus package, as .ci/run does); skipping the /metrics lint")
	}
	s := newTestServer(t, testConfig(), metricsCore(t))
	exerciseForMetrics(t, s)
	code, body := get(t, s.Handler(), "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: got %d", code)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics failed: %v\n%s", err, out.String())
	}
	for _, m := range []string{"narwhal_http_requests_total", "narwhal_demand_history_observations", "narwhal_controller_decisions_total", "narwhal_fleet_reports_total", "go_goroutines"} {
		if !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s", m)
		}
	}
}

// exerciseForMetrics serves one accepted and one refused line and one
// agent report so that every metric family has samples.
func exerciseForMetrics(t *testing.T, s *Server) {
	t.Helper()
	post(t, s.Handler(), "/v1/events", testToken, fmt.Sprintf("{\"type\":\"refused\",\"ts_ns\":%d}\nbad\n", testNow))
	get(t, s.Handler(), "/v1/state")
	report := fmt.Sprintf(`{"version":1,"reports":[{"kind":"heartbeat","node":"n1","epoch":1,"seq":1,"sent_ns":%d}]}`, testNow)
	if code, body := post(t, s.Handler(), "/v1/agent/reports", testAgentToken, report); code != 200 {
		t.Fatalf("agent heartbeat: %d %s", code, body)
	}
}
