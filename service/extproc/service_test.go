package extproc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/testcert"
	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/service/extproc"
)

const (
	testNow   = int64(1_800_000_000e9)
	testToken = "s3cret-token"
)

func ts(offsetS float64) int64 { return testNow + int64(offsetS*1e9) }

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 10 s", what)
}

func epHeaders(kv ...string) *extprocv3.HttpHeaders {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: hm}
}

// envoyStream plays Envoy's ext_proc filter (observability mode off, so
// that each message is answered before the test's clock moves on).
type envoyStream struct {
	t     *testing.T
	st    extprocv3.ExternalProcessor_ProcessClient
	clock *atomic.Int64
}

func (e *envoyStream) send(atS float64, m *extprocv3.ProcessingRequest) {
	e.t.Helper()
	e.clock.Store(ts(atS))
	if err := e.st.Send(m); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.Recv(); err != nil {
		e.t.Fatal(err)
	}
}

// A gateway's Envoy reports a streamed chat completion over extproc.listen
// to the real core: demand, first token and completion reach /v1/state
// and /metrics as /v1/events would bring them; a stream without the
// routers' token is refused and reports nothing; a stream still open when
// the server stops is not counted as a client that went away.
func TestExtProcReportsToTheCore(t *testing.T) {
	var clock atomic.Int64
	clock.Store(ts(-10))
	rc, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"e1", "e2"} {
		role := []controller.Role{controller.RolePrefill, controller.RoleDecode}[i]
		if err := rc.UpsertEngine(controller.Engine{ID: id, Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB",
			Role: role, Live: true, KVCapacityTokens: 66144}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token = testToken
	cfg.Agents.Required = false
	cfg.ExtProc.Listen = "127.0.0.1:0"
	cfg.HTTP.ShutdownTimeoutS = 0.2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := service.New(cfg, rc, nil, service.WithClock(clock.Load), service.WithoutControlLoop(), extproc.ServiceOption(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	conn, err := grpc.NewClient(s.SidecarAddr("extproc.listen").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	open := func(token string) *envoyStream {
		sctx := context.Background()
		if token != "" {
			sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
		}
		st, err := client.Process(sctx)
		if err != nil {
			t.Fatal(err)
		}
		return &envoyStream{t: t, st: st, clock: &clock}
	}

	// Without the token: refused, nothing recorded.
	bad := open("wrong")
	_ = bad.st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: epHeaders(":method", "POST", ":path", "/v1/chat/completions")}})
	if _, err := bad.st.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream with a wrong token: %v, want Unauthenticated", err)
	}

	// TTFT 0.2 s (SLO 0.25), 5 tokens in 0.2 s after it (TPOT 0.05, SLO 0.1).
	body := `{"model":"facebook/opt-13b","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stream":true}`
	e := open(testToken)
	e.send(-3, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: epHeaders(":method", "POST", ":path", "/v1/chat/completions")}})
	e.send(-3, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
	e.send(-2.9, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: epHeaders(":status", "200", "content-type", "text/event-stream")}})
	e.send(-2.8, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")}}})
	e.send(-2.6, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n"), EndOfStream: true}}})
	if err := e.st.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// A second request, sized and waiting when the server stops.
	w := open(testToken)
	w.send(-1, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: epHeaders(":method", "POST", ":path", "/v1/completions")}})
	w.send(-1, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(`{"prompt":"x","max_tokens":8}`), EndOfStream: true}}})

	clock.Store(testNow)
	eventually(t, "the first stream's end", func() bool {
		m := get(t, s.Handler(), "/metrics")
		return strings.Contains(m, `narwhal_extproc_streams_total{outcome="completed"} 1`+"\n")
	})
	rc.Step(testNow)
	body = get(t, s.Handler(), "/v1/state")
	var st struct {
		DemandHistory struct {
			Arrivals, Outputs struct {
				Observations int64 `json:"observations"`
			}
		} `json:"demand_history"`
		Attainment struct {
			ByOutcome map[string]struct {
				TTFTMet int64 `json:"ttft_met"`
				TPOTMet int64 `json:"tpot_met"`
				Total   int64 `json:"total"`
			} `json:"by_outcome"`
		} `json:"attainment"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	c := st.Attainment.ByOutcome["completed"]
	if st.DemandHistory.Arrivals.Observations != 2 || st.DemandHistory.Outputs.Observations != 1 ||
		c.Total != 1 || c.TTFTMet != 1 || c.TPOTMet != 1 || st.Attainment.ByOutcome["expired"].Total != 0 {
		t.Fatalf("state after the streams: arrivals %d, outputs %d, completed %+v, expired %d; want 2, 1, one met on both, 0\n%s",
			st.DemandHistory.Arrivals.Observations, st.DemandHistory.Outputs.Observations, c,
			st.Attainment.ByOutcome["expired"].Total, body)
	}
	m := get(t, s.Handler(), "/metrics")
	for _, want := range []string{
		`narwhal_extproc_streams_total{outcome="unauthenticated"} 1`,
		`narwhal_extproc_streams_active 1`,
		`narwhal_attainment_ttft_met{outcome="completed"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Fatalf("/metrics lacks %q", want)
		}
	}

	// Stop: the waiting stream is cut after the shutdown timeout and not
	// reported as expired.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with an ext_proc stream open")
	}
	if a := rc.State(testNow).Attainment.ByOutcome["expired"]; a.Total != 0 {
		t.Fatalf("a stream cut at shutdown counted as expired: %+v", a)
	}
	if m := get(t, s.Handler(), "/metrics"); !strings.Contains(m, `narwhal_extproc_streams_total{outcome="cut"} 1`+"\n") {
		t.Fatal(`/metrics lacks narwhal_extproc_streams_total{outcome="cut"} 1 after the stop`)
	}
}

// With tls.cert_file the ext_proc listener speaks TLS with the API's
// certificate: a client trusting its CA opens a stream that reports, a
// plain-text client gets nothing through.
func TestExtProcOverTLS(t *testing.T) {
	ca, err := testcert.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := testcert.Server(ca, 7, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.DefaultConfig()
	cfg.Listen, cfg.ExtProc.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Auth.Token, cfg.Agents.Required = testToken, false
	cfg.TLS.CertFile, cfg.TLS.KeyFile = certFile, keyFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := service.New(cfg, rc, nil, service.WithoutControlLoop(), extproc.ServiceOption(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr := s.SidecarAddr("extproc.listen").String()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"plain text", insecure.NewCredentials(), false},
		{"TLS", credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), true},
	} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tc.creds))
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testToken), 5*time.Second)
		st, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
		if err == nil {
			err = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: epHeaders(":method", "POST", ":path", "/v1/completions")}})
		}
		if err == nil {
			_, err = st.Recv() // the answer to the headers (observability mode off)
		}
		scancel()
		conn.Close()
		if (err == nil) != tc.ok {
			t.Fatalf("%s: stream error %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
