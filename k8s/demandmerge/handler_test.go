package demandmerge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/buckets"
)

func TestHandlerAndPost(t *testing.T) {
	s := newStore(t)
	leading := true
	srv := httptest.NewServer(Handler(s, 1<<16, func() bool { return leading }, nil))
	defer srv.Close()
	ctx := context.Background()
	d := Delta{Router: "r", Epoch: 1, Seq: 1, WidthNs: widthNs,
		Demand: []DemandBucket{{Kind: buckets.KindArrivals, StartNs: t0, Cells: [][3]int64{{100, 10, 4}}}}}
	for range 2 { // the retry of an unacknowledged delta is harmless
		inst, err := Post(ctx, srv.Client(), srv.URL, "", &d)
		if err != nil {
			t.Fatalf("Post: %v", err)
		}
		if inst != s.Instance() || inst == "" {
			t.Fatalf("instance %q; want %q", inst, s.Instance())
		}
	}
	if _, w := s.History(buckets.KindArrivals).Window(t0, t0, nil); w.Count() != 4 {
		t.Fatalf("count after two posts of one delta: %d; want 4", w.Count())
	}
	bad := d
	bad.Router = ""
	if _, err := Post(ctx, srv.Client(), srv.URL, "", &bad); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("invalid delta: got %v; want a 400", err)
	}
	leading = false
	if _, err := Post(ctx, srv.Client(), srv.URL, "", &d); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("post to a follower: got %v; want ErrNotLeader", err)
	}
	leading = true
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"router":"r","x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown field: status %d; want 400", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL, "application/json", strings.NewReader(`{"router":"`+strings.Repeat("r", 1<<17)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge body: status %d; want 413", resp.StatusCode)
	}
	if st := s.Stats(); st.Deltas != 2 || st.Applied != 1 || st.Duplicate != 1 {
		t.Fatalf("unexpected stats %+v", st)
	}
}

// TestShipResendsToANewLeader: a router ships to the leader's store; the
// leader changes (a new, empty store answers); the router notices the new
// instance and resends every bucket it retains, so the new leader's merged
// view is whole again.
func TestShipResendsToANewLeader(t *testing.T) {
	c := newCore(t)
	base := (time.Now().UnixNano()/widthNs - 10) * widthNs // ten closed buckets ago
	for i := range 50 {
		c.d.Arrivals.Record(base+int64(i)*100e6, buckets.Shape{Input: int64(100 + i%5), Output: 10})
	}
	x, err := NewExporter("r", 1, c.d, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, next := newStore(t), newStore(t)
	var cur atomic.Pointer[Store]
	cur.Store(old)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Handler(cur.Load(), 1<<20, nil, nil).ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Ship(ctx, x, srv.Client(), srv.URL, func() string { return "" }, 10*time.Millisecond, nil)
		close(done)
	}()
	defer func() { cancel(); <-done }()

	count := func(s *Store) int64 {
		_, w := s.History(buckets.KindArrivals).Window(base, base+10*widthNs, nil)
		return w.Count()
	}
	waitCount := func(s *Store, name string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for count(s) != 50 {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d observations; want 50", name, count(s))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCount(old, "old leader")
	cur.Store(next) // failover: the new leader starts empty
	waitCount(next, "new leader")
}
