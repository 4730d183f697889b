package extproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/narwhal-io/narwhal/service"
)

// Options configure a Processor.
type Options struct {
	// Now is the clock every event is stamped with (Unix ns); nil:
	// time.Now.
	Now func() int64
	// Authorize judges a stream's "authorization" metadata (the value
	// Envoy sends from the filter's grpc_service initial_metadata); nil
	// accepts every stream.
	Authorize func(authorization string) error
	// MaxStream bounds a stream's life (a request open longer has
	// outlived what the core accepts of it); 0: one hour.
	MaxStream time.Duration
	// MaxTokens bounds a token count read from a body; a larger one is
	// not used.
	MaxTokens int64
	Logger    *slog.Logger
}

// Outcomes of a stream (narwhal_extproc_streams_total{outcome}).
const (
	OutcomeCompleted       = "completed"       // a streamed response ended
	OutcomeUnmeasured      = "unmeasured"      // a response that was not streamed ended: demand only
	OutcomeFailed          = "failed"          // the response's status was an error (not 429), or it had no body
	OutcomeRefused         = "refused"         // 429
	OutcomeExpired         = "expired"         // the stream ended before the response did: the client went away
	OutcomeAbandoned       = "abandoned"       // the stream ended before the request body did
	OutcomeIgnored         = "ignored"         // not a POST to …/completions
	OutcomeUnauthenticated = "unauthenticated" // refused: missing or wrong token
	OutcomeTooLong         = "max_stream"      // open longer than MaxStream (counted expired to the core)
	OutcomeCut             = "cut"             // cut while the server stopped (not reported to the core)
)

var outcomes = []string{OutcomeCompleted, OutcomeUnmeasured, OutcomeFailed, OutcomeRefused, OutcomeExpired,
	OutcomeAbandoned, OutcomeIgnored, OutcomeUnauthenticated, OutcomeTooLong, OutcomeCut}

// Processor is Envoy's external processor (envoy.service.ext_proc.v3)
// that reports what it sees to the core. Register it on a grpc.Server
// (ServiceOption does, for narwhal-core).
type Processor struct {
	extprocv3.UnimplementedExternalProcessorServer
	sink service.EventSink
	o    Options

	streams *prometheus.CounterVec
	active  prometheus.Gauge
	refused *prometheus.CounterVec
	handled atomic.Int64 // messages handled (tests wait on it)
	quiet   atomic.Bool  // streams cut from here on are not reported
}

// Quiet stops reporting streams that end before their request did: the
// server is stopping and cuts them, their clients did not go away.
func (p *Processor) Quiet() { p.quiet.Store(true) }

// New returns a Processor reporting to sink (the core facade, or
// service.SidecarEnv's Sink).
func New(sink service.EventSink, o Options) *Processor {
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
	if o.MaxStream <= 0 {
		o.MaxStream = time.Hour
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 1 << 31
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Processor{sink: sink, o: o,
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "narwhal_extproc_streams_total",
			Help: "Envoy ext_proc streams (one per HTTP request) by how they ended."}, []string{"outcome"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "narwhal_extproc_streams_active",
			Help: "Envoy ext_proc streams open now."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "narwhal_extproc_events_refused_total",
			Help: "Lifecycle calls from ext_proc streams that the core refused (bad values, evidence too old or ahead)."}, []string{"event"}),
	}
	for _, oc := range outcomes {
		p.streams.WithLabelValues(oc)
	}
	return p
}

// Collectors are the Processor's metrics.
func (p *Processor) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.streams, p.active, p.refused}
}

var (
	reqKeys  = [maxKeys][]byte{[]byte(`"max_tokens"`), []byte(`"max_completion_tokens"`)}
	respKeys = [maxKeys][]byte{[]byte(`"prompt_tokens"`), []byte(`"completion_tokens"`)}
)

// request is one stream's HTTP request as seen so far.
type request struct {
	started  bool // OfferStarted called
	sized    bool // OfferSized called
	ended    bool // a terminal call made (or nothing more to say)
	outcome  string
	arrival  int64
	bytes    int64
	estInput int64
	reqOut   int64
	status   int
	sse      bool
	gotBody  bool  // a response body byte came
	firstTok int64 // its time, for a streamed response (0 otherwise)
	body     numScan
	resp     numScan
	events   sseCount
	// The filter's body modes, when Envoy says (protocol_config, on the
	// first message): a body it will not send is never waited for.
	noReqBody, noRespBody bool
}

