package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

// TestDemoServesStateWhileDeciding starts the demo main job (the bundled
// trace through the real core and the real HTTP service), reads /v1/state
// while the replay runs and sees decisions being made there and on stdout.
func TestDemoServesStateWhileDeciding(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, []string{"--listen", "127.0.0.1:0", "--pace", "40"}, &stdout, &stderr) }()

	addrRe := regexp.MustCompile(`status page on http://(\S+)/ `)
	var base string
	deadline := time.Now().Add(20 * time.Second)
	for base == "" {
		if m := addrRe.FindStringSubmatch(stderr.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("demo ended before serving: %v\nstderr:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no API address on stderr after 20 s:\n%s", stderr.String())
		}
	}

	type state struct {
		Engines []struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		} `json:"engines"`
		DemandHistory struct {
			Arrivals struct {
				Observations int64 `json:"observations"`
			} `json:"arrivals"`
		} `json:"demand_history"`
		LatestDecision *struct {
			Seq   uint64 `json:"seq"`
			Basis string `json:"decision_basis"`
		} `json:"latest_decision"`
	}
	read := func() state {
		t.Helper()
		resp, err := http.Get(base + "/v1/state")
		if err != nil {
			t.Fatalf("GET /v1/state: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/state: status %d", resp.StatusCode)
		}
		var st state
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("decode /v1/state: %v", err)
		}
		return st
	}
	var first uint64
	var st state
	for deadline = time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st = read()
		if st.LatestDecision == nil {
			continue
		}
		if first == 0 {
			first = st.LatestDecision.Seq
			continue
		}
		if st.LatestDecision.Seq > first+5 {
			break
		}
	}
	if st.LatestDecision == nil || st.LatestDecision.Seq <= first+5 {
		t.Fatalf("decisions did not advance in /v1/state: first %d, latest %+v", first, st.LatestDecision)
	}
	if len(st.Engines) != 16 {
		t.Errorf("engines in /v1/state: got %d, want 16", len(st.Engines))
	}
	if st.DemandHistory.Arrivals.Observations == 0 {
		t.Errorf("no arrivals in demand_history while the trace replays")
	}
	switch st.LatestDecision.Basis {
	case "offered_demand", "observed_pressure", "recovery", "no_engines":
	default:
		t.Errorf("latest decision basis %q is not one of the documented values", st.LatestDecision.Basis)
	}
	// The demo takes no writes over HTTP (the simulator drives the core in
	// process): events and agent reports are refused without a token, and
	// the engine table still holds the simulator's 16 engines.
	for _, path := range []string{"/v1/events", "/v1/agent/reports"} {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(`{"engine":"intruder"}`+"\n"))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: status %d, want 401", path, resp.StatusCode)
		}
	}
	if n := len(read().Engines); n != 16 {
		t.Errorf("engines after the refused writes: %d, want 16", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo returned %v after cancel", err)
		}
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("demo did not stop after cancel; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) < int(st.LatestDecision.Seq) {
		t.Errorf("stdout has %d decision lines, want at least %d (one per decision)", len(lines), st.LatestDecision.Seq)
	}
	if !strings.HasPrefix(lines[0], "decision 1 ") {
		t.Errorf("first stdout line %q, want it to start with \"decision 1 \"", lines[0])
	}
}

func TestDemoFlagsRefuseBadValues(t *testing.T) {
	for _, args := range [][]string{{"--pace", "0"}, {"--pace", "NaN"}, {"--rate-scale", "-1"}, {"--engines", "1"}, {"extra"}, {"--nope"},
		{"--listen", ""}, {"--listen", ":8080"}, {"--listen", "localhost"}} {
		if _, err := parseDemo(args); err == nil {
			t.Errorf("parseDemo(%q): got nil error, want one", args)
		}
	}
	dc, err := parseDemo(nil)
	if err != nil || dc.listen != "127.0.0.1:8080" || dc.engines != 16 {
		t.Fatalf("parseDemo(nil) = %+v, %v; want the documented defaults", dc, err)
	}
	for _, l := range []string{"0.0.0.0:8080", "[::1]:0", "localhost:0"} {
		if dc, err := parseDemo([]string{"--listen", l}); err != nil || dc.listen != l {
			t.Errorf("parseDemo(--listen %s) = %+v, %v; want it taken", l, dc, err)
		}
	}
}

// TestDemoDecidesTheSameFromAnyStartWithinTheMinute runs the whole demo
// replay twice, started at two wall-clock times 41.337 s apart within
// one minute, and requires the same decisions and the same summary: the
// replay starts on the minute, so the core's buckets cut the trace at
// the same offsets (from the raw start, runs differed by a point of SLO
// attainment).
func TestDemoDecidesTheSameFromAnyStartWithinTheMinute(t *testing.T) {
	defer func(f func() time.Time) { demoNow = f }(demoNow)
	minute := time.Date(2026, 12, 2, 17, 4, 0, 0, time.UTC)
	run := func(at time.Time) (decisions, summary string) {
		t.Helper()
		demoNow = func() time.Time { return at }
		var stdout, stderr syncbuf.Buffer
		if err := runDemo(context.Background(), []string{"--listen", "127.0.0.1:0", "--pace", "1000000"}, &stdout, &stderr); err != nil {
			t.Fatalf("demo at %v: %v\nstderr:\n%s", at, err, stderr.String())
		}
		i := strings.Index(stderr.String(), "SLO attainment")
		if i < 0 {
			t.Fatalf("demo at %v: no summary on stderr:\n%s", at, stderr.String())
		}
		summary = stderr.String()[i:]
		if j := strings.Index(summary, "events"); j >= 0 {
			summary = summary[:j] // the wall time after it differs
		}
		return stdout.String(), summary
	}
	d1, s1 := run(minute)
	d2, s2 := run(minute.Add(41337 * time.Millisecond))
	if n := strings.Count(d1, "\n"); n < 100 {
		t.Fatalf("only %d decision lines:\n%s", n, d1)
	}
	if !strings.Contains(s1, "moves") {
		t.Fatalf("summary without moves:\n%s", s1)
	}
	if d1 != d2 {
		a, b := strings.Split(d1, "\n"), strings.Split(d2, "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("decision %d differs between the two starts:\n%s\n%s", i, a[i], b[i])
			}
		}
		t.Fatalf("decision counts differ: %d vs %d", len(a), len(b))
	}
	if s1 != s2 {
		t.Fatalf("summaries differ:\n%s\n---\n%s", s1, s2)
	}
	if got, want := demoStartNs(minute.Add(59999*time.Millisecond)), minute.UnixNano(); got != want {
		t.Fatalf("demoStartNs(%v + 59.999 s) = %d, want %d", minute, got, want)
	}
}
