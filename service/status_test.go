package service

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
)

// Papercut: GET /v1/decisions?limit=5 returns the newest five decisions
// (oldest first), not the oldest five; with since it pages forward.
func TestDecisionsLimitReturnsTheNewest(t *testing.T) {
	c := newRealCore(t, "e1", "e2")
	for i := int64(0); i < 12; i++ {
		c.Step(ts(float64(i)))
	}
	s := newTestServer(t, testConfig(), c)
	seqs := func(q string) []uint64 {
		t.Helper()
		code, body := get(t, s.Handler(), "/v1/decisions"+q)
		if code != 200 {
			t.Fatalf("GET /v1/decisions%s: %d %s", q, code, body)
		}
		var r struct{ Decisions []struct{ Seq uint64 } }
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, d := range r.Decisions {
			out = append(out, d.Seq)
		}
		return out
	}
	f := func(q, want string) {
		t.Helper()
		if got := fmt.Sprint(seqs(q)); got != want {
			t.Fatalf("unexpected seqs for %q; got %s; want %s", q, got, want)
		}
	}
	f("?limit=5", "[8 9 10 11 12]")
	f("?since=0&limit=5", "[1 2 3 4 5]")
	f("?since=10", "[11 12]")
	if got := seqs(""); len(got) != 12 || got[0] != 1 {
		t.Fatalf("default: got %v; want all 12 (default limit 100)", got)
	}
}

// Papercut: /v1/state shows "engines": [] (not null) before any engine
// registers, and the role lists likewise.
func TestStateListsAreNeverNull(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t))
	code, body := get(t, s.Handler(), "/v1/state")
	if code != 200 {
		t.Fatalf("GET /v1/state: %d %s", code, body)
	}
	for _, want := range []string{`"engines":[]`, `"prefill":[]`, `"decode":[]`} {
		if !strings.Contains(body, want) {
			t.Fatalf("/v1/state lacks %s: %s", want, body)
		}
	}
	if strings.Contains(body, `"engines":null`) {
		t.Fatalf("/v1/state has engines null: %s", body)
	}
}

// The status page is served at /, its assets under /ui/ from the binary,
// and the series grows by one sample per second of the service clock.
func TestStatusPageServed(t *testing.T) {
	now := testNow
	c := newRealCore(t, "e1", "e2", "e3")
	s, err := New(testConfig(), c, nil, WithClock(func() int64 { return now }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for path, want := range map[string]string{
		"/":             `<table id="decisions">`,
		"/ui/app.js":    "/ui/api/series",
		"/ui/style.css": "--prefill",
	} {
		if code, body := get(t, s.Handler(), path); code != 200 || !strings.Contains(body, want) {
			t.Fatalf("GET %s: got %d, body mentions %q: %v", path, code, want, strings.Contains(body, want))
		}
	}
	if code, body := get(t, s.Handler(), "/nope"); code != 404 || !strings.Contains(body, "no such endpoint") {
		t.Fatalf("GET /nope: got %d %s; want 404", code, body)
	}
	if code, _ := post(t, s.Handler(), "/", "", ""); code != 405 {
		t.Fatalf("POST /: got %d; want 405", code)
	}
	c.Step(now)
	if !s.page.Sample() {
		t.Fatal("first sample not taken")
	}
	if s.page.Sample() {
		t.Fatal("second sample within the same second taken")
	}
	now += 1e9
	c.Step(now)
	s.page.Sample()
	code, body := get(t, s.Handler(), "/ui/api/series")
	var r struct {
		Samples []struct {
			AtNs            int64 `json:"at_ns"`
			Prefill, Decode int
			TTFTMet         float64 `json:"ttft_met"`
		}
	}
	if err := json.Unmarshal([]byte(body), &r); code != 200 || err != nil {
		t.Fatalf("series: %d %v %s", code, err, body)
	}
	if len(r.Samples) != 2 || r.Samples[1].AtNs != now || r.Samples[1].Prefill+r.Samples[1].Decode != 3 || r.Samples[1].TTFTMet != -1 {
		t.Fatalf("unexpected series: %+v; want 2 samples, the last at %d with 3 serving engines and no attainment", r.Samples, now)
	}
}

// The SLO targets on /metrics are those of the core the service runs,
// also when it was built apart from cfg.Core (the demo's core, built by
// the simulator with TTFT 1.5 s, showed the service default 0.25 s).
func TestOperatorMetricsShowTheCoresSLOs(t *testing.T) {
	cc := core.DefaultConfig()
	cc.TTFTSLOS, cc.TPOTSLOS = 1.5, 0.08
	c, err := core.New(cc, core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, testConfig(), c) // cfg.Core: TTFT 0.25 s, TPOT 0.1 s
	_, m := get(t, s.Handler(), "/metrics")
	for _, want := range []string{"\nnarwhal_slo_ttft_seconds 1.5\n", "\nnarwhal_slo_tpot_seconds 0.08\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}

// The operator series: build info, one role and state series per engine,
// the SLO targets, the agents' reporting and the monotonic request
// counters, all on /metrics.
func TestOperatorMetrics(t *testing.T) {
	c := newRealCore(t, "e1", "e2")
	s := newTestServer(t, testConfig(), c)
	c.Step(testNow - 1e9)
	body := fmt.Sprintf("{\"type\":\"completed\",\"ts_ns\":%d,\"arrival_ns\":%d,\"first_token_ns\":%d,\"output_tokens\":5}\n{\"type\":\"refused\",\"ts_ns\":%d}\n",
		ts(-1), ts(-2), ts(-1.9), ts(-1))
	if code, reply := post(t, s.Handler(), "/v1/events", testToken, body); code != 200 {
		t.Fatalf("events: %d %s", code, reply)
	}
	_, m := get(t, s.Handler(), "/metrics")
	for _, want := range []string{
		`narwhal_build_info{goversion="go`,
		`narwhal_engine_role{engine="e1",node="n1",role="prefill"} 1`,
		`narwhal_engine_role{engine="e1",node="n1",role="decode"} 0`,
		`narwhal_engine_role{engine="e2",node="n1",role="decode"} 1`,
		`narwhal_engine_state{engine="e2",state="serving"} 1`,
		`narwhal_engine_state{engine="e2",state="draining"} 0`,
		`narwhal_slo_ttft_seconds 0.25`,
		`narwhal_slo_tpot_seconds 0.1`,
		`narwhal_fleet_nodes{state="silent"} 0`,
		`narwhal_agents_required 0`,
		`narwhal_requests_finished_total{outcome="completed"} 1`,
		`narwhal_requests_finished_total{outcome="refused"} 1`,
		`narwhal_requests_ttft_met_total{outcome="completed"} 1`,
		`narwhal_requests_tpot_met_total{outcome="completed"} 0`,
		`narwhal_requests_slo_met_total{outcome="completed"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
}
