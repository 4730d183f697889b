package sim

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Published DistServe coefficients for OPT-66B TP8 on A100-80GB
// (profiler-a100-80g.distserve.json), written out here so the expected
// values do not come from the simulator's own tables.
const (
	pA, pB, pC    = 25.490662375045222, 0.10659177664763161, 3.3910502518615973e-06
	dA, dB, dC    = 23.15511135047022, 0.00022691488497826264, 0.04800638397272423
	kvBytesPerTok = 2 * 64 * 9216 * 2 // OPT-66B: 64 layers, hidden 9216, K and V, fp16
)

func testConfig(policy string, engines int) Config {
	c := DefaultConfig()
	c.Policy = policy
	c.Engines = engines
	c.TokenizeDelayS = 0.002
	c.NoMaxTokensFrac = 0
	return c
}

func newTestSim(t *testing.T, cfg Config, reqs []Request, pol policy) *simulator {
	t.Helper()
	cfg, err := cfg.Normalize()
	if err != nil {
		t.Fatalf("normalize: %v", err)
	}
	Prepare(reqs, cfg.Seed, cfg.NoMaxTokensFrac, cfg.EstErrSigma)
	s, err := newSimulator(cfg, reqs, options{}, pol)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	return s
}

func TestSingleRequestMatchesProfile(t *testing.T) {
	const in, out = 1000, 10
	cfg := testConfig("static:1", 2)
	cfg.TransferLatencyS = 0.001
	cfg.TransferGBps = 100
	res, err := Run(context.Background(), cfg, []Request{{ArrivalNs: 0, InputTokens: in, OutputTokens: out}})
	if err != nil {
		t.Fatal(err)
	}
	wantTTFT := (pA + pB*in + pC*in*in) / 1000 // one prompt, alone
	// TPOT: KV transfer, then out-1 decode steps at batch 1; step k starts
	// with context in+k and DistServe charges Σ(ctx+1).
	xfer := 0.001 + float64(in)*kvBytesPerTok/100e9
	var steps float64
	for k := 1; k < out; k++ {
		steps += (dA + dB*float64(in+k+1) + dC*1) / 1000
	}
	wantTPOT := (xfer + steps) / (out - 1)
	if math.Abs(res.TTFTP50S-wantTTFT) > 1e-6 {
		t.Fatalf("unexpected TTFT; got %.9f; want %.9f", res.TTFTP50S, wantTTFT)
	}
	if math.Abs(res.TPOTP50S-wantTPOT) > 1e-6 {
		t.Fatalf("unexpected TPOT; got %.9f; want %.9f", res.TPOTP50S, wantTPOT)
	}
	if res.SLOAttainment != 1 || res.Completed != 1 {
		t.Fatalf("unexpected outcome; got attainment %v completed %d; want 1, 1", res.SLOAttainment, res.Completed)
	}
}

func TestBatchedPrefillUsesSumOfSquares(t *testing.T) {
	// Two prompts arriving together on one prefill engine are one batch:
	// both first tokens come at a + b·ΣL + c·ΣL².
	cfg := testConfig("static:1", 2)
	reqs := []Request{{ArrivalNs: 0, InputTokens: 600, OutputTokens: 2}, {ArrivalNs: 0, InputTokens: 600, OutputTokens: 2}}
	// The first arrival starts alone (the engine is idle); the second waits
	// for it and then runs alone. Check both against the formula.
	s := newTestSim(t, cfg, reqs, &staticPolicy{split: 1, stepNsV: 1e9})
	one := msToNs(pA + pB*600 + pC*600*600)
	if got := s.reqs[0].firstNs - s.base; got != one {
		t.Fatalf("unexpected first TTFT; got %d; want %d", got, one)
	}
	if got := s.reqs[1].firstNs - s.base; got != 2*one {
		t.Fatalf("unexpected second TTFT; got %d; want %d", got, 2*one)
	}
	// Three queued behind a busy engine go as one batch.
	reqs = []Request{
		{ArrivalNs: 0, InputTokens: 100, OutputTokens: 2},
		{ArrivalNs: 1, InputTokens: 300, OutputTokens: 2},
		{ArrivalNs: 2, InputTokens: 500, OutputTokens: 2},
	}
	s = newTestSim(t, cfg, reqs, &staticPolicy{split: 1, stepNsV: 1e9})
	first := msToNs(pA + pB*100 + pC*100*100)
	batch := msToNs(pA + pB*800 + pC*(300*300+500*500))
	if got := s.reqs[2].firstNs - s.base; got != first+batch || s.reqs[1].firstNs != s.reqs[2].firstNs {
		t.Fatalf("unexpected batched TTFT; got %d and %d; want %d for both", s.reqs[1].firstNs-s.base, got, first+batch)
	}
}

