package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const (
	testToken      = "s3cret-token"
	testAgentToken = "agent-s3cret"
	testNow        = int64(1_800_000_000e9)
)

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token = testToken
	cfg.Auth.AgentToken = testAgentToken
	cfg.Agents.Required = false
	cfg.HTTP.MaxBodyBytes = 64 << 10
	cfg.HTTP.MaxLineBytes = 512
	return cfg
}

func newTestServer(t *testing.T, cfg Config, c Core) *Server {
	t.Helper()
	s, err := New(cfg, c, nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func post(t *testing.T, h http.Handler, path, token, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func ts(offsetS float64) int64 { return testNow + int64(offsetS*1e9) }

// Acceptance 2: every bad input is answered 4xx with a message naming the
// problem, and changes nothing: the real core's /v1/state is byte for byte
// the same afterwards, and a recording fake core saw no call.
func TestBadInputRefused(t *testing.T) {
	f := func(name, token, body string, wantCode int, mention string) {
		t.Helper()
		// Real core: state unchanged.
		rc := newRealCore(t, "e1")
		s := newTestServer(t, testConfig(), rc)
		_, before := get(t, s.Handler(), "/v1/state")
		code, reply := post(t, s.Handler(), "/v1/events", token, body)
		if code != wantCode {
			t.Fatalf("%s: unexpected status; got %d; want %d (body %s)", name, code, wantCode, reply)
		}
		if !strings.Contains(reply, mention) {
			t.Fatalf("%s: reply %s does not mention %q", name, reply, mention)
		}
		if _, after := get(t, s.Handler(), "/v1/state"); after != before {
			t.Fatalf("%s: state changed:\nbefore %s\nafter  %s", name, before, after)
		}
		// Fake core: not called at all.
		c := newFakeCore("e1")
		s = newTestServer(t, testConfig(), c)
		if code, _ := post(t, s.Handler(), "/v1/events", token, body); code != wantCode {
			t.Fatalf("%s (fake core): unexpected status; got %d; want %d", name, code, wantCode)
		}
		if n := c.Len(); n != 0 {
			t.Fatalf("%s: unexpected core calls; got %d (%v); want 0", name, n, c.Calls())
		}
	}
	ok := fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, ts(0))
	f("malformed JSON", testToken, `{"type":"refused","ts_ns":`, 422, "malformed event")
	f("not an object", testToken, `"refused"`, 422, "expected '{'")
	f("unknown type", testToken, fmt.Sprintf(`{"type":"teleported","ts_ns":%d}`, ts(0)), 422, `unknown event type: \"teleported\"`)
	f("negative tokens", testToken, fmt.Sprintf(`{"type":"sized","ts_ns":%d,"est_input_tokens":-3}`, ts(0)), 422, "est_input_tokens must be >= 0, got -3")
	f("absurd tokens", testToken, fmt.Sprintf(`{"type":"sized","ts_ns":%d,"est_input_tokens":1000000000000}`, ts(0)), 422, "est_input_tokens must be <= 16777215, got 1000000000000")
	f("NaN", testToken, `{"type":"refused","ts_ns":NaN}`, 422, "NaN")
	f("float", testToken, `{"type":"refused","ts_ns":1.8e18}`, 422, "ts_ns must be an integer")
	f("far past", testToken, fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, ts(-86400)), 422, "ts_ns is 86400s in the past")
	f("far future", testToken, fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, ts(3600)), 422, "ts_ns is 3600s in the future")
	f("unknown engine", testToken, fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"ghost","input_tokens":5}`, ts(0)), 422, `engine \"ghost\": admitted: unknown engine`)
	f("missing field", testToken, fmt.Sprintf(`{"type":"first_token","ts_ns":%d}`, ts(0)), 422, "first_token events need arrival_ns")
	f("line too long", testToken, `{"type":"refused","ts_ns":1`+strings.Repeat(" ", 600)+`}`, 422, "line too long: 628 bytes, limit 512")
	f("oversized body", testToken, strings.Repeat(ok+"\n", 64<<10/len(ok)+1), 413, "body exceeds 65536 bytes")
	f("missing token", "", ok, 401, "missing bearer token")
	f("wrong token", "s3cret-tokeN", ok, 401, "wrong bearer token")
	f("wrong token prefix", testToken[:5], ok, 401, "wrong bearer token")
}

func TestWrongMethodAndAuthScheme(t *testing.T) {
	c := newFakeCore("e1")
	s := newTestServer(t, testConfig(), c)
	if code, _ := get(t, s.Handler(), "/v1/events"); code != http.StatusUnauthorized {
		t.Fatalf("GET /v1/events without token: got %d; want 401", code)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/events: got %d; want 405", rec.Code)
	}
	req = httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(""))
	req.Header.Set("Authorization", "Basic "+testToken)
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("Basic auth: got %d; want 401", rec.Code)
	}
	if code, _ := post(t, s.Handler(), "/v1/state", testToken, ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /v1/state: got %d; want 405", code)
	}
}

