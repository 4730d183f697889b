package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
)

// keyedResult is one answer of POST /v1/events.
type keyedResult struct {
	code     int
	body     string
	replayed string // the Idempotent-Replayed header
}

// postKeyed posts body to /v1/events with the given Idempotency-Key
// header lines (none: no header).
func postKeyed(t *testing.T, h http.Handler, body string, keys ...string) keyedResult {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return keyedResult{rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed")}
}

// arrivals reads the core's arrival observations through GET /v1/state.
func arrivals(t *testing.T, h http.Handler) int64 {
	t.Helper()
	code, body := get(t, h, "/v1/state")
	if code != http.StatusOK {
		t.Fatalf("/v1/state: %d %s", code, body)
	}
	var st struct {
		DemandHistory buckets.DemandHistory `json:"demand_history"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/v1/state: %v", err)
	}
	return st.DemandHistory.Arrivals.Observations
}

// sizedBatch is n sized events (n arrivals) stamped at atNs and after.
func sizedBatch(atNs int64, n int) string {
	var b strings.Builder
	for i := range n {
		a := atNs + int64(i)*1e6
		fmt.Fprintf(&b, `{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":100,"requested_output_tokens":10}`+"\n", a, a)
	}
	return b.String()
}

func metricLine(t *testing.T, h http.Handler, name string) string {
	t.Helper()
	_, body := get(t, h, "/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	t.Fatalf("/metrics lacks %s", name)
	return ""
}

// A batch posted twice with the same key is counted once; the repeat gets
// the first answer byte for byte, marked replayed, and is counted in
// narwhal_events_replays_total. The quoted (structured-field) form of the
// key is the same key.
func TestIdempotencyRetryAppliedOnce(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1", "e2"))
	h := s.Handler()
	batch := sizedBatch(ts(-5), 3)
	first := postKeyed(t, h, batch, "batch-7f3a")
	if first.code != http.StatusOK || first.replayed != "" || !strings.Contains(first.body, `"accepted":3`) {
		t.Fatalf("first post: %+v; want 200 accepting 3 lines, not replayed", first)
	}
	if got := arrivals(t, h); got != 3 {
		t.Fatalf("arrivals after the first post: %d; want 3", got)
	}
	for _, key := range []string{"batch-7f3a", `"batch-7f3a"`} {
		again := postKeyed(t, h, batch, key)
		if again.code != first.code || again.body != first.body || again.replayed != "true" {
			t.Fatalf("repeat with key %s: %+v; want the first answer (%d %s) with Idempotent-Replayed: true", key, again, first.code, first.body)
		}
	}
	if got := arrivals(t, h); got != 3 {
		t.Fatalf("arrivals after two retries: %d; want 3 (applied once)", got)
	}
	if got := metricLine(t, h, "narwhal_events_replays_total"); got != "narwhal_events_replays_total 2" {
		t.Fatalf("%q; want 2 replays", got)
	}
	if got := metricLine(t, h, "narwhal_events_idempotency_keys"); got != "narwhal_events_idempotency_keys 1" {
		t.Fatalf("%q; want 1 key retained", got)
	}

	// A partly refused batch: its 422 is stored and replayed, and the
	// accepted line is not applied again.
	mixed := sizedBatch(ts(-4), 1) + "bad\n"
	first = postKeyed(t, h, mixed, "batch-mixed")
	again := postKeyed(t, h, mixed, "batch-mixed")
	if first.code != http.StatusUnprocessableEntity || again.code != first.code || again.body != first.body || again.replayed != "true" {
		t.Fatalf("mixed batch: first %+v, repeat %+v; want the same 422 replayed", first, again)
	}
	if got := arrivals(t, h); got != 4 {
		t.Fatalf("arrivals: %d; want 4", got)
	}
}

// Without a key nothing changes: a batch posted twice is applied twice
// (the retry hazard the key exists for).
func TestIdempotencyWithoutKeyAppliesTwice(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1", "e2"))
	h := s.Handler()
	batch := sizedBatch(ts(-5), 3)
	for i := range 2 {
		if r := postKeyed(t, h, batch); r.code != http.StatusOK || r.replayed != "" {
			t.Fatalf("post %d without key: %+v", i+1, r)
		}
	}
	if got := arrivals(t, h); got != 6 {
		t.Fatalf("arrivals: %d; want 6 (no key, no deduplication)", got)
	}
}

// The same key with another body is refused with 422 and applies
// nothing; the key keeps its first body and answer.
func TestIdempotencyKeyReusedWithOtherBody(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1", "e2"))
	h := s.Handler()
	a, b := sizedBatch(ts(-5), 3), sizedBatch(ts(-3), 2)
	first := postKeyed(t, h, a, "k")
	if first.code != http.StatusOK {
		t.Fatalf("first: %+v", first)
	}
	other := postKeyed(t, h, b, "k")
	if other.code != http.StatusUnprocessableEntity || other.replayed != "" ||
		!strings.Contains(other.body, "different body") || strings.Contains(other.body, `"accepted"`) {
		t.Fatalf("same key, other body: %+v; want 422 naming the different body", other)
	}
	if got := arrivals(t, h); got != 3 {
		t.Fatalf("arrivals: %d; want 3 (the other body applied nothing)", got)
	}
	if again := postKeyed(t, h, a, "k"); again.replayed != "true" || again.body != first.body {
		t.Fatalf("first body again: %+v; want the stored answer", again)
	}
	if got := metricLine(t, h, "narwhal_events_replays_total"); got != "narwhal_events_replays_total 1" {
		t.Fatalf("%q; the 422 is not a replay", got)
	}
}

// blockingCore holds the first OfferSized until release is closed; later
// calls pass straight through.
type blockingCore struct {
	*core.Core
	first            atomic.Bool
	entered, release chan struct{}
}

func (b *blockingCore) OfferSized(arrivalNs, estInput, reqOutput int64) error {
	if b.first.CompareAndSwap(false, true) {
		close(b.entered)
		<-b.release
	}
	return b.Core.OfferSized(arrivalNs, estInput, reqOutput)
}

// A repeat while the first request is being applied gets 409 and applies
// nothing; the first completes and is counted once.
func TestIdempotencyConcurrentDuplicate(t *testing.T) {
	bc := &blockingCore{Core: newRealCore(t, "e1", "e2"), entered: make(chan struct{}), release: make(chan struct{})}
	s := newTestServer(t, testConfig(), bc)
	h := s.Handler()
	batch := sizedBatch(ts(-5), 3)
	done := make(chan keyedResult)
	go func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(batch))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Idempotency-Key", "dup")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- keyedResult{rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed")}
	}()
	<-bc.entered
	req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(batch))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Idempotency-Key", "dup")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	dup := keyedResult{rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed")}
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Errorf("409 Retry-After %q; want 1", ra)
	}
	close(bc.release)
	first := <-done
	if dup.code != http.StatusConflict || !strings.Contains(dup.body, "still being applied") {
		t.Fatalf("duplicate in flight: %+v; want 409", dup)
	}
	if first.code != http.StatusOK || first.replayed != "" {
		t.Fatalf("first: %+v; want 200", first)
	}
	if got := arrivals(t, h); got != 3 {
		t.Fatalf("arrivals: %d; want 3 (applied once)", got)
	}
	if after := postKeyed(t, h, batch, "dup"); after.replayed != "true" || after.body != first.body {
		t.Fatalf("after the first finished: %+v; want the stored answer", after)
	}
}