// Process serves one stream: one HTTP request's headers, bodies and
// trailers as Envoy sends them. With observability_mode off each message
// is answered with an empty response (continue unchanged); with it on,
// nothing is sent back.
func (p *Processor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := srv.Context()
	if p.o.Authorize != nil {
		var auth string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) == 1 {
				auth = v[0]
			}
		}
		if err := p.o.Authorize(auth); err != nil {
			p.streams.WithLabelValues(OutcomeUnauthenticated).Inc()
			return status.Error(codes.Unauthenticated, "narwhal ext_proc: "+err.Error())
		}
	}
	p.active.Inc()
	defer p.active.Dec()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan *extprocv3.ProcessingRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var r request
	timer := time.NewTimer(p.o.MaxStream)
	defer timer.Stop()
	for {
		select {
		case m := <-msgs:
			p.handle(&r, m)
			p.handled.Add(1)
			if !m.GetObservabilityMode() {
				if resp := continueResponse(m); resp != nil {
					if err := srv.Send(resp); err != nil {
						p.finish(&r, OutcomeExpired)
						return err
					}
				}
			}
		case err := <-recvErr:
			p.finish(&r, OutcomeExpired)
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-timer.C:
			p.finish(&r, OutcomeTooLong)
			return status.Error(codes.DeadlineExceeded, "narwhal ext_proc: stream open longer than "+p.o.MaxStream.String())
		}
	}
}

// continueResponse answers m with "continue unchanged"; nil for a
// message that takes no answer.
func continueResponse(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch m.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return nil
}

func (p *Processor) handle(r *request, m *extprocv3.ProcessingRequest) {
	now := p.o.Now()
	if pc := m.GetProtocolConfig(); pc != nil {
		r.noReqBody = pc.GetRequestBodyMode() == filterv3.ProcessingMode_NONE
		r.noRespBody = pc.GetResponseBodyMode() == filterv3.ProcessingMode_NONE
	}
	switch {
	case m.GetRequestHeaders() != nil:
		h := m.GetRequestHeaders()
		if r.started || r.ended {
			return // one request per stream
		}
		path, _, _ := strings.Cut(header(h.GetHeaders(), ":path"), "?")
		if header(h.GetHeaders(), ":method") != "POST" || !strings.HasSuffix(path, "/completions") {
			r.ended, r.outcome = true, OutcomeIgnored
			return
		}
		r.started, r.arrival = true, now
		p.sink.OfferStarted(now)
		switch {
		case h.GetEndOfStream(): // a POST without a body
			p.call("offer_abandoned", p.sink.OfferAbandoned(now))
			r.ended, r.outcome = true, OutcomeAbandoned
		case r.noReqBody: // sized by its Content-Length alone
			r.bytes, _ = strconv.ParseInt(header(h.GetHeaders(), "content-length"), 10, 64)
			r.bytes = max(0, r.bytes)
			p.size(r)
		}
	case m.GetRequestBody() != nil:
		b := m.GetRequestBody()
		if !r.started || r.sized || r.ended {
			return
		}
		r.bytes += int64(len(b.GetBody()))
		r.body.feed(b.GetBody(), &reqKeys)
		if b.GetEndOfStream() || b.GetEndOfStreamWithoutMessage() {
			p.size(r)
		}
	case m.GetRequestTrailers() != nil:
		if r.started && !r.sized && !r.ended {
			p.size(r)
		}
	case m.GetResponseHeaders() != nil:
		h := m.GetResponseHeaders()
		if !r.started || r.ended {
			return
		}
		r.status, _ = strconv.Atoi(header(h.GetHeaders(), ":status"))
		r.sse = strings.HasPrefix(strings.ToLower(strings.TrimSpace(header(h.GetHeaders(), "content-type"))), "text/event-stream")
		if r.status < 200 || r.status > 299 {
			p.refuseOrFail(r, now)
			return
		}
		if !r.sized { // answered before the body ended: nothing to price
			p.call("offer_abandoned", p.sink.OfferAbandoned(now))
			r.ended, r.outcome = true, OutcomeAbandoned
			return
		}
		switch {
		case h.GetEndOfStream():
			p.call("failed", p.sink.Failed(now, r.arrival, 0))
			r.ended, r.outcome = true, OutcomeFailed
		case r.noRespBody: // no body will come to time: demand only
			r.ended, r.outcome = true, OutcomeUnmeasured
		}
	case m.GetResponseBody() != nil:
		b := m.GetResponseBody()
		if !r.sized || r.ended {
			return
		}
		body := b.GetBody()
		if r.status == 0 && len(body) > 0 {
			// response headers not sent (response_header_mode SKIP): a body
			// came, so the response is a success; streamed if it reads as
			// server-sent events
			r.status = 200
			t := bytes.TrimLeft(body, " \r\n")
			r.sse = bytes.HasPrefix(t, []byte("data:")) || bytes.HasPrefix(t, []byte(":")) || bytes.HasPrefix(t, []byte("event:"))
		}
		if r.status == 0 {
			return
		}
		if len(body) > 0 && !r.gotBody {
			r.gotBody = true
			if r.sse {
				r.firstTok = now
				p.call("first_token", p.sink.FirstToken(now, r.arrival))
			}
		}
		r.resp.feed(body, &respKeys)
		if r.sse {
			r.events.feed(body)
		}
		if b.GetEndOfStream() || b.GetEndOfStreamWithoutMessage() {
			p.complete(r, now)
		}
	case m.GetResponseTrailers() != nil:
		if r.sized && !r.ended && r.status != 0 {
			p.complete(r, now)
		}
	}
}

