package service

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"
)

// The admin (pprof) listener's limits: see New.
const (
	adminMaxConnections = 16
	adminMaxBodyBytes   = 64 << 10
	adminWriteTimeout   = 30 * time.Second
	adminMaxSeconds     = 60
)

// maxProfileSeconds answers 400 to a pprof request whose seconds
// parameter (CPU profile, trace, delta profiles) exceeds adminMaxSeconds:
// pprof itself runs as long as it is asked, holding a connection and
// the profiler.
func maxProfileSeconds(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			if sec, err := strconv.ParseFloat(v, 64); err != nil || !(sec <= adminMaxSeconds) {
				http.Error(w, fmt.Sprintf("seconds=%q: want a number of seconds up to %d on the admin listener", v, adminMaxSeconds), http.StatusBadRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// effectiveMaxConnections lowers the configured cap so that at least
// fdReserve descriptors stay free for the journal, the checkpoint and
// outgoing connections under the process's RLIMIT_NOFILE.
func effectiveMaxConnections(configured int64, log *slog.Logger) int64 {
	const fdReserve = 256
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return configured
	}
	limit := int64(rl.Cur)
	if rl.Cur > uint64(1<<40) {
		limit = 1 << 40
	}
	if configured > limit-fdReserve {
		eff := max(1, limit-fdReserve)
		log.Warn("http.max_connections lowered to keep descriptors for persistence", "configured", configured, "rlimit_nofile", limit, "effective", eff)
		return eff
	}
	return configured
}

// bodyBudget caps the bytes of request bodies being read at once over
// every write endpoint. A request reserves its Content-Length (or
// http.max_body_bytes when the length is unknown) before its body is
// read; a request that does not fit is answered 503 with Retry-After at
// once, so memory stays bounded under any number of concurrent writers.
type bodyBudget struct {
	max, perBody int64
	used         atomic.Int64
	refused      prometheus.Counter
	inflight     prometheus.GaugeFunc
}

func newBodyBudget(max, perBody int64) *bodyBudget {
	b := &bodyBudget{max: max, perBody: perBody,
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_http_body_budget_refusals_total",
			Help: "Write requests answered 503 because http.max_inflight_body_bytes was in use."})}
	b.inflight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "narwhal_http_inflight_body_bytes",
		Help: "Body bytes reserved by write requests being read."}, func() float64 { return float64(b.used.Load()) })
	return b
}

func (b *bodyBudget) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.perBody
		if r.ContentLength >= 0 && r.ContentLength < n {
			n = max(r.ContentLength, 1)
		}
		if b.used.Add(n) > b.max {
			b.used.Add(-n)
			b.refused.Inc()
			// HTTP/1: answer first, then read the body to its declared end
			// (at most n bytes, within http.read_timeout_s) into nothing.
			// Closing on a client still sending makes its kernel reset the
			// connection, and a client (Go's among them) that meets the
			// reset while writing reports the write error instead of
			// this 503 and its Retry-After. A client that asked
			// "Expect: 100-continue" sends no body after a final answer:
			// there is nothing to wait for.
			rc := http.NewResponseController(w)
			linger := r.ProtoMajor == 1 && r.ContentLength != 0 && !expectsContinue(r) && rc.EnableFullDuplex() == nil
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusServiceUnavailable, errorReply{fmt.Sprintf(
				"server busy: %d body bytes in flight would pass http.max_inflight_body_bytes=%d; nothing was applied, retry shortly", b.used.Load()+n, b.max)})
			if linger && rc.Flush() == nil {
				_, _ = io.CopyN(io.Discard, r.Body, n)
			}
			return
		}
		defer b.used.Add(-n)
		h.ServeHTTP(w, r)
	})
}

// agentAuthDisabled answers every agent report 401 when no agent token is
// configured (agents.required=false) and unauthenticated writes are not
// allowed: the routers' token never opens the agents' endpoint.
func agentAuthDisabled() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="narwhal"`)
		writeJSON(w, http.StatusUnauthorized, errorReply{"agent reports are disabled: set auth.agent_token_file (or NARWHAL_AUTH_AGENT_TOKEN); the routers' token is not accepted here"})
	})
}

// expectsContinue: the request carries "Expect: 100-continue" (its body
// follows only an interim 100 answer): a case-insensitive token in any
// of its comma-separated values.
func expectsContinue(r *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(r.Header["Expect"], "100-continue")
}