// Past events.idempotency_max_keys the oldest key is forgotten (and
// counted): its retry is applied again, a newer key's is still replayed.
func TestIdempotencyKeysEvictedByCap(t *testing.T) {
	cfg := testConfig()
	cfg.Events.IdempotencyMaxKeys = 2
	s := newTestServer(t, cfg, newRealCore(t, "e1", "e2"))
	h := s.Handler()
	batch := sizedBatch(ts(-5), 3)
	for _, k := range []string{"k1", "k2", "k3"} {
		if r := postKeyed(t, h, batch, k); r.code != http.StatusOK || r.replayed != "" {
			t.Fatalf("%s: %+v", k, r)
		}
	}
	if got := arrivals(t, h); got != 9 {
		t.Fatalf("arrivals: %d; want 9", got)
	}
	if r := postKeyed(t, h, batch, "k1"); r.code != http.StatusOK || r.replayed != "" {
		t.Fatalf("k1 after eviction: %+v; want applied again", r)
	}
	if got := arrivals(t, h); got != 12 {
		t.Fatalf("arrivals: %d; want 12 (k1 was forgotten)", got)
	}
	if r := postKeyed(t, h, batch, "k3"); r.replayed != "true" {
		t.Fatalf("k3: %+v; want replayed", r)
	}
	if got := arrivals(t, h); got != 12 {
		t.Fatalf("arrivals: %d; want 12", got)
	}
	if got := metricLine(t, h, "narwhal_events_idempotency_keys_dropped_total"); got != "narwhal_events_idempotency_keys_dropped_total 2" {
		t.Fatalf("%q; want k1 then k2 dropped", got)
	}
	if got := metricLine(t, h, "narwhal_events_idempotency_keys"); got != "narwhal_events_idempotency_keys 2" {
		t.Fatalf("%q; want 2 keys", got)
	}
}

