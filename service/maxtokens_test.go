package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// TestMaxTokensMatchTheCore: events.max_tokens may not exceed what the
// core records (buckets.MaxTokens), and by default equals it, so that a
// token count the core cannot hold is refused by validation (the line
// changes nothing) rather than passed to the core, which ends a pending
// offer before it refuses the sized event.
func TestMaxTokensMatchTheCore(t *testing.T) {
	if got := DefaultConfig().Events.MaxTokens; got != buckets.MaxTokens {
		t.Fatalf("default events.max_tokens %d; want the core's limit %d", got, buckets.MaxTokens)
	}
	cfg := testConfig()
	cfg.Events.MaxTokens = 1 << 62
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "events.max_tokens must be <= 16777215") {
		t.Fatalf("events.max_tokens 2^62: %v; want refused naming the core's limit", err)
	}
	rc := newRealCore(t, "e1")
	s := newTestServer(t, testConfig(), rc)
	if code, reply := post(t, s.Handler(), "/v1/events", testToken, fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, ts(0))); code != http.StatusOK {
		t.Fatalf("offer_started: %d %s", code, reply)
	}
	code, reply := post(t, s.Handler(), "/v1/events", testToken,
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"est_input_tokens":%d}`, ts(0), buckets.MaxTokens+1))
	if code != http.StatusUnprocessableEntity || !strings.Contains(reply, "value out of range: est_input_tokens must be <= 16777215") {
		t.Fatalf("sized with %d tokens: %d %s; want 422 out of range", buckets.MaxTokens+1, code, reply)
	}
	_, body := get(t, s.Handler(), "/v1/state")
	var st struct {
		DemandHistory buckets.DemandHistory `json:"demand_history"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.DemandHistory.Unsized.Pending != 1 || st.DemandHistory.Arrivals.Observations != 0 {
		t.Fatalf("after the refused line: %+v; want the offer still pending, nothing recorded", st.DemandHistory)
	}
}