func TestKVFullMakesRequestsWait(t *testing.T) {
	cfg := testConfig("static:1", 2)
	cfg.KVCapacityTokens = 3000 // one decode sequence of 1000+1000 fits, two do not
	reqs := []Request{
		{ArrivalNs: 0, InputTokens: 1000, OutputTokens: 1000},
		{ArrivalNs: 1e6, InputTokens: 1000, OutputTokens: 1000},
	}
	s := newTestSim(t, cfg, reqs, &staticPolicy{split: 1, stepNsV: 1e9})
	a, b := &s.reqs[0], &s.reqs[1]
	if a.doneNs == 0 || b.doneNs == 0 {
		t.Fatalf("requests did not finish: %+v %+v", a, b)
	}
	if b.firstNs >= a.doneNs {
		t.Fatalf("second prompt should be prefilled while the first decodes; first token %d, first done %d", b.firstNs, a.doneNs)
	}
	// b can only start decoding once a freed its KV: 999 decode steps of at
	// least the batch-1 step time after a finished.
	minStep := msToNs(dA + dB*1001 + dC)
	if b.doneNs < a.doneNs+999*minStep {
		t.Fatalf("second request did not wait for KV; done at %d, first done at %d, want ≥ %d", b.doneNs, a.doneNs, a.doneNs+999*minStep)
	}
	if s.eng[1].reserved != 0 || s.eng[0].heldKV != 0 {
		t.Fatalf("KV leaked: decode reserved %d, prefill held %d", s.eng[1].reserved, s.eng[0].heldKV)
	}
}

// moveOncePolicy is static, plus one move of engine idx to role at atNs.
type moveOncePolicy struct {
	staticPolicy
	idx      int
	to       controller.Role
	atNs     int64
	started  int64
	doneAtNs int64
}

func (m *moveOncePolicy) step(s *simulator, now int64) int {
	if m.started == 0 && now-s.base >= m.atNs {
		if err := (actuator{s}).Start(controller.Move{EngineID: s.eng[m.idx].id, From: s.eng[m.idx].role, To: m.to}); err != nil {
			panic(err)
		}
		m.started = now
		m.refresh(s)
		return 1
	}
	return 0
}

func (m *moveOncePolicy) moveDone(s *simulator, e *engine, now int64) {
	m.doneAtNs = now
	m.refresh(s)
}

func TestRoleSwitchDrainsFirst(t *testing.T) {
	cfg := testConfig("static:1", 3)
	cfg.SwitchS = 5
	reqs := []Request{
		{ArrivalNs: 0, InputTokens: 100, OutputTokens: 500},      // decodes on e01 (most free KV, lowest index)
		{ArrivalNs: 2e9, InputTokens: 100, OutputTokens: 50},     // arrives while e01 drains
		{ArrivalNs: 40e9, InputTokens: 100, OutputTokens: 50},    // after the switch: e01 is a prefill engine
		{ArrivalNs: 40e9 + 1, InputTokens: 100, OutputTokens: 2}, // e00 busy with the previous one
	}
	pol := &moveOncePolicy{staticPolicy: staticPolicy{split: 1, stepNsV: 1e9}, idx: 1, to: controller.RolePrefill, atNs: 1e9}
	s := newTestSim(t, cfg, reqs, pol)
	a, b := &s.reqs[0], &s.reqs[1]
	if a.decodeEng != 1 {
		t.Fatalf("first request decoded on e%02d; want e01", a.decodeEng)
	}
	if b.decodeEng != 2 {
		t.Fatalf("request arriving during the drain decoded on e%02d; want e02", b.decodeEng)
	}
	if a.doneNs < pol.started {
		t.Fatalf("test setup: first request finished before the move")
	}
	if want := a.doneNs + 5e9; pol.doneAtNs != want {
		t.Fatalf("unexpected switch end; got %d; want drain end %d + 5 s = %d", pol.doneAtNs, a.doneNs, want)
	}
	if e := &s.eng[1]; e.role != controller.RolePrefill || e.state != controller.StateServing {
		t.Fatalf("engine 1 is %s/%s; want prefill/serving", e.role, e.state)
	}
	if s.reqs[3].prefillEng != 1 {
		t.Fatalf("after the switch, a prefill went to e%02d; want e01", s.reqs[3].prefillEng)
	}
}

