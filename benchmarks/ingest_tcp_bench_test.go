package benchmarks

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service"
)

// BenchmarkEventsIngestTCP: batches of 1000 events POSTed over real TCP
// (loopback, keep-alive) to a serving narwhal-core service with its
// production limits (connection cap, body budget, bearer auth) in front
// of the real core; measured end to end at the client, from GOMAXPROCS
// client goroutines (several routers). Issue 16 target: > 1 M events/s.
func BenchmarkEventsIngestTCP(b *testing.B) {
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	url := "http://" + srv.Addr().String() + "/v1/events"
	body := eventBatch(engines)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer bench-token")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
	b.StopTimer() // the server's graceful shutdown is not ingest
	client.CloseIdleConnections()
}
