package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/wire"
)

// The agents' endpoint is mounted: a report registers its engines in the
// real core, makes /readyz ready while fresh, and events can then name the
// engine; stale agent data makes /readyz unready again.
func TestAgentReportsMountedAndReadiness(t *testing.T) {
	var now atomic.Int64
	now.Store(testNow)
	cfg := testConfig()
	cfg.Agents.Required = true
	cfg.Agents.StaleAfterS = 15
	rc := newRealCore(t)
	s, err := New(cfg, rc, nil, WithClock(now.Load), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := s.Handler()
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before any report: got %d; want 503", code)
	}
	batch := wire.Batch{Version: wire.Version, Reports: []wire.Report{
		{Kind: wire.KindHello, Node: "n1", Epoch: 1, Seq: 1, SentNs: testNow,
			Hello: &wire.Hello{AgentVersion: "test", NVML: "ok", Liveness: "proc", Engines: []string{"a1"}}},
		{Kind: wire.KindSnapshot, Node: "n1", Epoch: 1, Seq: 2, SentNs: testNow,
			Snapshot: &wire.Snapshot{Engines: []wire.EngineReport{{ID: "a1", Model: "facebook/opt-13b", GPU: "A100-80GB",
				Role: controller.RoleDecode, Live: true, KVCapacityTokens: 66144, RunningRequests: -1, QueuedRequests: -1, ScrapedNs: testNow}}}},
	}}
	body, _ := json.Marshal(batch)
	postAgent := func(token string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/agent/reports", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, reply := postAgent("wrong"); code != http.StatusUnauthorized {
		t.Fatalf("agent report with a wrong token: got %d %s; want 401", code, reply)
	}
	// Issue 16 defect 10: the routers' token may not write agent reports
	// (it could overwrite any engine's KV capacity or liveness).
	if code, reply := postAgent(testToken); code != http.StatusUnauthorized {
		t.Fatalf("agent report with the routers' token: got %d %s; want 401", code, reply)
	}
	if code, reply := postAgent(testAgentToken); code != http.StatusOK {
		t.Fatalf("agent report: got %d %s; want 200", code, reply)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || !strings.Contains(body, "fresh agent data") {
		t.Fatalf("readyz after a report: got %d %s; want 200", code, body)
	}
	if _, st := get(t, h, "/v1/state"); !strings.Contains(st, `"id":"a1"`) {
		t.Fatalf("/v1/state lacks the reported engine a1: %s", st)
	}
	// ... and the agents' token may not write events.
	if code, reply := post(t, h, "/v1/events", testAgentToken, fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"a1","input_tokens":10}`, testNow)); code != http.StatusUnauthorized {
		t.Fatalf("events with the agents' token: got %d %s; want 401", code, reply)
	}
	if code, reply := post(t, h, "/v1/events", testToken, fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"a1","input_tokens":10}`, testNow)); code != 200 {
		t.Fatalf("admitted to the reported engine: got %d %s", code, reply)
	}
	now.Store(testNow + 16e9)
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz 16 s after the last report (stale_after_s 15): got %d; want 503", code)
	}
}

// An engine that no agent lists any more and that is not live leaves the
// engine table after agents.forget_after_s, counted on /metrics; an
// engine still listed (even not live), a configured one and a live one
// stay; with kubernetes.enabled discovery owns removal and nothing is
// forgotten. Without this, engine ids that follow pod names grew the table
// with every replaced pod.
func TestGoneEnginesAreForgotten(t *testing.T) {
	cfg := testConfig()
	cfg.Agents.ForgetAfterS = 600
	cfg.Engines = []EngineSeed{{ID: "static", Role: "prefill"}}
	rc := newRealCore(t)
	s := newTestServer(t, cfg, rc)
	snap := func(seq uint64, ids ...string) {
		t.Helper()
		var rs []wire.EngineReport
		for _, id := range ids {
			rs = append(rs, wire.EngineReport{ID: id, Role: controller.RoleDecode, Live: id != "sick",
				RunningRequests: -1, QueuedRequests: -1, ScrapedNs: testNow})
		}
		if err := s.Registry().Apply(testNow, &wire.Report{Kind: wire.KindSnapshot, Node: "n1", Epoch: 1, Seq: seq,
			SentNs: testNow, Snapshot: &wire.Snapshot{Engines: rs}}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		var out []string
		for _, e := range rc.Engines() {
			out = append(out, e.ID)
		}
		slices.Sort(out)
		return out
	}
	snap(1, "pod-a", "pod-b", "sick")
	snap(2, "pod-b", "sick") // pod-a replaced: unlisted and not live
	if got := ids(); !slices.Equal(got, []string{"pod-a", "pod-b", "sick", "static"}) {
		t.Fatalf("engines before any sweep: %v", got)
	}
	s.forgetGone(testNow)
	s.forgetGone(testNow + 599e9)
	if got := ids(); !slices.Equal(got, []string{"pod-a", "pod-b", "sick", "static"}) {
		t.Fatalf("engines 599 s after pod-a went (forget_after_s 600): %v", got)
	}
	s.cfg.Kubernetes.Enabled = true
	s.forgetGone(testNow + 700e9)
	if got := ids(); !slices.Equal(got, []string{"pod-a", "pod-b", "sick", "static"}) {
		t.Fatalf("engines with kubernetes.enabled: %v", got)
	}
	s.cfg.Kubernetes.Enabled = false
	s.forgetGone(testNow + 700e9)
	if got := ids(); !slices.Equal(got, []string{"pod-b", "sick", "static"}) {
		t.Fatalf("engines 700 s after pod-a went: %v", got)
	}
	if got := testutil.ToFloat64(s.forgotten); got != 1 {
		t.Fatalf("narwhal_engines_forgotten_total %v, want 1", got)
	}
	if len(s.goneSince) != 0 {
		t.Fatalf("gone-engine marks left: %v", s.goneSince)
	}
	// A gone engine that comes back before the deadline starts over.
	snap(3, "pod-b")
	s.forgetGone(testNow + 800e9)
	snap(4, "pod-b", "sick")
	s.forgetGone(testNow + 1500e9)
	if got := ids(); !slices.Equal(got, []string{"pod-b", "sick", "static"}) {
		t.Fatalf("engines after sick came back listed: %v", got)
	}
}
