package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/internal/netcap/netcaptest"
)

// serveDurable runs a Server over a DurableCore in a temp data dir.
func serveDurable(t *testing.T, cfg Config) (*Server, *DurableCore, string) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.Engines = []EngineSeed{{ID: "e1", Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: "prefill", KVCapacityTokens: 66144},
		{ID: "e2", Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: "decode", KVCapacityTokens: 66144}}
	dc, err := NewCore(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, dc, nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, dc, cfg.DataDir
}

// Issue 16 defect 4: idle keep-alive connections beyond
// http.max_connections are refused at once (503, closed), not left to
// hang, and the journal and state checkpoint keep working meanwhile.
func TestConnectionCapRefusesQuicklyAndStateSavesContinue(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.MaxConnections = 16
	s, dc, dir := serveDurable(t, cfg)
	addr := s.Addr().String()
	var idle []net.Conn
	for range 16 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(50 * time.Millisecond) // let the server accept them
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.Contains(line, "503") || time.Since(start) > time.Second {
		t.Fatalf("connection beyond the cap: %q %v after %v; want a 503 within 1 s", line, err, time.Since(start))
	}
	// Persistence works while the cap is held.
	d := dc.Step(testNow)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := controller.LoadState(filepath.Join(dir, StateFile))
		if err == nil && st.Seq == d.Seq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state checkpoint not saved for seq %d while connections are capped: %+v %v", d.Seq, st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := dc.JournalHealth(); err != nil {
		t.Fatalf("journal unhealthy while connections are capped: %v", err)
	}
	for _, c := range idle {
		c.Close()
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection accepted after the idle ones closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 16 defect 5: concurrent request bodies are capped in bytes
// (http.max_inflight_body_bytes): a write that does not fit is answered
// 503 at once and applies nothing; once bodies finish, writes succeed.
// holdBodyBudget starts two slow bodies of size bytes (the test's
// max_body_bytes), each sending line and then waiting on its writer, and
// returns once they hold the whole budget (2 × size); results receives
// each one's status (-1: a client error) once its writer is finished.
func holdBodyBudget(t *testing.T, s *Server, url, line string, size int64) (writers []*io.PipeWriter, results chan int) {
	t.Helper()
	results = make(chan int, 2)
	for range 2 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		req, _ := http.NewRequest(http.MethodPost, url, pr)
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer "+testToken)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- -1
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
		pw.Write([]byte(line))
	}
	t.Cleanup(func() {
		for _, pw := range writers {
			pw.Close()
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for s.budget.used.Load() < 2*size {
		if time.Now().After(deadline) {
			t.Fatalf("slow bodies hold %d bytes; want %d", s.budget.used.Load(), 2*size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return writers, results
}

func TestConcurrentBodyBytesAreCapped(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.MaxBodyBytes = 64 << 10
	cfg.HTTP.MaxInflightBodyBytes = 128 << 10
	s, dc, _ := serveDurable(t, cfg)
	url := "http://" + s.Addr().String() + "/v1/events"
	line := fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`+"\n", testNow)
	// Two slow bodies of max_body_bytes hold the whole budget.
	writers, results := holdBodyBudget(t, s, url, line, 64<<10)
	before := dc.State(testNow).DemandHistory
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(line))
	req.Header.Set("Authorization", "Bearer "+testToken)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || time.Since(start) > time.Second {
		t.Fatalf("write beyond the body budget: %d %s after %v; want 503 with Retry-After at once", resp.StatusCode, b, time.Since(start))
	}
	if after := dc.State(testNow).DemandHistory; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refused write changed the demand history")
	}
	// Finish the slow bodies: padding lines up to the declared length.
	for _, pw := range writers {
		pad := (64 << 10) - len(line)
		pw.Write([]byte(strings.Repeat(" ", pad-1) + "\n"))
		pw.Close()
	}
	for range 2 {
		if code := <-results; code != 200 {
			t.Fatalf("slow body answered %d; want 200", code)
		}
	}
	req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader(line))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.budget.used.Load() != 0 {
		t.Fatalf("write after the budget freed: %d with %d bytes held; want 200 and 0", resp.StatusCode, s.budget.used.Load())
	}
}

// A write refused by the body budget is answered at once, and its body
// is then read to the declared end: a client still sending when the 503
// goes out finishes its upload and reads the answer, where a close would
// have reset the connection under it (Go's client then reports the write
// error, not the 503; cmd/narwhal-core's resource test met it under load).
func TestRefusedBodyIsReadToItsEndNotReset(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.MaxBodyBytes = 1 << 20
	cfg.HTTP.MaxInflightBodyBytes = 2 << 20
	s, _, _ := serveDurable(t, cfg)
	line := fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`+"\n", testNow)
	holdBodyBudget(t, s, "http://"+s.Addr().String()+"/v1/events", line, 1<<20)

	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Past the 256 KiB Go's server reads of a body its handler left.
	const n = 1 << 20
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: core\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", testToken, n, line)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 503") || time.Since(start) > time.Second {
		t.Fatalf("refused write: status %q, %v after %v; want 503 at once, before the body is sent", status, err, time.Since(start))
	}
	// Past the 500 ms Go's server waits before closing a connection it
	// did not read to the end.
	time.Sleep(800 * time.Millisecond)
	// The rest in two writes: a reset answers the first, and the second
	// meets it (what a client sending a large body sees).
	half := (n - len(line)) / 2
	for i, part := range []string{strings.Repeat(" ", half), strings.Repeat(" ", n-len(line)-half-1) + "\n"} {
		if _, err := c.Write([]byte(part)); err != nil {
			t.Fatalf("sending part %d of the rest of the refused body: %v; want the body read, not the connection reset", i+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("after the refused body was sent: %v; want the 503's body and a clean close (read %q)", err, rest)
	}
	if !strings.Contains(string(rest), "max_inflight_body_bytes") || !strings.Contains(string(rest), "Retry-After: 1") {
		t.Fatalf("refused write's answer %q; want Retry-After and the reason", rest)
	}
	if got := s.budget.used.Load(); got != 2<<20 {
		t.Fatalf("budget after the refusal: %d bytes held; want the two slow bodies' %d (the refused body is discarded, not reserved)", got, 2<<20)
	}
}

// A refused write that asked "Expect: 100-continue" gets the 503 and the
// connection closes at once: its client sends no body after a final
// answer, so the refusal does not wait for one until read_timeout_s.
func TestRefusedExpectContinueIsNotKeptWaiting(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.MaxBodyBytes = 1 << 20
	cfg.HTTP.MaxInflightBodyBytes = 2 << 20
	s, _, _ := serveDurable(t, cfg)
	holdBodyBudget(t, s, "http://"+s.Addr().String()+"/v1/events", fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`+"\n", testNow), 1<<20)

	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: core\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", testToken, 1<<20)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(all), "HTTP/1.1 503") || time.Since(start) > 2*time.Second {
		t.Fatalf("refused write with Expect: %q, %v after %v; want the 503 and a close at once", all, err, time.Since(start))
	}
}

// Issue 16 defect 7 at the service: a journal that cannot write (a full
// disk) makes /readyz fail with the reason and counts the error; once
// space is back the retry writes the record and /readyz recovers.
func TestJournalWriteFailureFailsReadinessUntilRecovered(t *testing.T) {
	fsys := &fullFS{}
	journalFS = fsys
	defer func() { journalFS = nil }()
	cfg := testConfig()
	cfg.Journal.RetryS = 0.02
	s, dc, _ := serveDurable(t, cfg)
	h := s.Handler()
	dc.Step(testNow)
	if code, body := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("readyz with a healthy journal: %d %s", code, body)
	}
	fsys.full.Store(true)
	d := dc.Step(testNow + 1e9)
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "no space") {
		t.Fatalf("readyz while the journal cannot write: %d %s; want 503 naming the error", code, body)
	}
	if _, m := get(t, h, "/metrics"); !strings.Contains(m, "narwhal_journal_write_errors_total ") || strings.Contains(m, "narwhal_journal_write_errors_total 0") {
		t.Fatalf("narwhal_journal_write_errors_total missing or 0 after a failed write")
	}
	fsys.full.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for dc.Journal.Durable() < d.Seq || get2(t, h, "/readyz") != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("journal did not recover: durable %d, want %d", dc.Journal.Durable(), d.Seq)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get2(t *testing.T, h http.Handler, path string) int { code, _ := get(t, h, path); return code }

// fullFS fails every write with ENOSPC while full.
type fullFS struct {
	controller.OSFS
	full atomic.Bool
}

func (f *fullFS) OpenFile(name string, flag int, perm os.FileMode) (controller.File, error) {
	fl, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullFile{File: fl, fs: f}, nil
}

type fullFile struct {
	controller.File
	fs *fullFS
}

func (f *fullFile) WriteAt(b []byte, off int64) (int, error) {
	if f.fs.full.Load() {
		return 0, fmt.Errorf("write: %w", syscall.ENOSPC)
	}
	return f.File.WriteAt(b, off)
}

// Issue 16 defect 10: the Authorization scheme is case-insensitive
// (RFC 9110 section 11.1): "bearer" and "BEARER" carry the token too.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1"))
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, testNow)))
		req.Header.Set("Authorization", scheme+" "+testToken)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("scheme %q: %d %s; want 200", scheme, rec.Code, rec.Body.String())
		}
	}
}

// The admin (pprof) listener has limits of its own: request bodies up to
// 64 KiB (pprof's symbol lookup reads a POST body of addresses and echoes
// every one it resolves), a write timeout (a profile longer than it is
// refused at once, not started), and at most 16 open connections.
func TestAdminListenerLimits(t *testing.T) {
	cfg := testConfig()
	cfg.AdminListen = "127.0.0.1:0"
	s, _, _ := serveDurable(t, cfg)
	admin := "http://" + s.AdminAddr().String()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	// A body past 64 KiB is cut off: pprof reports the read error and
	// resolves nothing past the limit.
	pc := fmt.Sprintf("%#x+", reflectPC())
	big := strings.Repeat(pc, (1<<20)/len(pc))
	resp, err := cl.Post(admin+"/debug/pprof/symbol", "text/plain", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "request body too large") {
		t.Fatalf("1 MiB symbol body: got %d, %d bytes without the limit's error; want the body cut at 64 KiB", resp.StatusCode, len(b))
	}
	if n := strings.Count(string(b), "\n"); n > (64<<10)/len(pc)+2 {
		t.Fatalf("symbol lookup answered %d lines; want at most what 64 KiB holds (%d)", n, (64<<10)/len(pc))
	}
	// A small body still resolves.
	resp, err = cl.Post(admin+"/debug/pprof/symbol", "text/plain", strings.NewReader(pc))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "reflectPC") {
		t.Fatalf("symbol lookup of one address: %q; want reflectPC resolved", b)
	}

	// A profile or trace past 60 s is refused, not run (pprof would hold
	// the connection and the profiler as long as asked); one within runs.
	for _, path := range []string{"/debug/pprof/profile?seconds=120", "/debug/pprof/trace?seconds=1e9", "/debug/pprof/heap?seconds=NaN"} {
		start := time.Now()
		resp, err = cl.Get(admin + path)
		if err != nil {
			t.Fatalf("%s: %v (want a quick 400)", path, err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "up to 60") || time.Since(start) > 5*time.Second {
			t.Fatalf("%s: %d %q after %v; want 400 naming the 60-s limit at once", path, resp.StatusCode, b, time.Since(start))
		}
	}
	resp, err = cl.Get(admin + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) == 0 {
		t.Fatalf("1-s CPU profile: %d, %d bytes; want 200 with a profile", resp.StatusCode, len(b))
	}

	// Connections past 16 are refused with a 503: of 17 opened at once,
	// at least one is (more while an earlier request's connection is
	// still closing).
	if netcaptest.Refusals(t, s.AdminAddr().String(), 17, time.Second) == 0 {
		t.Fatal("17 admin connections open: none refused; want a 503 past 16")
	}
}

//go:noinline
func reflectPC() uintptr {
	pc, _, _, _ := runtime.Caller(0)
	return pc
}
