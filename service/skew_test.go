package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
)

// skewCore is newRealCore with core.future_tolerance_s set (0: the
// default, one demand bucket).
func skewCore(t *testing.T, futureTolS float64) *core.Core {
	t.Helper()
	cfg := core.DefaultConfig()
	cfg.FutureToleranceS = futureTolS
	c := newRealCoreWith(t, cfg, "e1", "e2")
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lifecycle is one request's sized, first_token and completed lines, all
// stamped on one router's clock.
func lifecycle(b *strings.Builder, arrival int64, ttftS, tpotS float64, out int64) {
	ft := arrival + int64(ttftS*1e9)
	done := ft + int64(float64(out-1)*tpotS*1e9)
	fmt.Fprintf(b, `{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":%d}`+"\n", arrival, arrival, out)
	fmt.Fprintf(b, `{"type":"first_token","ts_ns":%d,"arrival_ns":%d}`+"\n", ft, arrival)
	fmt.Fprintf(b, `{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"output_tokens":%d,"requested_output_tokens":%d}`+"\n", done, arrival, ft, out, out)
}

func ingestReply(t *testing.T, reply string) IngestReply {
	t.Helper()
	var r IngestReply
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		t.Fatalf("reply %q: %v", reply, err)
	}
	return r
}

// skewState is the part of GET /v1/state these tests read.
type skewState struct {
	DemandHistory buckets.DemandHistory `json:"demand_history"`
	Attainment    core.AttainmentState  `json:"attainment"`
}