// A mixed batch: accepted lines are applied in order, refused ones change
// nothing, and the reply lists both.
func TestMixedBatch(t *testing.T) {
	c := newFakeCore("e1")
	s := newTestServer(t, testConfig(), c)
	a := ts(-1)
	lines := []string{
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a),                                             // 1 ok
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"est_input_tokens":400,"requested_output_tokens":64}`, a), // 2 ok
		``, // 3 blank
		fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"nope","input_tokens":400}`, ts(-0.5)),                            // 4 refused
		fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"e1","input_tokens":400,"requested_output_tokens":64}`, ts(-0.5)), // 5 ok
		fmt.Sprintf(`{"type":"tokenized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":400,"input_tokens":390}`, ts(-0.4), a), // 6 ok
		fmt.Sprintf(`{"type":"first_token","ts_ns":%d,"arrival_ns":%d}`, ts(-0.3), a),                                         // 7 ok
		`garbage`, // 8 refused
		fmt.Sprintf(`{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"requested_output_tokens":64,"output_tokens":50}`, ts(0), a, ts(-0.3)), // 9 ok
	}
	code, body := post(t, s.Handler(), "/v1/events", testToken, strings.Join(lines, "\n")+"\n")
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("unexpected status; got %d; want 422", code)
	}
	var r IngestReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Accepted != 6 || r.Refused != 2 {
		t.Fatalf("unexpected counts; got accepted %d refused %d; want 6, 2", r.Accepted, r.Refused)
	}
	if got, want := fmt.Sprint(r.AcceptedLines), "[[1 2] [5 7] [9 9]]"; got != want {
		t.Fatalf("unexpected accepted_lines; got %s; want %s", got, want)
	}
	if len(r.Errors) != 2 || r.Errors[0].Line != 4 || r.Errors[1].Line != 8 {
		t.Fatalf("unexpected errors; got %+v", r.Errors)
	}
	want := []string{
		fmt.Sprintf("OfferStarted [%d 0 0 0 0]", a),
		fmt.Sprintf("OfferSized [%d 400 64 0 0]", a),
		fmt.Sprintf("Admitted e1 [%d 400 64 0 0]", ts(-0.5)),
		fmt.Sprintf("Tokenized [%d 400 390 0 0]", a),
		fmt.Sprintf("FirstToken [%d %d 0 0 0]", ts(-0.3), a),
		fmt.Sprintf("Completed [%d %d %d 64 50]", ts(0), a, ts(-0.3)),
	}
	calls := c.Calls()
	if len(calls) != len(want) {
		t.Fatalf("unexpected calls; got %v", calls)
	}
	for i, call := range calls {
		got := call.Method + " " + fmt.Sprint(call.Args)
		if call.Engine != "" {
			got = call.Method + " " + call.Engine + " " + fmt.Sprint(call.Args)
		}
		if got != want[i] {
			t.Fatalf("call %d: got %q; want %q", i, got, want[i])
		}
	}
	// The events metric counts both outcomes by type.
	_, metrics := get(t, s.Handler(), "/metrics")
	for _, m := range []string{
		`narwhal_http_events_total{result="accepted",type="admitted"} 1`,
		`narwhal_http_events_total{result="refused",type="admitted"} 1`,
		`narwhal_http_events_total{result="refused",type="invalid"} 1`,
		`narwhal_http_events_total{result="accepted",type="completed"} 1`,
		`narwhal_http_requests_total{code="422",handler="events"} 1`,
	} {
		if !strings.Contains(metrics, m) {
			t.Fatalf("/metrics lacks %q", m)
		}
	}
}

func TestDecisionsParams(t *testing.T) {
	s := newTestServer(t, testConfig(), newFakeCore())
	f := func(q string, wantCode int, mention string) {
		t.Helper()
		code, body := get(t, s.Handler(), "/v1/decisions"+q)
		if code != wantCode || !strings.Contains(body, mention) {
			t.Fatalf("GET /v1/decisions%s: got %d %s; want %d mentioning %q", q, code, body, wantCode, mention)
		}
	}
	f("", 200, `{"decisions":[{"seq":1,`)
	f("?since=0", 200, `"reason":"limit=100"`)
	f("?since=41&limit=7", 200, `{"decisions":[{"seq":42,`)
	f("?since=41&limit=7", 200, `"reason":"limit=7"`)
	f("?since=0&limit=1000", 200, `"reason":"limit=1000"`)
	f("?limit=0", 400, `limit must be an integer in [1, 1000], got \"0\"`)
	f("?limit=1001", 400, "limit must be")
	f("?limit=x", 400, "limit must be")
	f("?since=-1", 400, "since must be a decision sequence number")
	f("?since=1.5", 400, "since must be")
	f("?sinse=1", 400, `unknown parameter \"sinse\"`)
}

func TestReadyz(t *testing.T) {
	cfg := testConfig()
	s := newTestServer(t, cfg, newFakeCore())
	if code, body := get(t, s.Handler(), "/readyz"); code != 200 || !strings.Contains(body, "agents.required=false") {
		t.Fatalf("readyz without agents: got %d %s", code, body)
	}
	cfg.Agents.Required = true
	s = newTestServer(t, cfg, newFakeCore())
	if code, body := get(t, s.Handler(), "/readyz"); code != 503 || !strings.Contains(body, "no agent reported") {
		t.Fatalf("readyz with no agent data: got %d %s", code, body)
	}
	if code, _ := get(t, s.Handler(), "/healthz"); code != 200 {
		t.Fatalf("healthz: got %d", code)
	}
	if code, body := get(t, s.Handler(), "/nope"); code != 404 || !strings.Contains(body, "/nope") {
		t.Fatalf("unknown path: got %d %s", code, body)
	}
}

// The real listener: Serve answers on Addr, static engines are seeded, and
// cancelling the context shuts down and closes the core.
func TestServeAndShutdown(t *testing.T) {
	cfg := testConfig()
	cfg.AdminListen = "127.0.0.1:0"
	cfg.Engines = []EngineSeed{{ID: "e1", Role: "prefill"}, {ID: "e2", Role: "decode"}}
	c := newFakeCore("e1")
	s, err := New(cfg, c, nil, WithClock(func() int64 { return testNow }))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Engines()); n != 2 {
		t.Fatalf("unexpected engines after seeding; got %d; want 2 (e1 known, e2 seeded)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	base := "http://" + s.Addr().String()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/events", bytes.NewBufferString(fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, testNow)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"accepted":1`) {
		t.Fatalf("POST over the listener: got %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + s.AdminAddr().String() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pprof on the admin listener: got %d", resp.StatusCode)
	}
	if code, _ := get(t, s.Handler(), "/debug/pprof/"); code != 404 {
		t.Fatalf("pprof must not be on the API listener; got %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if !c.closed {
		t.Fatal("Serve returned without closing the core")
	}
}

// The liveness probe fails while the core's clock is behind its recorded
// demand history by more than the demand window (every record refused),
// so the kubelet restarts the pod, and passes again once it has caught
// up.
func TestHealthzFailsWhileTheClockIsBehindTheHistory(t *testing.T) {
	c := newRealCore(t, "e1", "e2")
	s := newTestServer(t, testConfig(), c)
	if err := c.OfferSized(testNow, 100, 10); err != nil {
		t.Fatal(err)
	}
	c.Step(testNow)
	if code, body := get(t, s.Handler(), "/healthz"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("healthz: got %d %s; want 200 ok", code, body)
	}
	c.Step(testNow - 3600e9) // the clock stepped back an hour
	if code, body := get(t, s.Handler(), "/healthz"); code != 503 || !strings.Contains(body, "3600 s behind the recorded demand history") {
		t.Fatalf("healthz an hour behind: got %d %s; want 503 naming the hour", code, body)
	}
	c.Step(testNow + 1e9)
	if code, _ := get(t, s.Handler(), "/healthz"); code != 200 {
		t.Fatalf("healthz after catching up: got %d; want 200", code)
	}
}

// TestExtraRouteErrors: a taken or empty pattern fails New instead of
// panicking.
func TestExtraRouteErrors(t *testing.T) {
	rc := newRealCore(t, "e1")
	h := http.NotFoundHandler()
	for _, rt := range []Route{{Pattern: "/v1/events", Name: "dup", Handler: h}, {Name: "empty", Handler: h}, {Pattern: "/x", Name: "nil"}} {
		s, err := New(testConfig(), rc, nil, WithRoutes(rt))
		if err == nil {
			s.Close()
			t.Fatalf("route %+v accepted", rt)
		}
	}
}

// extproc.listen set on a Server built without service/extproc's option
// is an error at New, not a setting silently ignored.
func TestExtProcListenNeedsItsServer(t *testing.T) {
	cfg := testConfig()
	cfg.ExtProc.Listen = "127.0.0.1:0"
	s, err := New(cfg, newRealCore(t, "e1"), nil, WithoutControlLoop())
	if err == nil {
		s.Close()
		t.Fatal("New accepted extproc.listen without the ext_proc server")
	}
	if !strings.Contains(err.Error(), "service/extproc.ServiceOption") {
		t.Fatalf("error %q does not say what is missing", err)
	}
}
