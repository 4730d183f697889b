package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// maxBatch bounds the reports sent in one POST.
const maxBatch = 256

// StreamConfig configures a Streamer.
type StreamConfig struct {
	URL   string
	Node  string
	Epoch uint64
	// Token returns the bearer token (re-read per attempt; nil: none).
	Token       func() (string, error)
	QueueSize   int
	HeartbeatNs int64
	BackoffMin  time.Duration
	BackoffMax  time.Duration
	Client      *http.Client
	Logger      *slog.Logger
	// Hello returns the hello payload, sent first and after every
	// recovered outage (the core may have restarted).
	Hello func() wire.Hello
	// Now gives the clock (Unix ns); nil: the wall clock.
	Now func() int64
}

// Streamer is the agent's connection to the core: a bounded drop-oldest
// queue of reports with sequence numbers, sent in order in batches, with
// heartbeats and jittered exponential backoff.
type Streamer struct {
	cfg    StreamConfig
	notify chan struct{}

	mu         sync.Mutex
	seq        uint64
	queue      []wire.Report // oldest first
	dropped    uint64
	needHello  bool
	lastSendNs int64
	lastAckNs  int64
	failures   int
	lastErr    string
	// refusal: the core's last answer refused the whole batch (4xx
	// settled: 409 every report stale or replayed, 400, 413); cleared by
	// the next 200.
	refusal string

	sent    *prometheus.CounterVec
	drops   prometheus.Counter
	errs    *prometheus.CounterVec
	qlen    prometheus.GaugeFunc
	lastAck prometheus.GaugeFunc
}

// NewStreamer returns a streamer; Run sends.
func NewStreamer(cfg StreamConfig) *Streamer {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.HeartbeatNs <= 0 {
		cfg.HeartbeatNs = int64(2 * time.Second)
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 200 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(10*time.Second, cfg.BackoffMin)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 5 * time.Second, CheckRedirect: sameHostGET}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	s := &Streamer{cfg: cfg, notify: make(chan struct{}, 1), needHello: cfg.Hello != nil}
	s.sent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_agent_reports_sent_total", Help: "Reports acknowledged by the core, by kind.",
	}, []string{"kind"})
	s.drops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "narwhal_agent_queue_dropped_total", Help: "Reports dropped (oldest first) because the queue was full.",
	})
	s.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "narwhal_agent_send_errors_total", Help: "Failed sends to the core, by cause (network, token: the token file unreadable, or the HTTP status code).",
	}, []string{"cause"})
	s.qlen = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_agent_queue_length", Help: "Reports waiting to be sent.",
	}, func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(len(s.queue)) })
	s.lastAck = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "narwhal_agent_last_ack_timestamp_seconds", Help: "When the core last acknowledged a batch (Unix s, 0 never).",
	}, func() float64 { s.mu.Lock(); defer s.mu.Unlock(); return float64(s.lastAckNs) / 1e9 })
	return s
}

// Collectors returns the streamer's metrics.
func (s *Streamer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.sent, s.drops, s.errs, s.qlen, s.lastAck}
}

// Enqueue adds a report of kind with one payload (nil for a heartbeat),
// assigning the next sequence number; when the queue is full the oldest
// report is dropped. It wakes the sender at once.
func (s *Streamer) Enqueue(kind wire.Kind, payload any) uint64 {
	s.mu.Lock()
	r := s.newReportLocked(kind, payload)
	if len(s.queue) >= s.cfg.QueueSize {
		n := len(s.queue) - s.cfg.QueueSize + 1
		s.queue = append(s.queue[:0], s.queue[n:]...)
		s.dropped += uint64(n)
		s.drops.Add(float64(n))
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return r.Seq
}

// EnqueueHello queues the hello now (instead of at Run's start).
func (s *Streamer) EnqueueHello() {
	if s.cfg.Hello == nil {
		return
	}
	s.mu.Lock()
	s.needHello = false
	s.mu.Unlock()
	h := s.cfg.Hello()
	s.Enqueue(wire.KindHello, &h)
}

func (s *Streamer) newReportLocked(kind wire.Kind, payload any) wire.Report {
	s.seq++
	r := wire.Report{Kind: kind, Node: s.cfg.Node, Epoch: s.cfg.Epoch, Seq: s.seq, SentNs: s.cfg.Now()}
	switch p := payload.(type) {
	case *wire.Hello:
		r.Hello = p
	case *wire.Snapshot:
		r.Snapshot = p
	case *wire.Liveness:
		r.Liveness = p
	}
	return r
}

// StreamStatus is the streamer's position.
type StreamStatus struct {
	Epoch     uint64 `json:"epoch"`
	Seq       uint64 `json:"seq"`
	Queued    int    `json:"queued"`
	Dropped   uint64 `json:"dropped"`
	LastAckNs int64  `json:"last_ack_ns"`
	Failures  int    `json:"consecutive_failures"`
	LastError string `json:"last_error,omitempty"`
	// Refused: the core refused the last batch as a whole (e.g. "409:
	// stale epoch"); empty once a batch is accepted.
	Refused string `json:"refused,omitempty"`
}

// Status returns the streamer's position.
func (s *Streamer) Status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StreamStatus{Epoch: s.cfg.Epoch, Seq: s.seq, Queued: len(s.queue), Dropped: s.dropped,
		LastAckNs: s.lastAckNs, Failures: s.failures, LastError: s.lastErr, Refused: s.refusal}
}