func syntheticWorkload(n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{
			ArrivalNs:    int64(i) * 150e6,
			InputTokens:  int64(200 + (i*7919)%3000),
			OutputTokens: int64(1 + (i*104729)%400),
		}
	}
	return reqs
}

func TestSameSeedSameResult(t *testing.T) {
	reqs := syntheticWorkload(3000)
	cfg := testConfig("threshold", 8)
	cfg.Seed = 42
	cfg.InitialPrefill = 1 // far from what the load needs: the baseline must move
	run := func() string {
		r, err := Run(context.Background(), cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		r.WallSeconds = 0
		b, _ := json.Marshal(r)
		return string(b)
	}
	first, second := run(), run()
	if first != second {
		t.Fatalf("same seed, different results:\n%s\n%s", first, second)
	}
	var r Result
	_ = json.Unmarshal([]byte(first), &r)
	if r.Moves == 0 {
		t.Fatalf("threshold made no moves; the determinism check should cover moves")
	}
}

func TestEventHeapOrderAndAllocs(t *testing.T) {
	var h eventHeap
	ts := []int64{5, 3, 9, 3, 1, 7}
	for i, x := range ts {
		h.push(event{t: x, seq: uint64(i)})
	}
	want := []int64{1, 3, 3, 5, 7, 9}
	var prevSeq uint64
	for i, w := range want {
		e := h.pop()
		if e.t != w {
			t.Fatalf("pop %d: got t=%d; want %d", i, e.t, w)
		}
		if i == 2 && e.seq < prevSeq {
			t.Fatalf("tie not broken by insertion order")
		}
		prevSeq = e.seq
	}
	for i := 0; i < 64; i++ {
		h.push(event{t: int64(i)})
	}
	for h.len() > 0 {
		h.pop()
	}
	n := testing.AllocsPerRun(1000, func() {
		h.push(event{t: 3})
		h.push(event{t: 1})
		h.pop()
		h.pop()
	})
	if n != 0 {
		t.Fatalf("event heap allocates: %v allocs per run", n)
	}
}

func msToNs(ms float64) int64 { return int64(ms * 1e6) }

func TestNoPrefillEngineRequestsWaitThenExpire(t *testing.T) {
	cfg := testConfig("static:1", 3)
	cfg.DrainLimitS = 30
	reqs := []Request{
		{ArrivalNs: 0, InputTokens: 100, OutputTokens: 5},
		{ArrivalNs: 5e9, InputTokens: 100, OutputTokens: 5}, // e00 is switching to decode: nowhere to prefill
		{ArrivalNs: 6e9, InputTokens: 100, OutputTokens: 5},
	}
	pol := &moveOncePolicy{staticPolicy: staticPolicy{split: 1, stepNsV: 1e9}, idx: 0, to: controller.RoleDecode, atNs: 1e9}
	s := newTestSim(t, cfg, reqs, pol)
	if s.reqs[0].doneNs == 0 || s.reqs[0].expired {
		t.Fatalf("first request should complete before the move")
	}
	for i := 1; i < 3; i++ {
		r := &s.reqs[i]
		if !r.expired || r.firstNs != 0 || r.admitted {
			t.Fatalf("request %d: expired=%v first=%d admitted=%v; want expired, never admitted", i, r.expired, r.firstNs, r.admitted)
		}
	}
	if want := s.base + 6e9 + 30e9; s.now != want {
		t.Fatalf("unexpected end; got %d; want last arrival + drain limit %d", s.now, want)
	}
	res := s.result()
	if res.Completed != 1 || math.Abs(res.SLOAttainment-1.0/3) > 1e-12 {
		t.Fatalf("unexpected result: completed %d attainment %v; want 1, 1/3", res.Completed, res.SLOAttainment)
	}
}

func TestSplitwiseProfilesMatchMeasuredMedians(t *testing.T) {
	// Splitwise perf_model.csv medians, Llama2-70B TP8 on H100: prompt 2048
	// at batch 1 took 136.797 ms; a decode step at batch 32, prompt 512
	// took 38.619 ms. The fit must land within 15 % of the measurement.
	p, err := LookupProfile("llama2-70b-tp8-h100")
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(p.PrefillNs(2048, 2048*2048)) / 1e6; math.Abs(got-136.797)/136.797 > 0.15 {
		t.Fatalf("prefill 2048: got %.1f ms; want 136.8 ms ±15%%", got)
	}
	if got := float64(p.DecodeStepNs(32, 32*(512+64))) / 1e6; math.Abs(got-38.619)/38.619 > 0.15 {
		t.Fatalf("decode batch 32: got %.1f ms; want 38.6 ms ±15%%", got)
	}
}

// runScheduled runs policy on 6 engines from 3:3 over n small requests,
// one every 100 ms, sampling every second.
func runScheduled(t *testing.T, policy string, switchS float64, n int) *Result {
	t.Helper()
	cfg := testConfig(policy, 6)
	cfg.InitialPrefill = 3
	cfg.SwitchS = switchS
	cfg.SampleS = 1
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{ArrivalNs: int64(i) * 100e6, InputTokens: int64(100 + i%400), OutputTokens: int64(2 + i%8)}
	}
	r, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Completed != n {
		t.Fatalf("%d of %d requests completed", r.Completed, n)
	}
	return r
}

