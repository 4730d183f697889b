package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/coreproc"
)

// restartToken is the routers' token the binary runs with.
const restartToken = coreproc.Token

// coreProc is one run of the built binary (internal/coreproc, shared
// with service/diskfull).
type coreProc = coreproc.Proc

// startBinary runs bin with args and waits for its "serving" log line.
func startBinary(t *testing.T, bin string, args ...string) *coreProc {
	t.Helper()
	return coreproc.Start(t, bin, args...)
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

// TestMain removes the binary built (once) for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildBinary builds cmd/narwhal-core once per test run with `go build`.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "narwhal-core-test"); buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "narwhal-core")
		buildErr = coreproc.Build(builtBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
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

type decisionRec struct {
	Seq     uint64 `json:"seq"`
	AtNs    int64  `json:"at_ns"`
	Action  string `json:"action"`
	Reason  string `json:"reason"`
	Blocked string `json:"blocked_gate"`
	Moves   []struct {
		EngineID string `json:"engine_id"`
		From     string `json:"from"`
		To       string `json:"to"`
	} `json:"moves"`
}

// loadUntil offers decode-heavy traffic (short prompts, long outputs) at
// perTick requests per 200 ms (2 push one OPT-13B decode engine over
// target, 4 push two) until stop returns true or the deadline passes.
// The rate is the arrivals' timestamps', not the loop's: each post
// carries every arrival due since the last one (a slow round trip, e.g.
// under -race on a loaded machine, makes bigger posts, not less demand;
// at most 5 s of arrivals are caught up).
func loadUntil(t *testing.T, p *coreProc, perTick int, deadline time.Duration, stop func() bool) bool {
	t.Helper()
	gap := int64(200*time.Millisecond) / int64(perTick)
	end := time.Now().Add(deadline)
	next := time.Now().UnixNano()
	for time.Now().Before(end) {
		var b strings.Builder
		now := time.Now().UnixNano()
		next = max(next, now-int64(5*time.Second))
		for ; next <= now; next += gap {
			fmt.Fprintf(&b, "{\"type\":\"offer_started\",\"ts_ns\":%d}\n", next)
			fmt.Fprintf(&b, "{\"type\":\"sized\",\"ts_ns\":%d,\"est_input_tokens\":100,\"requested_output_tokens\":512}\n", next)
		}
		if r := p.PostEvents(t, b.String()); !strings.HasPrefix(r, "200 ") {
			t.Fatalf("POST /v1/events: %s", r)
		}
		if stop() {
			return true
		}
		time.Sleep(200 * time.Millisecond) // real time: the binary runs on the wall clock
	}
	return false
}

// Acceptance 4: through the binary, a move's journal record and the
// controller's cooldown/dwell state (roles, last move times, sequence)
// survive SIGTERM and a restart.
func TestRestartKeepsJournalAndCooldown(t *testing.T) {
	bin := buildBinary(t)
	data := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "core.yaml")
	cfg := fmt.Sprintf(`listen: "127.0.0.1:0"
data_dir: %q
agents: {required: false}
engines:
  - {id: e1, node: n1, model: facebook/opt-13b, gpu: A100-80GB, role: prefill, kv_capacity_tokens: 66144}
  - {id: e2, node: n1, model: facebook/opt-13b, gpu: A100-80GB, role: prefill, kv_capacity_tokens: 66144}
  - {id: e3, node: n1, model: facebook/opt-13b, gpu: A100-80GB, role: prefill, kv_capacity_tokens: 66144}
  - {id: e4, node: n1, model: facebook/opt-13b, gpu: A100-80GB, role: decode, kv_capacity_tokens: 66144}
core:
  step_s: 0.2
  demand_window_s: 5
  min_evidence_span_s: 1
  monitor_interval_s: 1
  controller: {confirm_steps: 1, cooldown_s: 3600, dwell_s: 3600, prediction_arrivals: 0}
`, data)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	p := startBinary(t, bin, "--config", cfgPath)
	var move decisionRec
	found := loadUntil(t, p, 2, 20*time.Second, func() bool {
		var r struct{ Decisions []decisionRec }
		p.GetJSON(t, "/v1/decisions?limit=1000", &r)
		for _, d := range r.Decisions {
			if len(d.Moves) > 0 {
				move = d
				return true
			}
		}
		return false
	})
	if !found {
		var r struct{ Decisions []decisionRec }
		p.GetJSON(t, "/v1/decisions?limit=20", &r)
		t.Fatalf("no move within 20 s of decode-heavy load; first decisions: %+v", r.Decisions)
	}
	mv := move.Moves[0]
	var before struct{ Decisions []decisionRec }
	p.GetJSON(t, "/v1/decisions?limit=1000", &before)
	p.Stop(t)
	lastSeq := before.Decisions[len(before.Decisions)-1].Seq

	// The journal file holds the move's record.
	journal, err := os.ReadFile(filepath.Join(data, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var inFile bool
	lines := strings.Split(strings.TrimSpace(string(journal)), "\n")
	for _, l := range lines {
		var d decisionRec
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("journal line %q: %v", l, err)
		}
		if d.Seq == move.Seq && len(d.Moves) == 1 && d.Moves[0].EngineID == mv.EngineID {
			inFile = true
		}
	}
	if !inFile {
		t.Fatalf("journal.jsonl lacks decision %d moving %s", move.Seq, mv.EngineID)
	}
	if uint64(len(lines)) < lastSeq {
		t.Fatalf("journal.jsonl has %d records; want >= %d (every decision, holds included)", len(lines), lastSeq)
	}

	// Restart with the same data directory and the same config (which
	// still lists the moved engine in its old role).
	p = startBinary(t, bin, "--config", cfgPath)
	var st struct {
		Engines []struct {
			ID         string `json:"id"`
			Role       string `json:"role"`
			LastMoveNs int64  `json:"last_move_ns"`
		} `json:"engines"`
	}
	p.GetJSON(t, "/v1/state", &st)
	var movedOK bool
	for _, e := range st.Engines {
		if e.ID == mv.EngineID {
			movedOK = e.Role == mv.To && e.LastMoveNs == move.AtNs
			if !movedOK {
				t.Fatalf("after restart engine %s is %s with last_move_ns %d; want %s and %d (dwell must survive)", e.ID, e.Role, e.LastMoveNs, mv.To, move.AtNs)
			}
		}
	}
	if !movedOK {
		t.Fatalf("after restart engine %s is missing from /v1/state", mv.EngineID)
	}
	var after struct{ Decisions []decisionRec }
	p.GetJSON(t, "/v1/decisions?limit=1000", &after)
	var kept bool
	for _, d := range after.Decisions {
		if d.Seq == move.Seq && len(d.Moves) == 1 {
			kept = true
		}
	}
	if !kept {
		t.Fatalf("after restart /v1/decisions lacks the move decision %d", move.Seq)
	}
	// Heavier decode load: the controller wants another prefill engine in
	// decode, and the restored cooldown (3600 s since the move before the
	// restart) blocks it; the journal continues with new sequence numbers.
	var blocked decisionRec
	loadUntil(t, p, 4, 20*time.Second, func() bool {
		p.GetJSON(t, "/v1/decisions?limit=1000", &after)
		for _, d := range after.Decisions {
			if d.Seq > lastSeq && len(d.Moves) > 0 {
				t.Fatalf("decision %d moved %v within the restored cooldown", d.Seq, d.Moves)
			}
			if d.Seq > lastSeq && d.Blocked == "cooldown" {
				blocked = d
				return true
			}
		}
		return false
	})
	if blocked.Seq == 0 {
		var b strings.Builder
		for _, d := range after.Decisions {
			if d.Seq > lastSeq {
				fmt.Fprintf(&b, "\n  %d %s %q %s", d.Seq, d.Action, d.Blocked, d.Reason)
			}
		}
		t.Fatalf("after restart no decision was blocked by the restored cooldown; decisions since the restart:%s", b.String())
	}
	p.Stop(t)
}
