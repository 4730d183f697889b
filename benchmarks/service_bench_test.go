package benchmarks

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service"
)

const benchNow = int64(1_800_000_000e9)

// eventBatch is 1000 lines: 125 requests of 8 lifecycle events each
// (offer_started, sized, tokenized, admitted, first_token, completed, plus
// one refused-by-router offer pair), timestamps within the last seconds.
func eventBatch(engines []string) []byte {
	var b bytes.Buffer
	for r := 0; r < 125; r++ {
		a := benchNow - 5e9 + int64(r)*1e6
		in := 200 + int64(r%50)*37
		out := int64(64 + r%7*32)
		eng := engines[r%len(engines)]
		fmt.Fprintf(&b, `{"type":"offer_started","ts_ns":%d}`+"\n", a)
		fmt.Fprintf(&b, `{"type":"sized","ts_ns":%d,"est_input_tokens":%d,"requested_output_tokens":%d}`+"\n", a+1e5, in+3, out)
		fmt.Fprintf(&b, `{"type":"admitted","ts_ns":%d,"engine":"%s","input_tokens":%d,"requested_output_tokens":%d}`+"\n", a+2e5, eng, in+3, out)
		fmt.Fprintf(&b, `{"type":"tokenized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":%d,"input_tokens":%d,"requested_output_tokens":%d}`+"\n", a+3e5, a+1e5, in+3, in, out)
		fmt.Fprintf(&b, `{"type":"first_token","ts_ns":%d,"arrival_ns":%d}`+"\n", a+2e8, a+1e5)
		fmt.Fprintf(&b, `{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"requested_output_tokens":%d,"output_tokens":%d}`+"\n", a+2e9, a+1e5, a+2e8, out, out-5)
		fmt.Fprintf(&b, `{"type":"offer_started","ts_ns":%d}`+"\n", a+5e5)
		fmt.Fprintf(&b, `{"type":"refused","ts_ns":%d}`+"\n", a+6e5)
	}
	return b.Bytes()
}

type discardSink struct{}

func (discardSink) OfferStarted(int64)                                {}
func (discardSink) OfferAbandoned(int64) error                        { return nil }
func (discardSink) OfferSized(int64, int64, int64) error              { return nil }
func (discardSink) Tokenized(int64, int64, int64, int64) error        { return nil }
func (discardSink) Admitted(int64, string, int64, int64) error        { return nil }
func (discardSink) Refused(int64) error                               { return nil }
func (discardSink) RefusedSized(int64, int64) error                   { return nil }
func (discardSink) FirstToken(int64, int64) error                     { return nil }
func (discardSink) Completed(int64, int64, int64, int64, int64) error { return nil }
func (discardSink) Failed(int64, int64, int64) error                  { return nil }
func (discardSink) Expired(int64, int64, int64) error                 { return nil }

func benchHandler(b *testing.B, h http.Handler, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	rd := bytes.NewReader(body)
	req := httptest.NewRequest(http.MethodPost, "/v1/events", rd)
	req.Header.Set("Authorization", "Bearer bench-token")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd.Reset(body)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %.300s", rec.Code, rec.Body.String())
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEventsDecodeOnly: the ingest handler with a core that does
// nothing, i.e. the service's own cost per event.
func BenchmarkEventsDecodeOnly(b *testing.B) {
	in := service.NewIngest(discardSink{}, service.DefaultLimits(), 8<<20, 4096, func() int64 { return benchNow })
	benchHandler(b, in, eventBatch([]string{"e1", "e2"}))
}

// BenchmarkEventsIngest: batches of 1000 events (125 requests' full
// lifecycles) POSTed through the service's whole HTTP handler chain
// (routing, metrics, bearer auth, decode, validation) into the real core
// facade. Reports events/s; the target is >= 300k events/s.
func BenchmarkEventsIngest(b *testing.B) {
	srv, engines := ingestService(b)
	benchHandler(b, srv.Handler(), eventBatch(engines))
}

// BenchmarkEventsIngestParallel: as BenchmarkEventsIngest, with batches
// posted from GOMAXPROCS goroutines at once (several router replicas).
func BenchmarkEventsIngestParallel(b *testing.B) {
	srv, engines := ingestService(b)
	h := srv.Handler()
	body := eventBatch(engines)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.RunParallel(func(pb *testing.PB) {
		rd := bytes.NewReader(body)
		req := httptest.NewRequest(http.MethodPost, "/v1/events", rd)
		req.Header.Set("Authorization", "Bearer bench-token")
		for pb.Next() {
			rd.Reset(body)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("status %d: %.300s", rec.Code, rec.Body.String())
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}

// ingestService is the service the ingest benchmarks post to: the real
// core with two prefill and two decode engines behind the service's
// production handler chain (bearer auth, no control loop, a fixed clock).
func ingestService(b *testing.B) (*service.Server, []string) {
	b.Helper()
	c, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	engines := []string{"e1", "e2", "e3", "e4"}
	for i, id := range engines {
		if err := c.UpsertEngine(controller.Engine{ID: id, Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB",
			Role: controller.Role(1 + i%2), Live: true, KVCapacityTokens: 66144}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token = "bench-token"
	cfg.Agents.Required = false
	srv, err := service.New(cfg, c, nil, service.WithClock(func() int64 { return benchNow }), service.WithoutControlLoop())
	if err != nil {
		b.Fatal(err)
	}
	return srv, engines
}
