package service

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the service's own narwhal_http_* metrics.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	events   *prometheus.CounterVec
	// eventCounters[type][0 accepted, 1 refused], resolved once so that
	// the ingest loop only adds per batch.
	eventCounters [numEventTypes][2]prometheus.Counter
}

func newHTTPMetrics() *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narwhal_http_requests_total",
			Help: "HTTP requests served, by handler and status code.",
		}, []string{"handler", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narwhal_http_request_duration_seconds",
			Help:    "HTTP request latency, by handler.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"handler"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narwhal_http_events_total",
			Help: "Lifecycle event lines received on /v1/events, by event type (invalid when undecodable) and result (accepted, refused).",
		}, []string{"type", "result"}),
	}
	for t := EventType(0); t < numEventTypes; t++ {
		m.eventCounters[t][0] = m.events.WithLabelValues(t.String(), "accepted")
		m.eventCounters[t][1] = m.events.WithLabelValues(t.String(), "refused")
	}
	return m
}

func (m *httpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.events}
}

// instrument wraps h with request count and latency under the handler label.
func (m *httpMetrics) instrument(name string, h http.Handler) http.Handler {
	dur := m.duration.WithLabelValues(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(&sw, r)
		dur.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(name, strconv.Itoa(sw.code)).Inc()
	})
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code = code
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
