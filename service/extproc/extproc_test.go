package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// recorder is an event sink that lists the calls it got (a fake for this
// package's unit tests; service's tests run the real core).
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(f string, a ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(f, a...))
	return nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *recorder) OfferStarted(now int64)         { _ = r.add("OfferStarted(%d)", now) }
func (r *recorder) OfferAbandoned(now int64) error { return r.add("OfferAbandoned(%d)", now) }
func (r *recorder) OfferSized(a, e, o int64) error { return r.add("OfferSized(%d,%d,%d)", a, e, o) }
func (r *recorder) Tokenized(a, e, x, o int64) error {
	return r.add("Tokenized(%d,%d,%d,%d)", a, e, x, o)
}
func (r *recorder) Admitted(now int64, e string, in, o int64) error {
	return r.add("Admitted(%d,%s,%d,%d)", now, e, in, o)
}
func (r *recorder) Refused(now int64) error         { return r.add("Refused(%d)", now) }
func (r *recorder) RefusedSized(now, a int64) error { return r.add("RefusedSized(%d,%d)", now, a) }
func (r *recorder) FirstToken(now, a int64) error   { return r.add("FirstToken(%d,%d)", now, a) }
func (r *recorder) Failed(now, a, ft int64) error   { return r.add("Failed(%d,%d,%d)", now, a, ft) }
func (r *recorder) Expired(now, a, ft int64) error  { return r.add("Expired(%d,%d,%d)", now, a, ft) }
func (r *recorder) Completed(now, a, ft, o, n int64) error {
	return r.add("Completed(%d,%d,%d,%d,%d)", now, a, ft, o, n)
}

// harness serves a Processor over an in-memory gRPC connection; the test
// plays Envoy's part with the generated client.
type harness struct {
	t      *testing.T
	rec    *recorder
	p      *Processor
	now    atomic.Int64
	client extprocv3.ExternalProcessorClient
}

func newHarness(t *testing.T, o Options) *harness {
	t.Helper()
	h := &harness{t: t, rec: &recorder{}}
	o.Now = h.now.Load
	h.p = New(h.rec, o)
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, h.p)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client = extprocv3.NewExternalProcessorClient(conn)
	return h
}

func headers(eos bool, kv ...string) *extprocv3.HttpHeaders {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		// Envoy sends raw_value; older ones value: cover both.
		if i%4 == 0 {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		} else {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], Value: kv[i+1]})
		}
	}
	return &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}
}

func reqHeaders(obs bool, method, path string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(eos, ":method", method, ":path", path, ":authority", "gw")}}
}

func reqBody(obs bool, b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(obs bool, code int, ctype string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(false, ":status", fmt.Sprint(code), "content-type", ctype)}}
}

