package netcap

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func serve(t *testing.T, limit int64) (*Listener, prometheus.Counter, *bytes.Buffer, string) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_refused_total", Help: "t"})
	var logs bytes.Buffer
	ln := New(raw, limit, "test.max_connections", refused, slog.New(slog.NewTextHandler(&logs, nil)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln, refused, &logs, ln.Addr().String()
}

func waitOpen(t *testing.T, ln *Listener, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ln.Open() != n {
		if time.Now().After(deadline) {
			t.Fatalf("open connections: got %d, want %d", ln.Open(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Connections beyond the cap get a 503 at once, counted, logged and
// closed; closing a held one frees its slot.
func TestCapRefusesBeyondLimitAndFreesOnClose(t *testing.T) {
	ln, refused, logs, addr := serve(t, 3)
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitOpen(t, ln, 3)
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the refusal: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	c.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "test.max_connections") || time.Since(start) > time.Second {
		t.Fatalf("beyond the cap: %d %q retry-after %q after %v; want 503 naming the setting within 1 s", resp.StatusCode, body, resp.Header.Get("Retry-After"), time.Since(start))
	}
	if got := testutil.ToFloat64(refused); got != 1 {
		t.Fatalf("refusals counted: got %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "test.max_connections reached") {
		t.Fatalf("refusal not logged: %q", logs.String())
	}
	if ln.Open() != 3 {
		t.Fatalf("a refused connection must not hold a slot: open %d", ln.Open())
	}
	held[0].Close()
	waitOpen(t, ln, 2)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := cl.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("after a slot freed: %d %q, want 200 ok", r.StatusCode, b)
	}
	for _, c := range held[1:] {
		c.Close()
	}
	waitOpen(t, ln, 0)
}

// A cap below 1 is 1, and a nil counter and logger are allowed.
func TestCapAtLeastOneAndNilOptional(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if ln := New(raw, 0, "x", nil, nil); ln.Max() != 1 {
		t.Fatalf("cap 0: Max %d, want 1", ln.Max())
	}
	ln := New(raw, 1, "x", nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, err := ln.Accept()
		if err != nil {
			return
		}
		defer a.Close()
		// The second dial is refused inside Accept; this one blocks until raw closes.
		if _, err := ln.Accept(); err == nil {
			t.Error("Accept returned a connection beyond the cap")
		}
	}()
	c1, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c2).ReadString('\n')
	c2.Close()
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("second connection with cap 1 and no counter: %q %v", line, err)
	}
	raw.Close()
	<-done
}