// size ends the offer: the body's bytes / 4 as the input estimate, the
// requested output from max_completion_tokens, else max_tokens.
func (p *Processor) size(r *request) {
	r.estInput = max(1, (r.bytes+3)/4)
	switch {
	case r.body.found[1] && r.body.val[1] <= p.o.MaxTokens:
		r.reqOut = r.body.val[1]
	case r.body.found[0] && r.body.val[0] <= p.o.MaxTokens:
		r.reqOut = r.body.val[0]
	}
	r.sized = true
	p.call("sized", p.sink.OfferSized(r.arrival, r.estInput, r.reqOut))
}

func (p *Processor) refuseOrFail(r *request, now int64) {
	r.ended = true
	switch {
	case r.status == 429 && r.sized:
		p.call("refused", p.sink.RefusedSized(now, r.arrival))
		r.outcome = OutcomeRefused
	case r.status == 429:
		p.call("refused", p.sink.Refused(now))
		r.outcome = OutcomeRefused
	case r.sized:
		p.call("failed", p.sink.Failed(now, r.arrival, 0))
		r.outcome = OutcomeFailed
	default:
		p.call("offer_abandoned", p.sink.OfferAbandoned(now))
		r.outcome = OutcomeAbandoned
	}
}

// complete ends a 2xx response. A streamed one (server-sent events)
// reports its first token and completion, its output the usage block's
// completion_tokens or else the count of data events; one that was not
// streamed reports only its exact prompt size (its first byte is its
// last: no first-token time to measure).
func (p *Processor) complete(r *request, now int64) {
	r.ended = true
	if r.resp.found[0] && r.resp.val[0] > 0 && r.resp.val[0] <= p.o.MaxTokens && r.resp.val[0] != r.estInput {
		p.call("tokenized", p.sink.Tokenized(r.arrival, r.estInput, r.resp.val[0], r.reqOut))
	}
	if !r.gotBody {
		p.call("failed", p.sink.Failed(now, r.arrival, 0))
		r.outcome = OutcomeFailed
		return
	}
	if !r.sse {
		r.outcome = OutcomeUnmeasured
		return
	}
	r.events.flush()
	out := r.events.events
	if r.resp.found[1] && r.resp.val[1] <= p.o.MaxTokens {
		out = r.resp.val[1]
	}
	p.call("completed", p.sink.Completed(now, r.arrival, r.firstTok, r.reqOut, out))
	r.outcome = OutcomeCompleted
}

// finish ends a stream that closed before its request's end: a sized
// request whose client went away expired (with its first token, if one
// came); an offer still being read was abandoned.
func (p *Processor) finish(r *request, outcome string) {
	now := p.o.Now()
	switch {
	case r.ended:
		outcome = r.outcome
	case p.quiet.Load():
		outcome = OutcomeCut
	case r.sized:
		p.call("expired", p.sink.Expired(now, r.arrival, r.firstTok))
	case r.started:
		p.call("offer_abandoned", p.sink.OfferAbandoned(now))
		outcome = OutcomeAbandoned
	default:
		outcome = OutcomeIgnored // closed before any request headers
	}
	r.ended = true
	p.streams.WithLabelValues(outcome).Inc()
}

func (p *Processor) call(event string, err error) {
	if err != nil {
		p.refused.WithLabelValues(event).Inc()
		p.o.Logger.Debug("ext_proc event refused by the core", "event", event, "err", err)
	}
}

// header is the first value of key in hm (Envoy sends raw_value since
// 1.27, value before).
func header(hm *corev3.HeaderMap, key string) string {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			if rv := h.GetRawValue(); len(rv) > 0 {
				return string(rv)
			}
			return h.GetValue()
		}
	}
	return ""
}
