package benchmarks

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkEventsIngestTCP: batches of 1000 events POSTed over real TCP
// (loopback, keep-alive) to a serving narwhal-core service with its
// production limits (connection cap, body budget, bearer auth) in front
// of the real core; measured end to end at the client, from GOMAXPROCS
// client goroutines (several routers). Issue 16 target: > 1 M events/s.
func BenchmarkEventsIngestTCP(b *testing.B) {
	srv, engines := ingestService(b)
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
