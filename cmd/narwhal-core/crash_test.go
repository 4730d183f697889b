package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/coreproc"
)

var crashKills = flag.Int("crash.kills", 12, "SIGKILLs in TestCrashRecoveryUnderSIGKILL (issue 16 acceptance: 50)")

// Issue 16 acceptance 2: the service is SIGKILLed at random moments of a
// run that makes moves, with every journal and checkpoint write slowed
// (a test hook built with -tags narwhal_crashtest) so that kills land
// inside writes. After every restart the roles equal the journal's replay
// of the initial roles; no record is lost or duplicated (sequences run
// 1..N without a gap, and every record seen before a kill is still there,
// unchanged); no move is repeated inside cooldown or dwell.
func TestCrashRecoveryUnderSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary; skipped with -short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "narwhal-core-crashtest")
	if err := coreproc.Build(bin, "narwhal_crashtest"); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	const cooldownS, dwellS = 2, 2
	// Ten prefill engines and one decode engine under decode-heavy load:
	// the controller keeps moving engines to decode, one per cooldown.
	cfgPath, initial := coreproc.MoverConfig(t, dir, data, "",
		fmt.Sprintf("confirm_steps: 1, cooldown_s: %d, dwell_s: %d, prediction_arrivals: 0", cooldownS, dwellS))
	t.Setenv("NARWHAL_TEST_SLOW_WRITES_MS", "15")
	rng := rand.New(rand.NewPCG(16, 50))
	seen := map[uint64]string{} // records seen through /v1/decisions before a kill
	start := time.Now()
	for run := 0; run < *crashKills; run++ {
		p := startBinary(t, bin, "--config", cfgPath)
		// Roles right after the restart equal the journal's replay.
		var st struct {
			Engines []struct {
				ID   string `json:"id"`
				Role string `json:"role"`
			} `json:"engines"`
		}
		p.GetJSON(t, "/v1/state", &st)
		recs := coreproc.ReadJournal(t, data)
		want := coreproc.Replay(initial, recs)
		for _, e := range st.Engines {
			if want[e.ID] != e.Role {
				t.Fatalf("run %d: after restart %s is %s; the journal's replay (%d records) says %s", run, e.ID, e.Role, len(recs), want[e.ID])
			}
		}
		// Load until a random moment, then SIGKILL. The load turns from
		// decode-heavy (short prompts, long outputs) to prefill-heavy
		// every 5 runs, so that moves go both ways.
		in, out := 100, 512
		if (run/8)%2 == 1 {
			in, out = 6000, 8
		}
		killAt := time.Now().Add(time.Duration(300+rng.IntN(2200)) * time.Millisecond)
		for time.Now().Before(killAt) {
			var b strings.Builder
			now := time.Now().UnixNano()
			for r := 0; r < 12; r++ {
				a := now + int64(r)*1e6
				fmt.Fprintf(&b, "{\"type\":\"offer_started\",\"ts_ns\":%d}\n{\"type\":\"sized\",\"ts_ns\":%d,\"est_input_tokens\":%d,\"requested_output_tokens\":%d}\n", a, a, in, out)
			}
			req, _ := http.NewRequest(http.MethodPost, p.Base+"/v1/events", strings.NewReader(b.String()))
			req.Header.Set("Authorization", "Bearer "+restartToken)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			var ds struct {
				Decisions []json.RawMessage `json:"decisions"`
			}
			if resp, err := http.Get(p.Base + "/v1/decisions?limit=1000&since=0"); err == nil {
				_ = json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&ds)
				resp.Body.Close()
			}
			for _, raw := range ds.Decisions {
				var r coreproc.Record
				if json.Unmarshal(raw, &r) == nil {
					seen[r.Seq] = canonical(t, raw)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		p.Kill(t)
	}
	// Last start: recover, then stop cleanly.
	p := startBinary(t, bin, "--config", cfgPath)
	p.Stop(t)
	recs := coreproc.ReadJournal(t, data)
	var moves int
	lastMove := int64(0)
	lastEngine := map[string]int64{}
	lastRole := map[string]string{}
	for k, v := range initial {
		lastRole[k] = v
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d; want %d (no record lost or duplicated)", i, r.Seq, i+1)
		}
		for _, m := range r.Moves {
			moves++
			if lastMove != 0 && m.AtNs-lastMove < cooldownS*1e9 {
				t.Fatalf("seq %d moves %s %.2fs after the previous move (cooldown %ds)", r.Seq, m.EngineID, float64(m.AtNs-lastMove)/1e9, cooldownS)
			}
			if le := lastEngine[m.EngineID]; le != 0 && m.AtNs-le < dwellS*1e9 {
				t.Fatalf("seq %d moves %s %.2fs after its previous move (dwell %ds)", r.Seq, m.EngineID, float64(m.AtNs-le)/1e9, dwellS)
			}
			if lastRole[m.EngineID] != m.From || m.From == m.To {
				t.Fatalf("seq %d moves %s from %s to %s; the journal had it in %s (a repeated move)", r.Seq, m.EngineID, m.From, m.To, lastRole[m.EngineID])
			}
			lastMove, lastEngine[m.EngineID], lastRole[m.EngineID] = m.AtNs, m.AtNs, m.To
		}
	}
	// Every record seen through the API is in the journal unchanged.
	b := map[uint64]string{}
	for _, n := range append(globSorted(filepath.Join(data, "journal-*.jsonl")), filepath.Join(data, "journal.jsonl")) {
		raw, _ := os.ReadFile(n)
		for _, l := range bytes.Split(raw, []byte{'\n'}) {
			var r coreproc.Record
			if len(l) > 0 && json.Unmarshal(l, &r) == nil {
				b[r.Seq] = canonical(t, l)
			}
		}
	}
	for seq, s := range seen {
		if b[seq] != s {
			t.Fatalf("record %d seen through /v1/decisions before a kill differs in the journal:\n api     %s\n journal %s", seq, s, b[seq])
		}
	}
	why := map[string]int{}
	for _, r := range recs {
		why[r.Blocked+"|"+r.Reason]++
	}
	t.Logf("decisions by blocked gate|reason: %v", why)
	if moves == 0 {
		t.Fatalf("no move in %d records over %d kills: the run must make moves", len(recs), *crashKills)
	}
	t.Logf("%d kills in %v: %d records, %d moves, %d records seen through the API before kills, all consistent",
		*crashKills, time.Since(start).Round(time.Second), len(recs), moves, len(seen))
}

func canonical(t *testing.T, raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func globSorted(p string) []string {
	names, _ := filepath.Glob(p)
	sort.Strings(names)
	return names
}
