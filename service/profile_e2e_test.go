package service

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
	"github.com/narwhal-io/narwhal/core/wire"
)

// Issue 18, acceptance 4: narwhal-core with engines reported (agent wire
// format) for meta-llama/Llama-3.1-8B-Instruct on H100 and no profile
// file prices them with the geometry prior and makes moves when the load
// shifts: a prefill-heavy phase moves engines to prefill, a decode-heavy
// phase moves them back. Events and reports go through the service's
// HTTP handlers; the test steps the core once per simulated second.
//
// The cluster answering the load is a fluid model in the test (per pool:
// prefill backlog drained at the engines' prior service rate; decode
// TPOT from the prior's step time at the batch Little's law gives): it
// only has to make latency grow where capacity is short.
func TestLlama8BOnH100WithoutProfileFileMoves(t *testing.T) {
	for _, scoring := range []string{controller.ScoringRollout, controller.ScoringClosedForm} {
		t.Run(scoring, func(t *testing.T) { llama8BMoves(t, scoring) })
	}
}

func llama8BMoves(t *testing.T, scoring string) {
	const model, gpu = "meta-llama/Llama-3.1-8B-Instruct", "H100"
	truth, ok := profile.Resolve(model, gpu, 1)
	if !ok {
		t.Fatal("no prior for the test's truth")
	}
	cfg := testConfig()
	cfg.Agents.Required = true
	cfg.Core.TTFTSLOS, cfg.Core.TPOTSLOS = 2, 0.05
	cfg.Core.Controller.Scoring = scoring
	rc, err := NewCore(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var now int64 = testNow
	s, err := New(cfg, rc, nil, WithClock(func() int64 { return now }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := s.Handler()
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("llama-%d", i)
	}
	var seq uint64
	report := func(kind wire.Kind, snap *wire.Snapshot, hello *wire.Hello) {
		t.Helper()
		seq++
		b, _ := json.Marshal(wire.Batch{Version: wire.Version, Reports: []wire.Report{{Kind: kind, Node: "gpu-node-1", Epoch: 1, Seq: seq, SentNs: now, Snapshot: snap, Hello: hello}}})
		if code, reply := post(t, h, "/v1/agent/reports", testAgentToken, string(b)); code != http.StatusOK || !strings.Contains(reply, `"accepted":1`) {
			t.Fatalf("agent report: %d %s", code, reply)
		}
	}
	report(wire.KindHello, nil, &wire.Hello{AgentVersion: "test", NVML: "ok", Liveness: "proc", Engines: ids})
	roles := func() (p, d []string) {
		t.Helper()
		_, body := get(t, h, "/v1/roles")
		var rt struct{ Prefill, Decode []string }
		if err := json.Unmarshal([]byte(body), &rt); err != nil {
			t.Fatalf("/v1/roles: %v: %s", err, body)
		}
		return rt.Prefill, rt.Decode
	}
	// Fluid cluster state.
	var backlogS, seqs float64
	var arrivalSeq int64
	type timedEvent struct {
		ts   int64
		line string
	}
	var later []timedEvent
	moves := map[string]int{}
	var sawPrior bool
	// The agent's snapshot: residency by role, the model, GPU and TP.
	sendSnapshot := func(dIDs []string, ctx float64) {
		t.Helper()
		nD := float64(max(len(dIDs), 1))
		snap := &wire.Snapshot{}
		for i, id := range ids {
			r := wire.EngineReport{ID: id, Model: model, GPU: gpu, TP: 1, Live: true,
				KVCapacityTokens: 400000, ScrapedNs: now}
			if i < n/2 {
				r.Role = controller.RolePrefill
			} else {
				r.Role = controller.RoleDecode
			}
			for _, d := range dIDs {
				if d == id {
					b := seqs / nD
					r.Resident = controller.Resident{DecodeSeqs: int64(b), KVTokens: int64(b * ctx)}
					r.RunningRequests = int64(b)
				}
			}
			snap.Engines = append(snap.Engines, r)
		}
		report(wire.KindSnapshot, snap, nil)
	}
	sendSnapshot(nil, 0)
	step := func(rate float64, in, out int64) {
		pIDs, dIDs := roles()
		nP, nD := float64(max(len(pIDs), 1)), float64(max(len(dIDs), 1))
		// Prefill: one prompt takes S on an engine; the backlog drains at nP.
		S := truth.Prefill.Seconds(float64(in))
		backlogS = max(0, backlogS+rate*S-nP)
		ttft := S + backlogS/nP
		// Decode: TPOT = a + (s + k·ctx)·b with b = rate·out·TPOT/nD.
		ctx := float64(in + out/2)
		per := truth.Decode.PerSeq + truth.Decode.PerCtxToken*ctx
		den := 1 - per*rate*float64(out)/nD
		tpot := truth.Decode.A / max(den, 0.05)
		seqs = rate * float64(out) * tpot
		// Events: this second's arrivals now; first tokens and
		// completions at their own times (held until the clock passes
		// them), so that measured TTFT and TPOT are the model's.
		var lines []string
		k := int(rate)
		for i := 0; i < k; i++ {
			arrivalSeq++
			arr := now - 1e9 + int64(i)*int64(1e9/float64(k))
			eng := pIDs[i%len(pIDs)]
			first := arr + int64(ttft*1e9)
			done := first + int64(tpot*float64(out-1)*1e9)
			lines = append(lines,
				fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, arr),
				fmt.Sprintf(`{"type":"sized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":%d,"requested_output_tokens":%d}`, arr+1e6, arr, in, out),
				fmt.Sprintf(`{"type":"admitted","ts_ns":%d,"engine":%q,"input_tokens":%d,"requested_output_tokens":%d}`, arr+2e6, eng, in, out),
				fmt.Sprintf(`{"type":"tokenized","ts_ns":%d,"arrival_ns":%d,"est_input_tokens":%d,"input_tokens":%d,"requested_output_tokens":%d}`, arr+3e6, arr, in, in, out))
			later = append(later,
				timedEvent{first, fmt.Sprintf(`{"type":"first_token","ts_ns":%d,"arrival_ns":%d}`, first, arr)},
				timedEvent{done, fmt.Sprintf(`{"type":"completed","ts_ns":%d,"arrival_ns":%d,"first_token_ns":%d,"requested_output_tokens":%d,"output_tokens":%d}`, done, arr, first, out, out)})
		}
		kept := later[:0]
		for _, e := range later {
			if e.ts <= now {
				lines = append(lines, e.line)
			} else {
				kept = append(kept, e)
			}
		}
		later = kept
		for len(lines) > 0 { // under the events body limit
			part := lines[:min(len(lines), 200)]
			lines = lines[len(part):]
			if code, reply := post(t, h, "/v1/events", testToken, strings.Join(part, "\n")); code != http.StatusOK {
				t.Fatalf("events: %d %s", code, reply)
			}
		}
		sendSnapshot(dIDs, ctx)
		d := rc.Step(now)
		for _, m := range d.Moves {
			moves[m.From.String()+">"+m.To.String()]++
		}
		for _, u := range d.Profiles {
			if u.Origin == controller.OriginPrior && strings.Contains(u.Source, "Llama-3.1-8B") {
				sawPrior = true
			}
		}
		if d.Basis == controller.BasisUnprofiled {
			t.Fatalf("decision on the unprofiled basis: the prior should price %s on %s", model, gpu)
		}
		now += 1e9
	}
	// Prefill-heavy: 24 prompts/s of 6000 tokens, 16 output tokens.
	for i := 0; i < 150; i++ {
		step(24, 6000, 16)
	}
	toPrefill, backBefore := moves["decode>prefill"], moves["prefill>decode"]
	// Decode-heavy: 80 requests/s of 200 tokens, 400 output tokens (the
	// truth needs 4 decode engines for TPOT under 0.8 of its SLO).
	for i := 0; i < 300; i++ {
		step(80, 200, 400)
	}
	toDecode := moves["prefill>decode"] - backBefore
	if !sawPrior {
		t.Error("no decision named the geometry prior for Llama-3.1-8B on H100 among its profiles")
	}
	if toPrefill == 0 || toDecode == 0 {
		t.Fatalf("moves %v: want engines moved to prefill in the prefill-heavy phase and to decode in the decode-heavy one", moves)
	}
	if _, body := get(t, h, "/readyz"); strings.Contains(body, "unprofiled") {
		t.Errorf("/readyz names unprofiled models although the prior covers them: %s", body)
	}
	t.Logf("moves: %v", moves)
}
