package fuzz

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/fleet"
)

// FuzzAgentReports posts arbitrary bodies, twice, to the agents' report
// endpoint in front of a real core (what any process holding the agent
// token, or a corrupted agent, can send): no panic, an answer from the
// handler's documented set, and afterwards every serving engine in
// exactly one role, with a KV capacity never negative.
func FuzzAgentReports(f *testing.F) {
	f.Add([]byte(`{"version":1,"reports":[{"kind":"hello","node":"n1","epoch":1,"seq":1,"hello":{"agent_version":"t"}},{"kind":"snapshot","node":"n1","epoch":1,"seq":2,"snapshot":{"engines":[{"id":"e1","model":"facebook/opt-13b","gpu":"A100-80GB","role":"prefill","live":true,"running_requests":1,"queued_requests":0,"kv_capacity_tokens":66144}]}}]}`))
	f.Add([]byte(`{"version":1,"reports":[{"kind":"snapshot","node":"n1","epoch":1,"seq":1,"snapshot":{"engines":[{"id":"e1","role":"decode","live":true,"kv_capacity_tokens":-5},{"id":"e1","role":"prefill"}]}}]}`))
	f.Add([]byte(`{"version":1,"reports":[{"kind":"liveness","node":"n1","epoch":1,"seq":3,"liveness":{"engine":"e9","live":false,"reason":"exit"}}]}`))
	f.Add([]byte(`{"version":1,"reports":[{"kind":"heartbeat","node":"n1","epoch":18446744073709551615,"seq":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		now := fuzzBase
		c, err := core.New(core.DefaultConfig(), core.WithClock(func() int64 { return now }), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := fleet.NewRegistry(c, 10e9, slog.New(slog.DiscardHandler))
		h := r.Handler("tok", 1<<16, func() int64 { return now })
		for i := range 2 {
			req := httptest.NewRequest(http.MethodPost, "/v1/agent/reports", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer tok")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if testing.Verbose() {
				t.Logf("post %d: %d %s", i, rec.Code, rec.Body.String())
			}
			switch rec.Code {
			case http.StatusOK, http.StatusConflict, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			default:
				t.Fatalf("post %d: status %d (%s)", i, rec.Code, rec.Body.String())
			}
			now += 1e9
			c.Step(now)
			r.Sweep(now)
		}
		rt := c.Roles()
		seen := map[string]int{}
		for _, id := range append(append([]string(nil), rt.Prefill...), rt.Decode...) {
			seen[id]++
		}
		for _, e := range c.Engines() {
			if seen[e.ID] > 1 || (seen[e.ID] == 0 && e.State == controller.StateServing && e.Live && (e.Role == controller.RolePrefill || e.Role == controller.RoleDecode)) {
				t.Fatalf("engine %s (%s, %s, live %v) in %d roles", e.ID, e.Role, e.State, e.Live, seen[e.ID])
			}
			if e.KVCapacityTokens < 0 {
				t.Fatalf("engine %s KV capacity %d", e.ID, e.KVCapacityTokens)
			}
		}
	})
}
