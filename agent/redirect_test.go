package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/wire"
)

// A scrape follows a redirect on the engine's own host (/metrics to
// /metrics/, as a mounted metrics app answers) and no other: an engine
// whose endpoint sends it to another host reports a scrape error, and
// that host's numbers are not counted as the engine's.
func TestScrapeFollowsOnlySameHostRedirects(t *testing.T) {
	page := []byte(backlogPage(3, 5, 40, 10)) // 3 waiting, 5 running
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		_, _ = w.Write([]byte(backlogPage(99, 99, 40, 10)))
	}))
	defer other.Close()
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			http.Redirect(w, r, "/metrics/", http.StatusTemporaryRedirect)
		case "/metrics/":
			_, _ = w.Write(page)
		case "/away":
			http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
		}
	}))
	defer eng.Close()
	a, err := New(Config{Node: "n", StaleAfterS: 5, Engines: []EngineConfig{
		backlogEngine("here", "prefill", eng.URL+"/metrics"), backlogEngine("away", "prefill", eng.URL+"/away")}})
	if err != nil {
		t.Fatal(err)
	}
	snap := a.Collect(context.Background(), time.Now().UnixNano())
	got := map[string]wire.EngineReport{}
	for _, r := range snap.Engines {
		got[r.ID] = r
	}
	if r := got["here"]; r.ScrapeError != "" || r.RunningRequests != 5 || r.QueuedRequests != 3 {
		t.Errorf("same-host redirect: scrape error %q, running %d, queued %d; want none, 5, 3", r.ScrapeError, r.RunningRequests, r.QueuedRequests)
	}
	if r := got["away"]; !strings.Contains(r.ScrapeError, "302") || r.RunningRequests == 99 {
		t.Errorf("redirect to another host: scrape error %q, running %d; want a 302 error and not the other host's 99", r.ScrapeError, r.RunningRequests)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other host was asked %d times; want 0", n)
	}
}

// The core's address answering with a redirect: the agent does not
// resend its reports there (Go would turn the POST into a GET without its
// body, or drop the token on another host) and says what to fix.
func TestStreamerDoesNotFollowCoreRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/agent/reports", http.StatusPermanentRedirect)
	}))
	defer core.Close()
	a, err := New(Config{Node: "n", CoreURL: core.URL + "/v1/agent/reports", StaleAfterS: 5})
	if err != nil {
		t.Fatal(err)
	}
	s := a.stream
	s.Enqueue(wire.KindSnapshot, &wire.Snapshot{})
	err = s.sendOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "redirect to "+other.URL) || !strings.Contains(err.Error(), "core_url") {
		t.Fatalf("send to a redirecting core: %v; want an error naming the redirect and core_url", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests; want 0", n)
	}
	if st := s.Status(); st.Queued != 1 {
		t.Fatalf("queued after the refused send: %d; want the report kept (1)", st.Queued)
	}
}
