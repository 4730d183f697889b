package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const restartToken = "restart-test-token"

// coreProc is one run of the built binary.
type coreProc struct {
	cmd    *exec.Cmd
	base   string
	stderr *bytes.Buffer
	done   chan error
}

// startBinary runs bin with args and waits for its "serving" log line,
// which carries the bound address.
func startBinary(t *testing.T, bin string, args ...string) *coreProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NARWHAL_AUTH_TOKEN="+restartToken)
	pr, pw := io.Pipe()
	var logs bytes.Buffer
	cmd.Stderr = io.MultiWriter(pw, &logs)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &coreProc{cmd: cmd, stderr: &logs, done: make(chan error, 1)}
	go func() { err := cmd.Wait(); pw.Close(); p.done <- err }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if !sent && json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				addr <- rec.Addr
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		p.base = "http://" + a
	case err := <-p.done:
		t.Fatalf("binary exited before serving: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("binary did not start serving\n%s", logs.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGTERM and requires a clean exit.
func (p *coreProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("no exit after SIGTERM\n%s", p.stderr.String())
	}
}

func (p *coreProc) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (p *coreProc) postEvents(t *testing.T, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+restartToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "narwhal-core")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestHelpAndBadConfig(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--core.step_s") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--http.max_body_bytes=-1")
	cmd.Env = append(os.Environ(), "NARWHAL_AUTH_TOKEN=x")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "http.max_body_bytes must be > 0, got -1") {
		t.Fatalf("bad config: %v\n%s", err, out)
	}
}
