package benchmarks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Baselines for the controller's and the service's benchmarks: what a
// router or an ingest endpoint would use instead, run in the same binary so
// that a ratio can be read from one run.

// roleMap is the plain alternative to the published role table: a map
// guarded by a read-write mutex.
type roleMap struct {
	mu      sync.RWMutex
	decode  []string
	prefill []string
}

func newRoleMap() *roleMap {
	m := &roleMap{}
	for i := 0; i < 32; i++ {
		m.prefill = append(m.prefill, "p"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		m.decode = append(m.decode, "d"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	return m
}

// BenchmarkBaselineRWMutexRoleRead: beside BenchmarkRoleTableRead, the
// same per-request pick under a read lock.
func BenchmarkBaselineRWMutexRoleRead(b *testing.B) {
	m := newRoleMap()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.mu.RLock()
		sinkID = m.decode[i&31]
		m.mu.RUnlock()
	}
}

// BenchmarkBaselineRWMutexRoleReadParallel: beside
// BenchmarkRoleTableReadParallel (a read lock's counter is shared by every
// reader, so it contends).
func BenchmarkBaselineRWMutexRoleReadParallel(b *testing.B) {
	m := newRoleMap()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var id string
		i := 0
		for pb.Next() {
			m.mu.RLock()
			id = m.prefill[i&31]
			m.mu.RUnlock()
			i++
		}
		_ = id
	})
}

// BenchmarkBaselinePrometheusRequest: beside BenchmarkEmbeddedRequest, the
// per-request instrumentation a router keeps without Narwhal: a request
// counter, input and output token histograms, TTFT and TPOT histograms.
func BenchmarkBaselinePrometheusRequest(b *testing.B) {
	reqs := prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total", Help: "h"})
	tokens := func(name string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: "h",
			Buckets: prometheus.ExponentialBuckets(16, 2, 12)})
	}
	secs := func(name string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: "h",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)})
	}
	in, out, ttft, tpot := tokens("input_tokens"), tokens("output_tokens"), secs("ttft_seconds"), secs("tpot_seconds")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reqs.Inc()
		in.Observe(1024)
		ttft.Observe(0.15)
		out.Observe(200)
		tpot.Observe(4.85 / 199)
	}
}

// baselineEvent is the event line decoded the ordinary way.
type baselineEvent struct {
	Type         string `json:"type"`
	TsNs         int64  `json:"ts_ns"`
	ArrivalNs    int64  `json:"arrival_ns"`
	FirstTokenNs int64  `json:"first_token_ns"`
	EstInput     int64  `json:"est_input_tokens"`
	Input        int64  `json:"input_tokens"`
	ReqOutput    int64  `json:"requested_output_tokens"`
	Output       int64  `json:"output_tokens"`
	Engine       string `json:"engine"`
}

// BenchmarkBaselineEventsEncodingJSON: beside BenchmarkEventsDecodeOnly,
// the same 1000-line batch split into lines and decoded with
// encoding/json into a struct per line (no validation, no core).
func BenchmarkBaselineEventsEncodingJSON(b *testing.B) {
	batch := eventBatch([]string{"e1", "e2"})
	b.ReportAllocs()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sc := bufio.NewScanner(bytes.NewReader(batch))
		n := 0
		for sc.Scan() {
			var ev baselineEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 1000 {
			b.Fatalf("decoded %d lines, want 1000", n)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}
