// Package coreproc runs the real narwhal-core binary for tests: Build
// compiles it with `go build`, Start runs it and waits for its "serving"
// log line (StartDemo: its demo, and the demo's address line), a Proc
// answers HTTP (GetJSON, PostEvents) and ends (Stop: SIGTERM and a clean
// exit; Kill: SIGKILL), and ReadJournal reads the whole records of a data
// directory's journal files as they lie on disk. cmd/narwhal-core's
// restart, crash and resource tests, service/diskfull and refdocs' live
// Prometheus test use it.
//
// Concurrency: a Proc's methods may be called from one test goroutine;
// Stderr is safe to read while the process writes it. Allocation: test
// code, not for benchmarks.
package coreproc

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
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

// Token is the routers' bearer token Start gives the binary
// (NARWHAL_AUTH_TOKEN).
const Token = "restart-test-token"

// Package is the import path Build compiles.
const Package = "github.com/narwhal-io/narwhal/cmd/narwhal-core"

// Build compiles narwhal-core into out with `go build` and the given build
// tags; the error carries the compiler's output.
func Build(out string, tags ...string) error {
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-o", out, Package)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", Package, err, b)
	}
	return nil
}

// Proc is one run of the built binary.
type Proc struct {
	Cmd *exec.Cmd
	// Base is http://host:port of the API listener.
	Base string
	// Stderr holds the process's logs so far (JSON lines).
	Stderr *Log
	// Done receives the process's exit (cmd.Wait's error) once.
	Done chan error
}

// Log is a buffer safe for one writer and concurrent readers.
type Log = syncbuf.Buffer

// Start runs bin with args (the environment plus NARWHAL_AUTH_TOKEN=Token)
// and waits for its "serving" log line, which carries the bound address.
// A cleanup kills the process if the test has not ended it.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	return start(t, bin, args, func(line []byte) string {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" {
			return rec.Addr
		}
		return ""
	})
}

// demoAddr is the address on the demo's first stderr line ("narwhal-core
// demo: status page on http://ADDR/ ...").
var demoAddr = regexp.MustCompile(`^narwhal-core demo: status page on http://(\S+)/`)

// StartDemo runs bin --demo with args (--listen 127.0.0.1:0 --pace N ...)
// and waits for the demo's first line, which carries the bound address
// (the demo logs at warn level: no "serving" line). The simulated cluster
// replays the bundled trace while the process lives; it exits when the
// replay ends. A cleanup kills the process if the test has not ended it.
func StartDemo(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	return start(t, bin, append([]string{"--demo"}, args...), func(line []byte) string {
		if m := demoAddr.FindSubmatch(line); m != nil {
			return string(m[1])
		}
		return ""
	})
}

// start runs bin and waits for the first stderr line from which addrOf
// reads the bound address.
func start(t testing.TB, bin string, args []string, addrOf func(line []byte) string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NARWHAL_AUTH_TOKEN="+Token)
	pr, pw := io.Pipe()
	logs := &Log{}
	cmd.Stderr = io.MultiWriter(pw, logs)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Stderr: logs, Done: make(chan error, 1)}
	go func() { err := cmd.Wait(); pw.Close(); p.Done <- err }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			if a := addrOf(sc.Bytes()); !sent && a != "" {
				addr <- a
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		p.Base = "http://" + a
	case err := <-p.Done:
		t.Fatalf("binary exited before serving: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("binary did not start serving\n%s", logs.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.Done
		}
	})
	return p
}

// Stop sends SIGTERM and requires a clean exit.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.Done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Stderr.String())
		}
	case <-time.After(20 * time.Second):
		p.Cmd.Process.Kill()
		t.Fatalf("no exit after SIGTERM\n%s", p.Stderr.String())
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done
}

// Get returns the status and body of GET path.
func (p *Proc) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(p.Base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// GetJSON decodes the 200 answer of GET path into v.
func (p *Proc) GetJSON(t testing.TB, path string, v any) {
	t.Helper()
	code, b := p.Get(t, path)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

// PostEvents posts body to /v1/events with Token and returns "<status>
// <body>".
func (p *Proc) PostEvents(t testing.TB, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.Base+"/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// Record is the part of a journal record (controller.Decision) the
// tests read.
type Record struct {
	Seq     uint64 `json:"seq"`
	AtNs    int64  `json:"at_ns"`
	Action  string `json:"action"`
	Reason  string `json:"reason"`
	Blocked string `json:"blocked_gate"`
	Moves   []Move `json:"moves"`
	// Raw is the record's line as it lies in the file.
	Raw []byte `json:"-"`
}

// Move is one move of a Record.
type Move struct {
	EngineID string `json:"engine_id"`
	From     string `json:"from"`
	To       string `json:"to"`
	AtNs     int64  `json:"at_ns"`
}

// ReadJournal reads every whole record of the data dir's journal files
// (rotated segments first, then journal.jsonl); a torn last line is
// ignored (the next open cuts it off), a whole line that is not a record
// fails the test.
func ReadJournal(t testing.TB, dir string) []Record {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "journal-*.jsonl"))
	sort.Strings(names)
	names = append(names, filepath.Join(dir, "journal.jsonl"))
	var out []Record
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				break // torn tail
			}
			var r Record
			if err := json.Unmarshal(b[:i], &r); err != nil {
				t.Fatalf("%s: a whole line that is not a record: %q: %v", filepath.Base(n), b[:i], err)
			}
			r.Raw = b[:i:i]
			out = append(out, r)
			b = b[i+1:]
		}
	}
	return out
}

// Replay applies the moves of recs to initial (engine id -> role) and
// returns the roles they leave.
func Replay(initial map[string]string, recs []Record) map[string]string {
	out := make(map[string]string, len(initial))
	for k, v := range initial {
		out[k] = v
	}
	for _, r := range recs {
		for _, m := range r.Moves {
			out[m.EngineID] = m.To
		}
	}
	return out
}

// MoverConfig writes, in dir, a core configuration for a binary test
// that makes the controller move engines at once: eleven OPT-13B
// engines on A100-80GB, e01-e10 prefill and e11 decode, journal and
// state in dataDir, 0.1-s steps and a 5-s demand window; extra is more
// top-level YAML (e.g. "journal: {retry_s: 0.1}\n"), ctl the controller
// settings' flow mapping. It returns the file's path and the engines'
// initial roles.
func MoverConfig(t testing.TB, dir, dataDir, extra, ctl string) (string, map[string]string) {
	t.Helper()
	initial := map[string]string{}
	var eng strings.Builder
	for i := 1; i <= 11; i++ {
		id, role := fmt.Sprintf("e%02d", i), "prefill"
		if i == 11 {
			role = "decode"
		}
		initial[id] = role
		fmt.Fprintf(&eng, "  - {id: %s, node: n1, model: facebook/opt-13b, gpu: A100-80GB, role: %s, kv_capacity_tokens: 66144}\n", id, role)
	}
	cfg := fmt.Sprintf(`listen: "127.0.0.1:0"
data_dir: %q
agents: {required: false}
%sengines:
%score:
  step_s: 0.1
  demand_window_s: 5
  min_evidence_span_s: 1
  monitor_interval_s: 1
  controller: {%s}
`, dataDir, extra, eng.String(), ctl)
	path := filepath.Join(dir, "core.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, initial
}