func stateOf(t *testing.T, s *Server) skewState {
	t.Helper()
	code, body := get(t, s.Handler(), "/v1/state")
	if code != http.StatusOK {
		t.Fatalf("/v1/state: %d %s", code, body)
	}
	var st skewState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Two routers, one 2 s ahead (inside max_future_s and a 5 s
// core.future_tolerance_s) and one 40 s behind (inside max_past_s and
// the 60 s demand window), each reporting its own requests' whole
// lifecycles: every arrival and completion is counted once, and
// attainment follows each request's own latencies (A's meet both SLOs,
// B's miss TTFT), unaffected by the clocks' offsets.
func TestSkewedRoutersCountDemandAndAttainmentOnce(t *testing.T) {
	rc := skewCore(t, 5)
	s := newTestServer(t, testConfig(), rc)
	const n = 20
	var a, b strings.Builder
	for i := range n {
		real := -10 + float64(i)*0.5 // real arrival times, the last 0.5 s ago
		lifecycle(&a, ts(real+2), 0.1, 0.05, 11)
		lifecycle(&b, ts(real-40), 0.5, 0.05, 11)
	}
	for name, body := range map[string]string{"A (+2 s)": a.String(), "B (-40 s)": b.String()} {
		code, reply := post(t, s.Handler(), "/v1/events", testToken, body)
		if r := ingestReply(t, reply); code != http.StatusOK || r.Accepted != 3*n || r.Refused != 0 {
			t.Fatalf("router %s: %d %s", name, code, reply)
		}
	}
	st := stateOf(t, s)
	if got := st.DemandHistory.Arrivals.Observations; got != 2*n {
		t.Fatalf("arrivals %d; want %d, each router's once", got, 2*n)
	}
	if got := st.DemandHistory.Outputs.Observations; got != 2*n {
		t.Fatalf("outputs %d; want %d", got, 2*n)
	}
	want := buckets.Counts{TTFTMet: n, TPOTMet: 2 * n, Total: 2 * n}
	if got := st.Attainment.ByOutcome["completed"]; got != want {
		t.Fatalf("completed attainment %+v; want %+v (A's meet both SLOs, B's miss TTFT only)", got, want)
	}

	// A request's later event stamped by the other router: B's first
	// token for A's arrival lies 42 s before it, and is refused, not
	// counted as a TTFT of any length.
	arr := ts(1.5)
	code, reply := post(t, s.Handler(), "/v1/events", testToken,
		fmt.Sprintf(`{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"output_tokens":1}`, ts(-39), arr, ts(-39.5)))
	if code != http.StatusUnprocessableEntity || !strings.Contains(reply, "arrival_ns") {
		t.Fatalf("completion stamped before its arrival: %d %s; want 422 naming arrival_ns", code, reply)
	}
	if got := stateOf(t, s).Attainment.ByOutcome["completed"]; got != want {
		t.Fatalf("after the refused line: %+v; want %+v", got, want)
	}
}

// A router whose clock steps back mid-stream. By 5 s (five demand
// buckets, inside the window): every line is accepted and counted.
// By a further 90 s (past the 60 s demand window, inside max_past_s):
// the arrivals are refused by the core as outside the retained history,
// each line answered with its reason, and the window's demand stays as
// it was; a completion whose arrival was stamped before the step lies
// after its own ts_ns and is refused. Counters match the replies; Step
// does not panic and is not stuck.
func TestRouterClockSteppingBackKeepsTheWindow(t *testing.T) {
	rc := skewCore(t, 0)
	s := newTestServer(t, testConfig(), rc)
	sized := func(b *strings.Builder, at int64) {
		fmt.Fprintf(b, `{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":10}`+"\n", at, at)
	}
	var before, after strings.Builder
	for i := range 40 { // real -30 .. -10.5
		sized(&before, ts(-30+float64(i)*0.5))
	}
	for i := range 20 { // real -10 .. -0.5, stamped 5 s back
		sized(&after, ts(-15+float64(i)*0.5))
	}
	for _, body := range []string{before.String(), after.String()} {
		if code, reply := post(t, s.Handler(), "/v1/events", testToken, body); code != http.StatusOK {
			t.Fatalf("before/after a 5 s step back: %d %s", code, reply)
		}
	}
	rc.Step(testNow)
	if got := stateOf(t, s).DemandHistory.Arrivals.Observations; got != 60 {
		t.Fatalf("arrivals after a 5 s step back %d; want all 60", got)
	}
	if rc.Stuck() || rc.ClockBehindNs() != 0 {
		t.Fatalf("stuck %v behind %d; want neither", rc.Stuck(), rc.ClockBehindNs())
	}

	// 90 s further back: refused, the window kept.
	var far strings.Builder
	for i := range 10 {
		sized(&far, ts(-95+float64(i)*0.5))
	}
	// A request that arrived before the step and completed after it.
	fmt.Fprintf(&far, `{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"output_tokens":1}`+"\n", ts(-94), ts(-1), ts(-1))
	code, reply := post(t, s.Handler(), "/v1/events", testToken, far.String())
	r := ingestReply(t, reply)
	if code != http.StatusUnprocessableEntity || r.Accepted != 0 || r.Refused != 11 || len(r.Errors) != 11 {
		t.Fatalf("90 s further back: %d %s; want 422, 11 refused", code, reply)
	}
	for _, e := range r.Errors[:10] {
		if !strings.Contains(e.Error, "outside the retained history") {
			t.Fatalf("line %d: %q; want outside the retained history", e.Line, e.Error)
		}
	}
	if e := r.Errors[10]; !strings.Contains(e.Error, "arrival_ns") {
		t.Fatalf("the completion across the step: %q; want arrival_ns named", e.Error)
	}
	rc.Step(testNow)
	st := stateOf(t, s)
	if got := st.DemandHistory.Arrivals.Observations; got != 60 {
		t.Fatalf("arrivals after refused stale lines %d; want the 60 kept", got)
	}
	if got := st.Attainment.ByOutcome["completed"].Total; got != 0 {
		t.Fatalf("completions %d; want none recorded", got)
	}
	_, metrics := get(t, s.Handler(), "/metrics")
	for _, line := range []string{
		`narwhal_http_events_total{result="accepted",type="sized"} 60`,
		`narwhal_http_events_total{result="refused",type="sized"} 10`,
		`narwhal_http_events_total{result="refused",type="completed"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Fatalf("/metrics lacks %s", line)
		}
	}
}

// ts_ns exactly at the limits is accepted, one nanosecond past is
// refused: events.max_past_s (600 s) and events.max_future_s (30 s, with
// core.future_tolerance_s 30 so the core does not refuse first), and
// core.future_tolerance_s at its default of one demand bucket (1 s).
func TestTimestampLimitsAreInclusive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tolS    float64
		at      int64
		refused string // "" accepted
	}{
		{"max_past", 0, testNow - 600e9, ""},
		{"max_past+1ns", 0, testNow - 600e9 - 1, "in the past of the server's clock"},
		{"max_future", 30, testNow + 30e9, ""},
		{"max_future+1ns", 30, testNow + 30e9 + 1, "in the future of the server's clock"},
		{"future_tolerance", 0, testNow + 1e9, ""},
		{"future_tolerance+1ns", 0, testNow + 1e9 + 1, "ahead of the core's clock"},
	} {
		s := newTestServer(t, testConfig(), skewCore(t, tc.tolS))
		code, reply := post(t, s.Handler(), "/v1/events", testToken,
			fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100}`, tc.at, tc.at))
		if tc.refused == "" {
			if code != http.StatusOK || stateOf(t, s).DemandHistory.Arrivals.Observations != 1 {
				t.Fatalf("%s: %d %s; want accepted and counted", tc.name, code, reply)
			}
			continue
		}
		if code != http.StatusUnprocessableEntity || !strings.Contains(reply, tc.refused) || stateOf(t, s).DemandHistory.Arrivals.Observations != 0 {
			t.Fatalf("%s: %d %s; want 422 %q, nothing counted", tc.name, code, reply, tc.refused)
		}
	}
}
