package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Acceptance 1: events posted over a real listener to the real facade,
// then Step, then /v1/state and /metrics show them with the right values.
func TestEndToEnd(t *testing.T) {
	rc := newRealCore(t, "e1", "e2")
	s, err := New(testConfig(), rc, nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	base := "http://" + s.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	a1, a2 := ts(-3), ts(-2.5)
	batch := []string{
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a1),
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, a2),
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, ts(-2.4)),
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, ts(-2.3)),
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":500,"requested_output_tokens":64}`, a1+1e6, a1),
		fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":300,"requested_output_tokens":32}`, a2+1e6, a2),
		fmt.Sprintf(`{"type":"offer_abandoned","ts_ns":%d}`, ts(-2.2)),
		fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"e1","input_tokens":500,"requested_output_tokens":64}`, a1+2e6),
		fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":"e1","input_tokens":300,"requested_output_tokens":32}`, a2+2e6),
		fmt.Sprintf(`{"type":"tokenized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":500,"input_tokens":480,"requested_output_tokens":64}`, a1+3e6, a1),
		fmt.Sprintf(`{"type":"first_token","ts_ns":%d,"arrival_ns":%d}`, a1+100e6, a1),
		fmt.Sprintf(`{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"requested_output_tokens":64,"output_tokens":40}`, ts(-1), a1, a1+100e6),
		fmt.Sprintf(`{"type":"failed","ts_ns":%d,"arrival_ns":%d}`, ts(-1), a2),
		fmt.Sprintf(`{"type":"refused","ts_ns":%d}`, ts(-2)), // ends the offer started at -2.4
		fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, ts(-0.5)),
	}
	code, reply := do(http.MethodPost, "/v1/events", strings.Join(batch, "\n"))
	if code != 200 || !strings.Contains(reply, `"accepted":15,"refused":0`) {
		t.Fatalf("POST /v1/events: %d %s", code, reply)
	}
	d := rc.Step(testNow)
	if d.Seq != 1 {
		t.Fatalf("unexpected first decision seq; got %d; want 1", d.Seq)
	}

	code, body := do(http.MethodGet, "/v1/state", "")
	if code != 200 {
		t.Fatalf("GET /v1/state: %d %s", code, body)
	}
	var st struct {
		DemandHistory struct {
			Arrivals, Residency, Outputs struct {
				Observations int64 `json:"observations"`
			}
			Unsized struct {
				Pending      int64 `json:"pending"`
				Observations int64 `json:"observations"`
			} `json:"unsized"`
		} `json:"demand_history"`
		Attainment struct {
			CoveredS  float64 `json:"covered_s"`
			ByOutcome map[string]struct {
				TTFTMet int64 `json:"ttft_met"`
				TPOTMet int64 `json:"tpot_met"`
				Total   int64 `json:"total"`
			} `json:"by_outcome"`
		} `json:"attainment"`
		LatestDecision *struct {
			Seq uint64 `json:"seq"`
		} `json:"latest_decision"`
		Engines []struct {
			ID string `json:"id"`
		} `json:"engines"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	f := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Fatalf("/v1/state: unexpected %s; got %v; want %v\n%s", name, got, want, body)
		}
	}
	dh := st.DemandHistory
	f("demand_history.arrivals.observations", dh.Arrivals.Observations, int64(2))
	f("demand_history.residency.observations", dh.Residency.Observations, int64(2))
	f("demand_history.outputs.observations", dh.Outputs.Observations, int64(1))
	f("demand_history.unsized.pending", dh.Unsized.Pending, int64(1))
	f("demand_history.unsized.observations", dh.Unsized.Observations, int64(1))
	att := st.Attainment.ByOutcome
	f("attainment completed total", att["completed"].Total, int64(1))
	f("attainment completed ttft_met", att["completed"].TTFTMet, int64(1))
	f("attainment completed tpot_met", att["completed"].TPOTMet, int64(1))
	f("attainment failed total", att["failed"].Total, int64(1))
	f("attainment failed ttft_met", att["failed"].TTFTMet, int64(0))
	f("attainment refused total", att["refused"].Total, int64(1))
	f("attainment expired total", att["expired"].Total, int64(0))
	f("latest_decision present", st.LatestDecision != nil, true)
	f("latest_decision.seq", st.LatestDecision.Seq, uint64(1))
	f("engines", len(st.Engines), 2)
	if !(st.Attainment.CoveredS > 0) {
		t.Fatalf("/v1/state: attainment.covered_s must be > 0 after outcomes; got %v", st.Attainment.CoveredS)
	}

	code, metrics := do(http.MethodGet, "/metrics", "")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, m := range []string{
		`narwhal_demand_history_observations{kind="arrivals"} 2`,
		`narwhal_demand_history_observations{kind="residency"} 2`,
		`narwhal_demand_history_observations{kind="outputs"} 1`,
		`narwhal_demand_history_unsized_pending 1`,
		`narwhal_demand_history_unsized_observations 1`,
		`narwhal_attainment_requests{outcome="completed"} 1`,
		`narwhal_attainment_requests{outcome="failed"} 1`,
		`narwhal_attainment_requests{outcome="refused"} 1`,
		`narwhal_attainment_ttft_met{outcome="completed"} 1`,
		`narwhal_http_events_total{result="accepted",type="sized"} 2`,
		`narwhal_http_events_total{result="accepted",type="offer_started"} 5`,
		`narwhal_http_requests_total{code="200",handler="events"} 1`,
	} {
		if !strings.Contains(metrics, m+"\n") {
			t.Fatalf("/metrics lacks %q", m)
		}
	}
	var decisions int
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "narwhal_controller_decisions_total{") && strings.HasSuffix(l, " 1") {
			decisions++
		}
	}
	if decisions != 1 {
		t.Fatalf("/metrics: want exactly one narwhal_controller_decisions_total series at 1 after one step; got %d", decisions)
	}
	code, body = do(http.MethodGet, "/v1/decisions?since=0&limit=5", "")
	if code != 200 || !strings.Contains(body, `{"decisions":[{"seq":1,`) {
		t.Fatalf("GET /v1/decisions: %d %s", code, body)
	}
	code, body = do(http.MethodGet, "/v1/roles", "")
	if code != 200 || !strings.Contains(body, `"prefill":["e1"]`) || !strings.Contains(body, `"decode":["e2"]`) {
		t.Fatalf("GET /v1/roles: %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