func respBody(obs bool, b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{ObservabilityMode: obs, Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

const s = int64(time.Second)

// step is one message Envoy sends at a time (seconds).
type step struct {
	at  float64
	msg *extprocv3.ProcessingRequest
}

// run sends steps on one stream, then closes it (Envoy ends the stream
// when the HTTP request is done or reset) and waits for the server's end.
// Answers (observability mode off) are returned in order.
func (h *harness) run(ctx context.Context, steps []step) ([]*extprocv3.ProcessingResponse, error) {
	h.t.Helper()
	st, err := h.client.Process(ctx)
	if err != nil {
		return nil, err
	}
	var answers []*extprocv3.ProcessingResponse
	for _, x := range steps {
		h.now.Store(int64(x.at * float64(s)))
		n := h.p.handled.Load()
		if err := st.Send(x.msg); err != nil {
			return answers, err
		}
		// the clock moves on only once the server has handled the message
		waitFor(h.t, func() bool { return h.p.handled.Load() > n })
		if !x.msg.GetObservabilityMode() {
			a, err := st.Recv()
			if err != nil {
				return answers, err
			}
			answers = append(answers, a)
		}
	}
	h.now.Add(s / 2)
	if err := st.CloseSend(); err != nil {
		return answers, err
	}
	for {
		a, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return answers, err
		}
		answers = append(answers, a)
	}
}

const chatBody1 = `{"model":"qwen","messages":[{"role":"user","content":"hello there"}],"max_tok`
const chatBody2 = `ens": 128, "stream": true, "stream_options": {"include_usage": true}}`

// A streamed chat completion, as Envoy sends it in observability mode:
// arrival at the request headers, size at the body's end (bytes / 4,
// max_tokens read across the chunk boundary), first token at the first
// response chunk, completion with the usage block's counts.
func TestStreamedCompletionReportsItsLifecycle(t *testing.T) {
	h := newHarness(t, Options{})
	body := len(chatBody1) + len(chatBody2)
	est := int64((body + 3) / 4)
	answers, err := h.run(context.Background(), []step{
		{1, reqHeaders(true, "POST", "/v1/chat/completions?x=1", false)},
		{1.01, reqBody(true, chatBody1, false)},
		{1.02, reqBody(true, chatBody2, true)},
		{2, respHeaders(true, 200, "text/event-stream; charset=utf-8")},
		{2.5, respBody(true, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", false)},
		{2.6, respBody(true, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n", false)},
		{2.9, respBody(true, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":15,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n", true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != 0 {
		t.Fatalf("observability mode: %d answers sent, want none", len(answers))
	}
	want := []string{
		"OfferStarted(1000000000)",
		fmt.Sprintf("OfferSized(1000000000,%d,128)", est),
		"FirstToken(2500000000,1000000000)",
		fmt.Sprintf("Tokenized(1000000000,%d,12,128)", est),
		"Completed(2900000000,1000000000,2500000000,128,3)",
	}
	if got := h.rec.got(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls\n got %q\nwant %q", got, want)
	}
	if n := testutil.ToFloat64(h.p.streams.WithLabelValues(OutcomeCompleted)); n != 1 {
		t.Fatalf("streams{completed} = %v, want 1", n)
	}
}

// Without a usage block the output is the count of data events, and
// max_completion_tokens wins over max_tokens.
func TestStreamedCompletionWithoutUsageCountsEvents(t *testing.T) {
	h := newHarness(t, Options{})
	b := `{"prompt":"abcdefgh","max_tokens":50,"max_completion_tokens":20,"stream":true}`
	_, err := h.run(context.Background(), []step{
		{1, reqHeaders(true, "POST", "/v1/completions", false)},
		{1, reqBody(true, b, true)},
		{2, respHeaders(true, 200, "text/event-stream")},
		{3, respBody(true, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\n", false)},
		{4, respBody(true, "data: {\"choices\":[{\"text\":\"c\"}]}\n\ndata: [DONE]\n\n", true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"OfferStarted(1000000000)", fmt.Sprintf("OfferSized(1000000000,%d,20)", (len(b)+3)/4),
		"FirstToken(3000000000,1000000000)", "Completed(4000000000,1000000000,3000000000,20,3)"}
	if got := h.rec.got(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls\n got %q\nwant %q", got, want)
	}
}

// With observability mode off Envoy waits for an answer to each message:
// each gets the matching "continue" response.
func TestEveryMessageAnsweredOutsideObservabilityMode(t *testing.T) {
	h := newHarness(t, Options{})
	answers, err := h.run(context.Background(), []step{
		{1, reqHeaders(false, "POST", "/v1/chat/completions", false)},
		{1, reqBody(false, `{"max_tokens":8}`, true)},
		{2, respHeaders(false, 200, "text/event-stream")},
		{3, respBody(false, "data: {}\n\n", true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != 4 || answers[0].GetRequestHeaders() == nil || answers[1].GetRequestBody() == nil ||
		answers[2].GetResponseHeaders() == nil || answers[3].GetResponseBody() == nil {
		t.Fatalf("answers %v: want request headers, request body, response headers, response body", answers)
	}
	for _, a := range answers {
		if a.GetImmediateResponse() != nil || a.GetModeOverride() != nil {
			t.Fatalf("answer %v changes the request", a)
		}
	}
	if got := h.rec.got(); len(got) != 4 || got[3] != "Completed(3000000000,1000000000,3000000000,8,1)" {
		t.Fatalf("calls %q", got)
	}
}

// How each early end is reported.
func TestEarlyEnds(t *testing.T) {
	body := `{"max_tokens":16}` // 17 bytes: estimate 5
	runCases(t, []streamCase{
		{"client gone after the first token", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1, reqBody(true, body, true)},
			{2, respHeaders(true, 200, "text/event-stream")},
			{3, respBody(true, "data: {}\n\n", false)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,16)", "FirstToken(3000000000,1000000000)",
			"Expired(3500000000,1000000000,3000000000)"}, OutcomeExpired},
		{"client gone while queued", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1, reqBody(true, body, true)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,16)", "Expired(1500000000,1000000000,0)"}, OutcomeExpired},
		{"body never finished", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1.2, reqBody(true, `{"max_tok`, false)},
		}, []string{"OfferStarted(1000000000)", "OfferAbandoned(1700000000)"}, OutcomeAbandoned},
		{"POST without a body", []step{
			{1, reqHeaders(true, "POST", "/v1/completions", true)},
			{2, respHeaders(true, 400, "application/json")},
		}, []string{"OfferStarted(1000000000)", "OfferAbandoned(1000000000)"}, OutcomeAbandoned},
		{"shed with 429", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1, reqBody(true, body, true)},
			{1.1, respHeaders(true, 429, "application/json")},
			{1.1, respBody(true, `{"error":"busy"}`, true)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,16)", "RefusedSized(1100000000,1000000000)"}, OutcomeRefused},
		{"upstream error", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1, reqBody(true, body, true)},
			{4, respHeaders(true, 503, "text/plain")},
			{4, respBody(true, `no healthy upstream`, true)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,16)", "Failed(4000000000,1000000000,0)"}, OutcomeFailed},
		{"not streamed: demand and exact size only", []step{
			{1, reqHeaders(true, "POST", "/v1/chat/completions", false)},
			{1, reqBody(true, body, true)},
			{4, respHeaders(true, 200, "application/json")},
			{4, respBody(true, `{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`, true)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,16)", "Tokenized(1000000000,5,9,16)"}, OutcomeUnmeasured},
		{"not an inference request", []step{
			{1, reqHeaders(true, "GET", "/v1/models", true)},
			{1, respHeaders(true, 200, "application/json")},
			{1, respBody(true, `{"data":[]}`, true)},
		}, nil, OutcomeIgnored},
	})
}

// streamCase is one stream's messages, the calls they make and the
// stream's outcome.
type streamCase struct {
	name    string
	steps   []step
	want    []string
	outcome string
}

func runCases(t *testing.T, cases []streamCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			if _, err := h.run(context.Background(), c.steps); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return testutil.ToFloat64(h.p.streams.WithLabelValues(c.outcome)) == 1 })
			if got := h.rec.got(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("calls\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// Filter modes that leave messages out: bodies Envoy says it will not
// send are not waited for, and a body without response headers (their
// mode SKIP) is read as a success, streamed when it is server-sent
// events.
func TestModesThatSendLess(t *testing.T) {
	noBodies := &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_NONE, ResponseBodyMode: filterv3.ProcessingMode_NONE}
	first := reqHeaders(true, "POST", "/v1/completions", false)
	first.GetRequestHeaders().Headers.Headers = append(first.GetRequestHeaders().Headers.Headers,
		&corev3.HeaderValue{Key: "Content-Length", RawValue: []byte("400")})
	first.ProtocolConfig = noBodies
	runCases(t, []streamCase{
		{"no bodies sent", []step{
			{1, first},
			{2, respHeaders(true, 200, "text/event-stream")},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,100,0)"}, OutcomeUnmeasured},
		{"no response headers sent", []step{
			{1, reqHeaders(true, "POST", "/v1/completions", false)},
			{1, reqBody(true, `{"max_tokens":3}`, true)},
			{2, respBody(true, "\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n", false)},
			{3, respBody(true, "data: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n", true)},
		}, []string{"OfferStarted(1000000000)", "OfferSized(1000000000,4,3)", "FirstToken(2000000000,1000000000)",
			"Completed(3000000000,1000000000,2000000000,3,2)"}, OutcomeCompleted},
	})
}

// A stream is refused without the token, and nothing is reported.
func TestStreamNeedsTheToken(t *testing.T) {
	h := newHarness(t, Options{Authorize: func(a string) error {
		if a != "Bearer good" {
			return errors.New("wrong token")
		}
		return nil
	}})
	steps := []step{{1, reqHeaders(true, "POST", "/v1/completions", false)}, {1, reqBody(true, `{}`, true)}}
	for _, tok := range []string{"", "Bearer bad"} {
		ctx := context.Background()
		if tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tok)
		}
		st, err := h.client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(steps[0].msg) // the server may have refused the stream already
		_, err = st.Recv()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("token %q: err %v, want Unauthenticated", tok, err)
		}
	}
	if got := h.rec.got(); len(got) != 0 {
		t.Fatalf("unauthenticated streams reported %q", got)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer good")
	if _, err := h.run(ctx, steps); err != nil {
		t.Fatal(err)
	}
	if got := h.rec.got(); len(got) != 3 { // started, sized, expired (closed before a response)
		t.Fatalf("with the token: %q", got)
	}
	if n := testutil.ToFloat64(h.p.streams.WithLabelValues(OutcomeUnauthenticated)); n != 2 {
		t.Fatalf("streams{unauthenticated} = %v, want 2", n)
	}
}

// A stream open longer than MaxStream is ended; its request expired.
func TestStreamLifeIsBounded(t *testing.T) {
	h := newHarness(t, Options{MaxStream: 50 * time.Millisecond})
	st, err := h.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.now.Store(s)
	for _, m := range []*extprocv3.ProcessingRequest{reqHeaders(true, "POST", "/v1/completions", false), reqBody(true, `{}`, true)} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	_, err = st.Recv() // the server ends the stream
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	got := h.rec.got()
	if len(got) != 3 || got[2] != "Expired(1000000000,1000000000,0)" {
		t.Fatalf("calls %q", got)
	}
	if n := testutil.ToFloat64(h.p.streams.WithLabelValues(OutcomeTooLong)); n != 1 {
		t.Fatalf("streams{max_stream} = %v", n)
	}
	if n := testutil.ToFloat64(h.p.active); n != 0 {
		t.Fatalf("active streams %v after the end", n)
	}
}

// Values the core cannot take are counted, not trusted: a max_tokens
// above MaxTokens is not the requested output.
func TestOutOfRangeTokensAreNotUsed(t *testing.T) {
	h := newHarness(t, Options{MaxTokens: 1000})
	_, err := h.run(context.Background(), []step{
		{1, reqHeaders(true, "POST", "/v1/completions", false)},
		{1, reqBody(true, `{"max_tokens":5000}`, true)},
		{2, respHeaders(true, 200, "text/event-stream")},
		{3, respBody(true, "data: {\"usage\":{\"prompt_tokens\":99999,\"completion_tokens\":7777}}\n\n", true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"OfferStarted(1000000000)", "OfferSized(1000000000,5,0)", "FirstToken(3000000000,1000000000)",
		"Completed(3000000000,1000000000,3000000000,0,1)"}
	if got := h.rec.got(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls\n got %q\nwant %q", got, want)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if ok() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached in 1 s")
}