// Run sends until ctx ends: whenever reports are queued, and a heartbeat
// when nothing was sent for the heartbeat interval. Failures back off
// with full jitter between BackoffMin and BackoffMax.
func (s *Streamer) Run(ctx context.Context) {
	hb := time.NewTicker(time.Duration(s.cfg.HeartbeatNs) / 2)
	defer hb.Stop()
	for {
		s.mu.Lock()
		hello := s.needHello
		s.needHello = false
		s.mu.Unlock()
		if hello {
			h := s.cfg.Hello()
			s.Enqueue(wire.KindHello, &h)
		}
		s.mu.Lock()
		pending := len(s.queue) > 0
		s.mu.Unlock()
		if pending {
			if err := s.sendOnce(ctx); err != nil {
				s.mu.Lock()
				s.failures++
				s.lastErr = err.Error()
				n := s.failures
				if n == 1 && s.cfg.Hello != nil {
					s.needHello = true
				}
				s.mu.Unlock()
				if n == 1 || n%10 == 0 {
					s.cfg.Logger.Warn("sending to the core failed; backing off", "err", err, "failures", n)
				}
				if !sleepCtx(ctx, s.backoff(n)) {
					return
				}
				continue
			}
			continue // drain the rest of the queue before waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-s.notify:
		case <-hb.C:
			s.mu.Lock()
			idle := s.cfg.Now()-s.lastSendNs >= s.cfg.HeartbeatNs
			s.mu.Unlock()
			if idle {
				s.Enqueue(wire.KindHeartbeat, nil)
			}
		}
	}
}

// backoff is full jitter: uniform in [min, min(max, min·2^(n−1))].
func (s *Streamer) backoff(n int) time.Duration {
	ceil := s.cfg.BackoffMin << min(n-1, 20)
	if ceil > s.cfg.BackoffMax || ceil <= 0 {
		ceil = s.cfg.BackoffMax
	}
	span := ceil - s.cfg.BackoffMin
	if span <= 0 {
		return s.cfg.BackoffMin
	}
	return s.cfg.BackoffMin + rand.N(span+1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

var errPermanent = errors.New("agent: core refused the batch permanently")

// sendOnce posts the oldest queued reports. On an answer that settles
// them (200, 409 all refused, 400/413 refused) they leave the queue; on
// anything else they stay and an error is returned. Only 200 is an
// acknowledgement: a settled refusal is logged, counted
// (narwhal_agent_send_errors_total by status code) and shown in /healthz
// until a batch is accepted.
func (s *Streamer) sendOnce(ctx context.Context) error {
	s.mu.Lock()
	n := min(len(s.queue), maxBatch)
	b := wire.Batch{Version: wire.Version, Reports: append([]wire.Report(nil), s.queue[:n]...)}
	s.mu.Unlock()
	lastSeq := b.Reports[n-1].Seq
	body, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("agent: encode batch: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("agent: request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.cfg.Token != nil {
		tok, err := s.cfg.Token()
		if err != nil {
			s.errs.WithLabelValues("token").Inc()
			return fmt.Errorf("agent: bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		s.errs.WithLabelValues("network").Inc()
		return fmt.Errorf("agent: post to core: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	settled := true
	refusal := ""
	switch {
	case resp.StatusCode == http.StatusOK:
		var ack wire.Ack
		if json.Unmarshal(msg, &ack) == nil && len(ack.Rejected) > 0 {
			s.cfg.Logger.Debug("core refused some reports", "rejected", len(ack.Rejected), "first", ack.Rejected[0].Reason)
		}
	case resp.StatusCode == http.StatusConflict:
		// Every report refused (stale epoch, epoch ahead of the core's
		// clock, replay, registry full): resending cannot help, but the
		// core is not taking this agent's data, which is a failure.
		var ack wire.Ack
		reason := strings.TrimSpace(string(msg))
		if json.Unmarshal(msg, &ack) == nil && len(ack.Rejected) > 0 {
			reason = ack.Rejected[0].Reason
		}
		refusal = fmt.Sprintf("%d: %s", resp.StatusCode, reason)
		s.errs.WithLabelValues(fmt.Sprint(resp.StatusCode)).Inc()
		s.cfg.Logger.Error("core refused every report of a batch; dropping it", "status", resp.StatusCode,
			"reports", n, "reason", reason, "err", errPermanent)
	case resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusRequestEntityTooLarge:
		refusal = fmt.Sprintf("%d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		s.errs.WithLabelValues(fmt.Sprint(resp.StatusCode)).Inc()
		s.cfg.Logger.Error("core refused a batch; dropping it", "status", resp.StatusCode,
			"reports", n, "body", strings.TrimSpace(string(msg)), "err", errPermanent)
	default:
		settled = false
		s.errs.WithLabelValues(fmt.Sprint(resp.StatusCode)).Inc()
	}
	if !settled {
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
			return fmt.Errorf("agent: core answered %d, a redirect to %s, which the agent does not follow: set core_url to the core's own address", resp.StatusCode, loc)
		}
		return fmt.Errorf("agent: core answered %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.queue) && s.queue[i].Seq <= lastSeq {
		if resp.StatusCode == http.StatusOK {
			s.sent.WithLabelValues(string(s.queue[i].Kind)).Inc()
		}
		i++
	}
	s.queue = append(s.queue[:0], s.queue[i:]...)
	now := s.cfg.Now()
	s.lastSendNs = now
	s.refusal = refusal
	if resp.StatusCode == http.StatusOK {
		s.lastAckNs = now
	}
	if s.failures > 0 {
		s.cfg.Logger.Info("connection to the core recovered", "after_failures", s.failures)
	}
	s.failures, s.lastErr = 0, ""
	return nil
}