// A key expires events.idempotency_retention_s after its first request:
// a retry within it is replayed, one after it applied again. With the
// default retention (events.max_past_s + events.max_future_s) a retry
// after expiry finds every event too old and applies nothing.
func TestIdempotencyKeysExpire(t *testing.T) {
	var clock atomic.Int64
	clock.Store(testNow)
	serve := func(cfg Config) http.Handler {
		s, err := New(cfg, newRealCore(t, "e1", "e2"), nil, WithClock(clock.Load), WithoutControlLoop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s.Handler()
	}
	cfg := testConfig()
	cfg.Events.IdempotencyRetentionS = 60
	h := serve(cfg)
	batch := sizedBatch(ts(-5), 3)
	if r := postKeyed(t, h, batch, "k"); r.code != http.StatusOK {
		t.Fatalf("first: %+v", r)
	}
	clock.Store(testNow + 60e9)
	if r := postKeyed(t, h, batch, "k"); r.replayed != "true" {
		t.Fatalf("retry at 60 s: %+v; want replayed", r)
	}
	clock.Store(testNow + 60e9 + 1)
	if r := postKeyed(t, h, batch, "k"); r.code != http.StatusOK || r.replayed != "" {
		t.Fatalf("retry past 60 s: %+v; want applied again", r)
	}
	if got := arrivals(t, h); got != 6 {
		t.Fatalf("arrivals: %d; want 6 (the key had expired)", got)
	}
	if got := metricLine(t, h, "narwhal_events_idempotency_keys_dropped_total"); got != "narwhal_events_idempotency_keys_dropped_total 0" {
		t.Fatalf("%q; expiry is not a drop", got)
	}

	clock.Store(testNow)
	h = serve(testConfig()) // retention 0: 600 + 30 s
	batch = sizedBatch(ts(0), 1) + sizedBatch(ts(-5), 2)
	if r := postKeyed(t, h, batch, "k"); r.code != http.StatusOK {
		t.Fatalf("first: %+v", r)
	}
	clock.Store(testNow + 630e9)
	if r := postKeyed(t, h, batch, "k"); r.replayed != "true" {
		t.Fatalf("retry at 630 s: %+v; want replayed", r)
	}
	clock.Store(testNow + 630e9 + 1)
	r := postKeyed(t, h, batch, "k")
	if r.code != http.StatusUnprocessableEntity || r.replayed != "" || !strings.Contains(r.body, `"accepted":0,"refused":3`) {
		t.Fatalf("retry past the default retention: %+v; want every line refused as too old", r)
	}
}

// Bad keys are answered 400 and apply nothing; good ones at the limits
// are accepted.
func TestIdempotencyBadKeysRefused(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1", "e2"))
	h := s.Handler()
	batch := sizedBatch(ts(-5), 1)
	for name, keys := range map[string][]string{
		"empty":              {""},
		"256 bytes":          {strings.Repeat("k", 256)},
		"256 bytes quoted":   {`"` + strings.Repeat("k", 256) + `"`},
		"empty quoted":       {`""`},
		"control character":  {"a\x01b"},
		"tab":                {"a\tb"},
		"non-ASCII":          {"schlüssel"},
		"two header lines":   {"a", "b"},
		"unterminated":       {`"abc`},
		"bad escape":         {`"a\b"`},
		"parameters":         {`"abc";v=1`},
		"quote inside":       {`"a"b"`},
		"non-ASCII quoted":   {`"schlüssel"`},
		"dangling backslash": {`"abc\`},
	} {
		r := postKeyed(t, h, batch, keys...)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, "Idempotency-Key must be") || !strings.Contains(r.body, "nothing was applied") {
			t.Errorf("%s %q: %+v; want 400 naming the key's rule", name, keys, r)
		}
	}
	if got := arrivals(t, h); got != 0 {
		t.Fatalf("arrivals: %d; want 0 (bad keys apply nothing)", got)
	}
	for name, key := range map[string]string{
		"255 bytes":        strings.Repeat("k", 255),
		"255 bytes quoted": `"` + strings.Repeat("k", 254) + `\\"`,
		"escaped quote":    `"a\"b"`,
		"space and comma":  "a b,c",
		"uuid":             "8e03978e-40d5-43e8-bc93-6894a57f9324",
	} {
		if r := postKeyed(t, h, sizedBatch(ts(-5), 1), key); r.code != http.StatusOK {
			t.Errorf("%s %q: %+v; want accepted", name, key, r)
		}
	}
	if got := arrivals(t, h); got != 5 {
		t.Fatalf("arrivals: %d; want 5", got)
	}
}

func TestParseIdempotencyKey(t *testing.T) {
	for in, want := range map[string]string{
		`"a\"b\\c"`: `a"b\c`,
		`abc`:       "abc",
		`"abc"`:     "abc",
		`a"b`:       `a"b`,
	} {
		if got, err := parseIdempotencyKey([]string{in}); err != nil || got != want {
			t.Errorf("%q: %q %v; want %q", in, got, err, want)
		}
	}
}

// panicCore panics on the first OfferSized.
type panicCore struct {
	*core.Core
	once sync.Once
}

func (p *panicCore) OfferSized(arrivalNs, estInput, reqOutput int64) error {
	p.once.Do(func() { panic("boom") })
	return p.Core.OfferSized(arrivalNs, estInput, reqOutput)
}

// A batch whose handler panicked does not leave its key in flight: the
// retry is applied, not answered 409.
func TestIdempotencyKeyReleasedAfterPanic(t *testing.T) {
	pc := &panicCore{Core: newRealCore(t, "e1", "e2")}
	s := newTestServer(t, testConfig(), pc)
	h := s.Handler()
	batch := sizedBatch(ts(-5), 1)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the core did not panic")
			}
		}()
		postKeyed(t, h, batch, "k")
	}()
	if r := postKeyed(t, h, batch, "k"); r.code != http.StatusOK || r.replayed != "" {
		t.Fatalf("retry after the panic: %+v; want applied", r)
	}
	if got := arrivals(t, h); got != 1 {
		t.Fatalf("arrivals: %d; want 1", got)
	}
}

