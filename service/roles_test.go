package service

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
)

// GET /v1/roles answers with an ETag; If-None-Match with it gets 304 and
// no body while the table is unchanged, 200 with the new table once it
// changed. With Prefer: wait=N the 304 waits up to N seconds, and a
// change within them is answered at once with the new table.
func TestRolesConditionalAndWait(t *testing.T) {
	rc := newRealCore(t, "e1", "e2")
	cfg := testConfig()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg, rc, nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	serving(t, s)
	client := &http.Client{Timeout: 20 * time.Second}
	get := func(etag, prefer string) (int, http.Header, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/v1/roles", nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		if prefer != "" {
			req.Header.Set("Prefer", prefer)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), time.Since(start)
	}
	decode := func(body string) controller.RoleTable {
		t.Helper()
		var tb controller.RoleTable
		if err := json.Unmarshal([]byte(body), &tb); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return tb
	}

	code, h, body, _ := get("", "")
	etag := h.Get("ETag")
	if code != 200 || len(etag) < 10 || etag[0] != '"' || len(decode(body).Prefill) != 1 {
		t.Fatalf("first GET: %d etag %q body %s", code, etag, body)
	}
	if code, h, body, _ := get(etag, ""); code != http.StatusNotModified || body != "" || h.Get("ETag") != etag {
		t.Fatalf("unchanged: %d etag %q body %q; want 304, the same ETag, no body", code, h.Get("ETag"), body)
	}
	if code, _, _, _ := get(`"something-else"`, ""); code != 200 {
		t.Fatalf("another ETag: %d, want 200", code)
	}
	// Waiting without a change: 304 after about the wait.
	code, h, _, took := get(etag, "wait=1")
	if code != http.StatusNotModified || took < 900*time.Millisecond || h.Get("Preference-Applied") != "wait=1" {
		t.Fatalf("wait without a change: %d after %v (Preference-Applied %q); want 304 after 1 s", code, took, h.Get("Preference-Applied"))
	}
	// A change during the wait answers at once with the new table.
	go func() {
		time.Sleep(300 * time.Millisecond)
		if err := rc.UpsertEngine(controller.Engine{ID: "e3", Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB",
			Role: controller.RolePrefill, Live: true, KVCapacityTokens: 66144}); err != nil {
			t.Error(err)
		}
	}()
	code, h, body, took = get(etag, "wait=10")
	if code != 200 || took < 250*time.Millisecond || took > 5*time.Second || h.Get("ETag") == etag || len(decode(body).Prefill) != 2 {
		t.Fatalf("change during the wait: %d after %v, etag %q, body %s; want 200 with e3 within about 0.3 s", code, took, h.Get("ETag"), body)
	}
	if code, _, _, _ := get(etag, ""); code != 200 {
		t.Fatalf("old ETag after the change: %d, want 200", code)
	}
}

func TestPreferWait(t *testing.T) {
	for _, tc := range []struct {
		prefer []string
		want   int
	}{
		{nil, 0},
		{[]string{"wait=5"}, 5},
		{[]string{"respond-async, Wait = 7"}, 7},
		{[]string{"handling=lenient", "wait=\"3\""}, 3},
		{[]string{"wait=500"}, 60},
		{[]string{"wait=-1"}, 0},
		{[]string{"wait=1.5"}, 0},
		{[]string{"wait"}, 0},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/v1/roles", nil)
		for _, p := range tc.prefer {
			r.Header.Add("Prefer", p)
		}
		if got := preferWait(r, 60); got != tc.want {
			t.Errorf("Prefer %q: got %d, want %d", tc.prefer, got, tc.want)
		}
	}
}

// A request waiting for a role change does not hold the shutdown: it is
// answered (304) as soon as Serve starts shutting down.
func TestRolesWaitEndsAtShutdown(t *testing.T) {
	cfg := testConfig()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg, newRealCore(t, "e1", "e2"), nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	url := "http://" + s.Addr().String() + "/v1/roles"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	req.Header.Set("Prefer", "wait=25")
	got := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond) // the request is waiting
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil || time.Since(start) > 5*time.Second {
			t.Fatalf("Serve returned %v after %v; want nil at once", err, time.Since(start))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return within 15 s of the cancel")
	}
	if code := <-got; code != http.StatusNotModified {
		t.Fatalf("the waiting request got %d, want 304", code)
	}
}

// swapCore serves a role table no controller published (Replaced nil),
// swapped by the test.
type swapCore struct {
	*fakeCore
	t atomic.Pointer[roleTable]
}

func (c *swapCore) Roles() *roleTable { return c.t.Load() }

// The roles watcher takes up a table that cannot say when it is replaced
// by looking again every rolesPollInterval, and stops with its context.
func TestRolesWatchPollsWithoutReplaced(t *testing.T) {
	c := &swapCore{fakeCore: newFakeCore("e1")}
	c.t.Store(&roleTable{Version: 1, Prefill: []string{"e1"}})
	var w rolesWatch
	first, changed := w.wait(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.run(c)(ctx) }()
	c.t.Store(&roleTable{Version: 2, Prefill: []string{"e1", "e2"}})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not take up the new table within 5 s")
	}
	if b := w.body(c); b.t.Version != 2 || b.etag == first.etag {
		t.Fatalf("after the change: version %d, etag %q (was %q)", b.t.Version, b.etag, first.etag)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not stop with its context")
	}
}
