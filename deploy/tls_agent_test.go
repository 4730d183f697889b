package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/internal/syncbuf"
	"github.com/narwhal-io/narwhal/internal/testcert"
	"github.com/narwhal-io/narwhal/service"
)

// writeCA writes a CA and a server certificate it signed for 127.0.0.1
// into dir as a cert-manager Secret holds them: ca.crt, tls.crt, tls.key.
func writeCA(t *testing.T, dir string) {
	t.Helper()
	ca, err := testcert.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := testcert.Server(ca, 2, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.PEM, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAgentReportsOverTLSWithTheSecretsCA: what tls.existingSecret sets
// up, with the real agent binary. The core serves HTTPS with a
// certificate a private CA signed; an agent started with SSL_CERT_FILE at
// the CA (as the chart mounts it) reports over https and its node shows
// as reporting; the same agent without it refuses the core's certificate
// and never reports.
func TestAgentReportsOverTLSWithTheSecretsCA(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent binary")
	}
	dir := t.TempDir()
	writeCA(t, dir)
	bin := filepath.Join(dir, "narwhal-agent")
	if b, err := exec.Command("go", "build", "-o", bin, "../cmd/narwhal-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}

	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token, cfg.Auth.AgentToken = "router-token", "agent-token"
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	cfg.Agents.Required = false
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := service.New(cfg, c, nil, service.WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	reporting := func() bool {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return strings.Contains(rec.Body.String(), `narwhal_fleet_nodes{state="reporting"} 1`)
	}

	prom, err := os.ReadFile("../agent/testdata/vllm_new.prom")
	if err != nil {
		t.Fatal(err)
	}
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(prom) }))
	defer eng.Close()
	conf := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`node: gpu-node-1
core_url: https://%s/v1/agent/reports
scrape_interval_s: 0.05
heartbeat_interval_s: 0.1
backoff_min_s: 0.05
backoff_max_s: 0.2
liveness: none
engines:
  - id: e1
    kind: vllm
    metrics_url: %s/metrics
    gpus: ["0"]
`, srv.Addr(), eng.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	runAgent := func(env ...string) (stop func(), logs *syncbuf.Buffer) {
		cmd := exec.Command(bin, "run", "-config", conf, "-listen", "127.0.0.1:0")
		logs = &syncbuf.Buffer{}
		cmd.Stderr, cmd.Stdout = logs, logs
		cmd.Env = append(os.Environ(), append([]string{"NARWHAL_AGENT_TOKEN=agent-token"}, env...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, logs
	}

	// Without the CA: the handshake fails and nothing reports.
	other := t.TempDir()
	writeCA(t, other) // another CA, not the signer
	stop, logs := runAgent("SSL_CERT_FILE=" + filepath.Join(other, "ca.crt"))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "certificate") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if reporting() || !strings.Contains(logs.String(), "certificate signed by unknown authority") {
		t.Fatalf("without the CA: reporting %v; want a refused certificate in the agent's log:\n%s", reporting(), logs.String())
	}

	// With SSL_CERT_FILE at the CA, as the chart sets it.
	stop, logs = runAgent("SSL_CERT_FILE=" + filepath.Join(dir, "ca.crt"))
	defer stop()
	for deadline := time.Now().Add(20 * time.Second); !reporting(); {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not report over TLS within 20 s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
