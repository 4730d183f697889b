package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
)

// TestFutureEventDoesNotExpireRetainedWindow (issue 16, item 1) over
// POST /v1/events: one sized event 29 s ahead (inside events.max_future_s)
// is refused with a 422 that says why and counted in
// narwhal_core_evidence_ahead_refused_total; the 300 arrivals of the
// window stay, and an ordinary event 40 s old is still accepted.
func TestFutureEventDoesNotExpireRetainedWindow(t *testing.T) {
	rc := newRealCore(t, "e1", "e2")
	s := newTestServer(t, testConfig(), rc)
	var b strings.Builder
	for i := range 300 {
		a := ts(-59 + float64(i)*0.19)
		fmt.Fprintf(&b, `{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":10}`+"\n", a, a)
	}
	if code, reply := post(t, s.Handler(), "/v1/events", testToken, b.String()); code != http.StatusOK {
		t.Fatalf("setup: %d %s", code, reply)
	}
	ahead := ts(29)
	code, reply := post(t, s.Handler(), "/v1/events", testToken,
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":10}`, ahead, ahead))
	if code != http.StatusUnprocessableEntity || !strings.Contains(reply, "ahead of the core's clock") || !strings.Contains(reply, `"refused":1`) {
		t.Fatalf("29 s ahead: %d %s; want 422 naming the core's clock", code, reply)
	}
	if got := rc.State(testNow).DemandHistory.Arrivals.Observations; got != 300 {
		t.Fatalf("arrivals %d; want the 300 retained", got)
	}
	old := ts(-40)
	if code, reply := post(t, s.Handler(), "/v1/events", testToken,
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":10}`, old, old)); code != http.StatusOK {
		t.Fatalf("an ordinary event 40 s old: %d %s", code, reply)
	}
	if code, reply := post(t, s.Handler(), "/v1/events", testToken,
		fmt.Sprintf(`{"type":"offer_abandoned","ts_ns":%d}`, ahead)); code != http.StatusUnprocessableEntity || !strings.Contains(reply, "ahead of the core's clock") {
		t.Fatalf("offer_abandoned ahead: %d %s", code, reply)
	}
	_, metrics := get(t, s.Handler(), "/metrics")
	if !strings.Contains(metrics, "narwhal_core_evidence_ahead_refused_total 2") {
		t.Fatalf("/metrics lacks narwhal_core_evidence_ahead_refused_total 2")
	}
}

// TestPendingTimeoutComesFromEventsConfig: events.pending_timeout_s sets
// the core's pending timeout, defaulting to http.read_timeout_s.
func TestPendingTimeoutComesFromEventsConfig(t *testing.T) {
	for _, tc := range []struct{ set, want float64 }{{0, 30}, {12, 12}} {
		cfg := testConfig()
		cfg.Events.PendingTimeoutS = tc.set
		c, err := NewCore(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Config().PendingTimeoutS; got != tc.want {
			t.Fatalf("events.pending_timeout_s %v: core pending timeout %v; want %v", tc.set, got, tc.want)
		}
		_ = c.Close()
	}
	cfg := testConfig()
	cfg.Events.PendingTimeoutS = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "events.pending_timeout_s") {
		t.Fatalf("negative pending timeout: %v", err)
	}
	var _ interface{ SetClock(func() int64) } = (*core.Core)(nil)
}