// An answer larger than the whole store is not retained (and counted as
// dropped); the store's byte count returns to zero.
func TestIdempotencyStoreByteBound(t *testing.T) {
	st := newIdemStore(10, 60e9, 1000)
	e, _, _, out := st.begin("big", [32]byte{1}, 0)
	if out != idemNew {
		t.Fatalf("outcome %d; want new", out)
	}
	st.finish(e, 200, bytes.Repeat([]byte("x"), 1000))
	if len(st.keys) != 0 || st.bytes != 0 {
		t.Fatalf("keys %d bytes %d; want the oversized answer not retained", len(st.keys), st.bytes)
	}
	// Several small answers fit until the bytes bound drops the oldest.
	for i := range 4 {
		e, _, _, _ := st.begin(fmt.Sprint("k", i), [32]byte{}, int64(i))
		st.finish(e, 200, bytes.Repeat([]byte("y"), 100))
	}
	if _, ok := st.keys["k0"]; ok || len(st.keys) != 3 || st.bytes > st.maxBytes {
		t.Fatalf("keys %d bytes %d; want k0 dropped to stay within %d", len(st.keys), st.bytes, st.maxBytes)
	}
}

// A request without the header allocates exactly what it did before the
// key existed (an Ingest without a store ignores the header).
func TestIngestUnkeyedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; allocation counts are measured without -race")
	}
	rc := newRealCore(t, "e1", "e2")
	body := []byte(sizedBatch(ts(-5), 2))
	measure := func(in *Ingest) float64 {
		req := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
		rd := bytes.NewReader(body)
		rec := httptest.NewRecorder()
		run := func() {
			rd.Reset(body)
			req.Body = nopCloser{rd}
			rec.Body.Reset()
			in.ServeHTTP(rec, req)
		}
		run()
		return testing.AllocsPerRun(50, run)
	}
	lim := DefaultLimits()
	with := measure(NewIngest(rc, lim, 8<<20, 4096, func() int64 { return testNow }))
	without := measure(newIngest(rc, lim, 8<<20, 4096, func() int64 { return testNow }, newHTTPMetrics(), nil))
	if with != without {
		t.Fatalf("a request without Idempotency-Key allocates %v with the store, %v without; want equal", with, without)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
