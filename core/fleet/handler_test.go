package fleet

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/wire"
)

func post(t *testing.T, h http.Handler, method, auth, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, "/ingest", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func batchJSON(t *testing.T, reps ...*wire.Report) string {
	t.Helper()
	b := wire.Batch{Version: wire.Version}
	for _, r := range reps {
		b.Reports = append(b.Reports, *r)
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestHandler(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	h := r.Handler("s3cret", 2048, func() int64 { return 1e9 })
	good := batchJSON(t, snap("n1", 10, 1, eng("e1", true, 1, 10)))
	f := func(method, auth, body string, wantCode int, wantIn string) {
		t.Helper()
		code, out := post(t, h, method, auth, body)
		if code != wantCode || !strings.Contains(out, wantIn) {
			t.Fatalf("unexpected answer; got %d %q; want %d containing %q", code, out, wantCode, wantIn)
		}
	}
	f(http.MethodGet, "Bearer s3cret", "", 405, "POST")
	f(http.MethodPost, "", good, 401, "bearer token")
	f(http.MethodPost, "Bearer wrong", good, 401, "bearer token")
	f(http.MethodPost, "Bearer s3cret", "{not json", 400, "malformed batch")
	f(http.MethodPost, "Bearer s3cret", `{"version":1,"reports":[]}{}`, 400, "trailing data")
	f(http.MethodPost, "Bearer s3cret", `{"version":2,"reports":[]}`, 400, "version 2")
	f(http.MethodPost, "Bearer s3cret", `{"version":1,"reports":[{"kind":"snapshot","node":"n1","epoch":1,"seq":1}]}`,
		400, "needs exactly the snapshot payload")
	f(http.MethodPost, "Bearer s3cret", `{"version":1,"reports":[{"kind":"x"`+strings.Repeat(" ", 4096)+`}]}`,
		413, "body over 2048 bytes")
	if len(s.engines) != 0 || len(r.Nodes()) != 0 {
		t.Fatal("refused requests changed the registry")
	}
	f(http.MethodPost, "Bearer s3cret", good, 200, `"accepted":1`)
	f(http.MethodPost, "Bearer s3cret", good, 409, "replayed")
	// a batch with one old and one new report: 200, one rejection
	mixed := batchJSON(t, snap("n1", 10, 1, eng("e1", true, 1, 10)), snap("n1", 10, 2, eng("e1", true, 2, 10)))
	code, out := post(t, h, http.MethodPost, "Bearer s3cret", mixed)
	var ack wire.Ack
	if err := json.Unmarshal([]byte(out), &ack); err != nil || code != 200 {
		t.Fatalf("unexpected answer; got %d %q", code, out)
	}
	if ack.Accepted != 1 || len(ack.Rejected) != 1 || ack.Rejected[0].Seq != 1 || ack.LastSeq != 2 || ack.Epoch != 10 {
		t.Fatalf("unexpected ack; got %+v", ack)
	}
}

func TestHandlerNoToken(t *testing.T) {
	r := NewRegistry(newFakeSink(), 5e9, nil)
	h := r.Handler("", 0, func() int64 { return 1e9 })
	if code, out := post(t, h, http.MethodPost, "", batchJSON(t, snap("n1", 1, 1))); code != 200 {
		t.Fatalf("unexpected answer; got %d %q; want 200", code, out)
	}
}

// Issue 16 defect 10: unknown fields in agent reports are refused (400,
// nothing applied), like unknown fields in events.
func TestAgentReportUnknownFieldIsRefused(t *testing.T) {
	s := newFakeSink()
	r := NewRegistry(s, 5e9, nil)
	h := r.Handler("tok", 0, func() int64 { return 1e9 })
	body := `{"version":1,"reports":[{"kind":"snapshot","node":"n1","epoch":1,"seq":1,"snapshot":{"engines":[{"id":"e1","model":"m","gpu":"g","live":true,"kv_capacity_tokns":5}]}}]}`
	code, reply := post(t, h, "POST", "Bearer tok", body)
	if code != 400 || !strings.Contains(reply, "kv_capacity_tokns") {
		t.Fatalf("unknown field: %d %s; want 400 naming the field", code, reply)
	}
	if len(r.Nodes()) != 0 || len(s.engines) != 0 {
		t.Fatalf("a refused batch changed the registry: %+v", r.Nodes())
	}
}
