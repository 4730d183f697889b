package demandmerge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
		if err := Post(ctx, srv.Client(), srv.URL, "", &d); err != nil {
			t.Fatalf("Post: %v", err)
		}
	}
	if _, w := s.History(buckets.KindArrivals).Window(t0, t0, nil); w.Count() != 4 {
		t.Fatalf("count after two posts of one delta: %d; want 4", w.Count())
	}
	bad := d
	bad.Router = ""
	if err := Post(ctx, srv.Client(), srv.URL, "", &bad); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("invalid delta: got %v; want a 400", err)
	}
	leading = false
	if err := Post(ctx, srv.Client(), srv.URL, "", &d); !errors.Is(err, ErrNotLeader) {
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
