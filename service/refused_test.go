package service

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// A refused event with arrival_ns is a refusal after its sized event:
// the core's RefusedSized, which leaves the other offers pending; without
// it, a refusal before sizing ends a pending offer. arrival_ns after
// ts_ns is refused and changes nothing.
func TestRefusedAfterSizingKeepsOtherOffersPending(t *testing.T) {
	s := newTestServer(t, testConfig(), newRealCore(t, "e1", "e2"))
	pending := func() int64 {
		t.Helper()
		_, body := get(t, s.Handler(), "/v1/state")
		var st struct {
			DemandHistory buckets.DemandHistory `json:"demand_history"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st.DemandHistory.Unsized.Pending
	}
	a := ts(-2)
	batch := strings.Join([]string{
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a),
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a),
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a),
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":800,"requested_output_tokens":64}`, a+1e6, a),
		fmt.Sprintf(`{"type":"refused","ts_ns":%d,"arrival_ns":%d}`, a+2e6, a),
	}, "\n")
	if code, reply := post(t, s.Handler(), "/v1/events", testToken, batch); code != 200 {
		t.Fatalf("POST: %d %s", code, reply)
	}
	if got := pending(); got != 2 {
		t.Fatalf("pending %d after a sized request's refusal; want 2", got)
	}
	if code, reply := post(t, s.Handler(), "/v1/events", testToken, fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, a+3e6)); code != 200 {
		t.Fatalf("POST: %d %s", code, reply)
	}
	if got := pending(); got != 1 {
		t.Fatalf("pending %d after a refusal before sizing; want 1", got)
	}
	code, reply := post(t, s.Handler(), "/v1/events", testToken, fmt.Sprintf(`{"type":"refused","ts_ns":%d,"arrival_ns":%d}`, a+3e6, a+4e6))
	if code != 422 || !strings.Contains(reply, "arrival_ns") || pending() != 1 {
		t.Fatalf("arrival after ts: %d %s, pending %d; want 422 naming arrival_ns, pending 1", code, reply, pending())
	}
}
