package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/narwhal-io/narwhal/core/wire"
)

func TestQueueDropsOldest(t *testing.T) {
	s := NewStreamer(StreamConfig{URL: "http://127.0.0.1:1", Node: "n", Epoch: 7, QueueSize: 3, Now: func() int64 { return 5 }})
	for i := 0; i < 5; i++ {
		s.Enqueue(wire.KindHeartbeat, nil)
	}
	st := s.Status()
	if st.Queued != 3 || st.Dropped != 2 || st.Seq != 5 {
		t.Fatalf("unexpected status; got %+v; want 3 queued, 2 dropped, seq 5", st)
	}
	s.mu.Lock()
	seqs := []uint64{s.queue[0].Seq, s.queue[1].Seq, s.queue[2].Seq}
	s.mu.Unlock()
	if seqs[0] != 3 || seqs[2] != 5 {
		t.Fatalf("unexpected queued sequences; got %v; want [3 4 5]", seqs)
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	s := NewStreamer(StreamConfig{BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second})
	f := func(n int, hi time.Duration) {
		t.Helper()
		for i := 0; i < 200; i++ {
			d := s.backoff(n)
			if d < 100*time.Millisecond || d > hi {
				t.Fatalf("failure %d: backoff %v outside [100ms, %v]", n, d, hi)
			}
		}
	}
	f(1, 100*time.Millisecond)
	f(2, 200*time.Millisecond)
	f(4, 800*time.Millisecond)
	f(50, time.Second)
}

// recorder is a fake core: it answers with codes from a script, then 200,
// and records every report it accepted.
type recorder struct {
	mu     sync.Mutex
	script []int
	auths  []string
	got    []wire.Report
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auths = append(r.auths, req.Header.Get("Authorization"))
	if len(r.script) > 0 {
		code := r.script[0]
		r.script = r.script[1:]
		w.WriteHeader(code)
		return
	}
	var b wire.Batch
	if err := json.NewDecoder(req.Body).Decode(&b); err != nil || b.Validate() != nil {
		w.WriteHeader(400)
		return
	}
	r.got = append(r.got, b.Reports...)
	_ = json.NewEncoder(w).Encode(wire.Ack{Accepted: len(b.Reports)})
}

func (r *recorder) kinds() []wire.Kind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []wire.Kind
	for _, rep := range r.got {
		ks = append(ks, rep.Kind)
	}
	return ks
}

func TestStreamerReconnectsInOrderWithHello(t *testing.T) {
	rec := &recorder{script: []int{503, 503, 401}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := NewStreamer(StreamConfig{
		URL: srv.URL, Node: "n", Epoch: 9, QueueSize: 16, HeartbeatNs: int64(time.Hour),
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Token: func() (string, error) { return "tok", nil },
		Hello: func() wire.Hello { return wire.Hello{AgentVersion: "t"} },
	})
	s.EnqueueHello()
	s.Enqueue(wire.KindSnapshot, &wire.Snapshot{})
	s.Enqueue(wire.KindLiveness, &wire.Liveness{Engine: "e1", Reason: "exit"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	// Wait for the acknowledgement too, not only for the server to record the
	// batch: cancelling between the two fails the post in flight.
	waitFor(t, "delivery after 3 failures", func() bool {
		st := s.Status()
		return len(rec.kinds()) >= 4 && st.Queued == 0 && st.LastAckNs != 0
	})
	cancel()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// hello, snapshot, liveness in order, then the hello re-sent after the outage
	want := []wire.Kind{wire.KindHello, wire.KindSnapshot, wire.KindLiveness, wire.KindHello}
	for i, k := range want {
		if rec.got[i].Kind != k || rec.got[i].Epoch != 9 || rec.got[i].Seq != uint64(i+1) {
			t.Fatalf("report %d: got %s epoch %d seq %d; want %s epoch 9 seq %d", i, rec.got[i].Kind, rec.got[i].Epoch, rec.got[i].Seq, k, i+1)
		}
	}
	for _, a := range rec.auths {
		if a != "Bearer tok" {
			t.Fatalf("unexpected Authorization %q", a)
		}
	}
	if st := s.Status(); st.Queued != 0 || st.Failures != 0 || st.LastAckNs == 0 {
		t.Fatalf("unexpected status; got %+v", st)
	}
}

func TestStreamerDropsRefusedBatchAndHeartbeats(t *testing.T) {
	rec := &recorder{script: []int{400}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := NewStreamer(StreamConfig{URL: srv.URL, Node: "n", Epoch: 1, HeartbeatNs: int64(20 * time.Millisecond),
		BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
	s.Enqueue(wire.KindSnapshot, &wire.Snapshot{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	waitFor(t, "a heartbeat", func() bool { return len(rec.kinds()) >= 1 })
	cancel()
	<-done
	if k := rec.kinds(); k[0] != wire.KindHeartbeat {
		t.Fatalf("unexpected first accepted report; got %v; want heartbeat (the refused snapshot dropped)", k)
	}
}

// Issue 16 defect 3: a 409 (every report refused: stale or future epoch,
// replay) is a failure, not an acknowledgement: it is counted, shown in
// the stream status that /healthz reports, and cleared by the next 200.
func TestConflictAnswerIsAFailureNotAnAck(t *testing.T) {
	var mu sync.Mutex
	code := http.StatusConflict
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := code
		mu.Unlock()
		w.WriteHeader(c)
		ack := wire.Ack{Accepted: 1}
		if c == http.StatusConflict {
			ack = wire.Ack{Rejected: []wire.Rejection{{Seq: 1, Reason: "fleet: stale epoch"}}}
		}
		_ = json.NewEncoder(w).Encode(ack)
	}))
	defer srv.Close()
	s := NewStreamer(StreamConfig{URL: srv.URL, Node: "n", Epoch: 1, HeartbeatNs: int64(time.Hour),
		BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
	s.Enqueue(wire.KindSnapshot, &wire.Snapshot{})
	if err := s.sendOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	if st.LastAckNs != 0 || !strings.Contains(st.Refused, "409") || !strings.Contains(st.Refused, "stale epoch") || st.Queued != 0 {
		t.Fatalf("after a 409: %+v; want no ack, refused naming 409 and the reason, queue drained", st)
	}
	var m dto.Metric
	if err := s.errs.WithLabelValues("409").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("narwhal_agent_send_errors_total{cause=409} = %v; want 1", m.GetCounter().GetValue())
	}
	a := &Agent{stream: s, cfg: Config{StaleAfterS: 15}}
	if h := a.Health(time.Now().UnixNano()); h.OK || !strings.Contains(strings.Join(h.Problems, ";"), "core refused the last batch (409") {
		t.Fatalf("health after a 409: %+v; want not OK naming the refusal", h)
	}
	mu.Lock()
	code = http.StatusOK
	mu.Unlock()
	s.Enqueue(wire.KindHeartbeat, nil)
	if err := s.sendOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Refused != "" || st.LastAckNs == 0 {
		t.Fatalf("after a 200: %+v; want the refusal cleared and an ack", st)
	}
}