// wantSplit asserts the series holds p prefill / d decode engines in
// samples [from, to).
func wantSplit(t *testing.T, r *Result, from, to int, p, d float64) {
	t.Helper()
	if len(r.Series) < to {
		t.Fatalf("series has %d points; want ≥ %d one-second samples", len(r.Series), to)
	}
	for _, pt := range r.Series[from:to] {
		if pt.PrefillEngines != p || pt.DecodeEngines != d {
			t.Fatalf("at %v s: %v prefill / %v decode; want %v / %v", pt.TS, pt.PrefillEngines, pt.DecodeEngines, p, d)
		}
	}
}

// The timing oracle moves every engine it needs at its time, not before,
// and the switched engines serve in their new role afterwards.
func TestScheduledPolicyMovesAllEnginesAtItsTime(t *testing.T) {
	r := runScheduled(t, "scheduled:5@5", 1, 300)
	if r.Moves != 2 || r.Reversals != 0 {
		t.Fatalf("moves %d, reversals %d; want 2 moves (3 -> 5 prefill), no reversal", r.Moves, r.Reversals)
	}
	wantSplit(t, r, 0, 5, 3, 3)   // before the scheduled time
	wantSplit(t, r, 10, 25, 5, 1) // once the switch is done
}

// A schedule of several moves: each starts at its time and brings the
// split to its target, counting engines still on their way.
func TestScheduledPolicyFollowsASchedule(t *testing.T) {
	// 5@6: the first two are still switching (3 s) and count as prefill.
	r := runScheduled(t, "scheduled:5@5,5@6,4@20,2@21", 3, 400)
	// 3 -> 5 (two engines), 5 -> 4 (one back), 4 -> 2 (two more back).
	if r.Moves != 5 || r.Reversals != 1 {
		t.Fatalf("moves %d, reversals %d; want 5 moves, 1 reversal", r.Moves, r.Reversals)
	}
	wantSplit(t, r, 0, 5, 3, 3)
	wantSplit(t, r, 10, 20, 5, 1)
	wantSplit(t, r, 28, 38, 2, 4)
}

func TestScheduledPolicyRejectsBadSpecs(t *testing.T) {
	for _, p := range []string{"scheduled:0@1", "scheduled:6@1", "scheduled:3@-1", "scheduled:3@NaN", "scheduled:3@Inf", "scheduled:3", "scheduled:x@1", "scheduled:3@1e9", "scheduled:3@5,4@5", "scheduled:3@5,4@4", "scheduled:3@1,", "scheduled:"} {
		cfg := testConfig(p, 6)
		if _, err := cfg.Normalize(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("policy %q: err %v; want ErrBadConfig", p, err)
		}
	}
	cfg := testConfig("scheduled:3@0.5", 6)
	if _, err := cfg.Normalize(); err != nil {
		t.Errorf("scheduled:3@0.5: %v", err)
	}
}
