package sim

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// bigPrompts: n prompts of 9000 tokens arriving 1 ns apart from 0, then
// one more at lateNs. On OPT-66B TP8 two such prompts exceed the batch
// budget (16,384 tokens), so each runs alone for one = a + b·L + c·L².
func bigPrompts(n int, lateNs int64) (reqs []Request, one int64) {
	for i := 0; i < n; i++ {
		reqs = append(reqs, Request{ArrivalNs: int64(i), InputTokens: 9000, OutputTokens: 2})
	}
	reqs = append(reqs, Request{ArrivalNs: lateNs, InputTokens: 9000, OutputTokens: 2})
	return reqs, msToNs(pA + pB*9000 + pC*9000*9000)
}

func TestClientTimeoutCancelsQueuedAndRunningPrompts(t *testing.T) {
	const lateNs = 4e9
	reqs, one := bigPrompts(8, lateNs)
	if one < 1.2e9 || one > 1.3e9 {
		t.Fatalf("test setup: one prompt takes %d ns; want about 1.26 s", one)
	}
	// Clients wait 3 s: prompts 0 and 1 finish in time (at one, 2·one);
	// prompt 2 is running at 3 s and is dropped when its batch ends
	// (3·one); prompts 3–7 leave the queue at 3 s. The late request finds
	// the engine idle instead of behind six prompts.
	cfg := testConfig("static:1", 2)
	cfg.ClientTimeoutS = 3
	s := newTestSim(t, cfg, reqs, &staticPolicy{split: 1, stepNsV: 1e9})
	for i := 0; i < 2; i++ {
		if r := &s.reqs[i]; r.cancelled || r.firstNs-s.base != int64(i+1)*one {
			t.Fatalf("prompt %d: cancelled=%v first token at %d; want served at %d", i, r.cancelled, r.firstNs-s.base, int64(i+1)*one)
		}
	}
	for i := 2; i < 8; i++ {
		if r := &s.reqs[i]; !r.cancelled || !r.expired || r.firstNs != 0 || r.doneNs != 0 {
			t.Fatalf("prompt %d: cancelled=%v expired=%v first=%d done=%d; want cancelled without a first token", i, r.cancelled, r.expired, r.firstNs, r.doneNs)
		}
	}
	late := &s.reqs[8]
	if got := late.firstNs - s.base - lateNs; got != one {
		t.Fatalf("late request's TTFT %d ns; want %d (the engine idle)", got, one)
	}
	e := &s.eng[0]
	if e.heldKV != 0 || e.queueLen() != 0 || e.qdead != 0 || e.queuedNs != 0 {
		t.Fatalf("prefill engine left with heldKV %d queue %d dead %d queued %d ns; want all 0", e.heldKV, e.queueLen(), e.qdead, e.queuedNs)
	}
	res := s.result()
	if res.Cancelled != 6 || res.Completed != 3 || res.ClientTimeoutS != 3 {
		t.Fatalf("result: cancelled %d completed %d timeout %v; want 6, 3, 3", res.Cancelled, res.Completed, res.ClientTimeoutS)
	}

	// Without the timeout the late request waits behind every prompt.
	cfg.ClientTimeoutS = 0
	s = newTestSim(t, cfg, reqs, &staticPolicy{split: 1, stepNsV: 1e9})
	if got, want := s.reqs[8].firstNs-s.base-lateNs, 9*one-lateNs; got != want {
		t.Fatalf("without timeout the late request's TTFT is %d; want %d", got, want)
	}
	if res := s.result(); res.Cancelled != 0 || res.Completed != 9 {
		t.Fatalf("without timeout: cancelled %d completed %d; want 0, 9", res.Cancelled, res.Completed)
	}
}

func TestClientTimeoutShortensADrain(t *testing.T) {
	// e00, the only prefill engine, is told to move to decode at 0.5 s
	// with eight prompts queued or running. Cancelled prompts are no work
	// to drain: it switches when the batch running at the timeout ends
	// (3·one), not after all eight (8·one). The late request then has no
	// prefill engine and its client gives up in the router's backlog.
	reqs, one := bigPrompts(8, 4e9)
	cfg := testConfig("static:1", 3)
	cfg.SwitchS = 5
	cfg.ClientTimeoutS = 3
	pol := &moveOncePolicy{staticPolicy: staticPolicy{split: 1, stepNsV: 1e9}, idx: 0, to: controller.RoleDecode, atNs: 5e8}
	s := newTestSim(t, cfg, reqs, pol)
	if want := s.base + 3*one + 5e9; pol.doneAtNs != want {
		t.Fatalf("switch ended at %d; want the cancelled prompts' batch end + 5 s = %d", pol.doneAtNs-s.base, want-s.base)
	}
	late := &s.reqs[8]
	if !late.cancelled || late.admitted || late.firstNs != 0 {
		t.Fatalf("late request: cancelled=%v admitted=%v first=%d; want cancelled in the backlog", late.cancelled, late.admitted, late.firstNs)
	}
	if n := len(s.backlog) - s.bhead; n != 0 {
		t.Fatalf("backlog holds %d requests; want 0", n)
	}
	if want := s.base + 4e9 + 3e9; s.now >= s.base+4e9+int64(cfg.DrainLimitS*1e9) || s.now < want {
		t.Fatalf("run ended at %d; want after the late cancel (%d) and before the drain limit", s.now-s.base, want-s.base)
	}
	if res := s.result(); res.Cancelled != 7 || res.Completed != 2 {
		t.Fatalf("cancelled %d completed %d; want 7, 2", res.Cancelled, res.Completed)
	}
}

func TestClientTimeoutRejectsBadValues(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1), 0.002, 0.001} {
		c := testConfig("static:1", 2) // tokenize delay 0.002 s
		c.ClientTimeoutS = v
		if _, err := c.Normalize(); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("client_timeout_s %v: got %v; want ErrBadConfig", v, err)
		}
	}
	c := testConfig("static:1", 2)
	c.ClientTimeoutS = 0.5
	if _, err := c.Normalize(); err != nil {
		t.Fatalf("client_timeout_s 0.5: %v", err)
	}
}

// A suite scenario's client timeout reaches every run's configuration and
// its baseline key (a cached calibration made with clients that wait for
// ever is not reused), while a scenario without one keeps its old key.
func TestClientTimeoutInSuiteScenarios(t *testing.T) {
	sc := QuickSuite()[0]
	src := map[string]ShapeSource{}
	k0 := BaselineKey(sc, src)
	cfg, err := scenarioConfig(sc, 1.5, 0.1)
	if err != nil || cfg.ClientTimeoutS != 0 {
		t.Fatalf("no timeout: config %v, %v; want 0", cfg.ClientTimeoutS, err)
	}
	sc.ClientTimeoutS = 60
	if BaselineKey(sc, src) == k0 {
		t.Fatalf("the baseline key ignores the client timeout")
	}
	if cfg, err = scenarioConfig(sc, 1.5, 0.1); err != nil || cfg.ClientTimeoutS != 60 {
		t.Fatalf("timeout 60: config %v, %v; want 60", cfg.ClientTimeoutS, err)
	}
	sc.ClientTimeoutS = 0
	if BaselineKey(sc, src) != k0 {
		t.Fatalf("a scenario without a timeout changed its baseline key")
	}
}

// A suite run with a client timeout runs the reference's traffic: the same
// rate scale and SLOs as without one (the load is calibrated with clients
// that wait for ever), its static-best searched again with the timeout.
func TestClientTimeoutSuiteKeepsTheReferenceLoad(t *testing.T) {
	src := testSources(t)
	o := SuiteOptions{Sources: src, Variants: []SuiteVariant{{Name: "narwhal"}}, Parallel: 2}
	ref, err := RunSuite(context.Background(), QuickSuite(), o)
	if err != nil {
		t.Fatal(err)
	}
	var scs []Scenario
	for _, sc := range QuickSuite() {
		sc.ClientTimeoutS = 5
		scs = append(scs, sc)
	}
	got, err := RunSuite(context.Background(), scs, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		a, b := ref[i].Baseline, got[i].Baseline
		if a.RateScale != b.RateScale || a.TTFTSLOS != b.TTFTSLOS || a.Requests != b.Requests {
			t.Fatalf("%s: timeout run at x%v, TTFT %v, %d requests; want the reference's x%v, %v, %d",
				scs[i].Name, b.RateScale, b.TTFTSLOS, b.Requests, a.RateScale, a.TTFTSLOS, a.Requests)
		}
		if b.Evals <= a.Evals || b.Key == a.Key {
			t.Fatalf("%s: timeout run made %d static runs under key %s; want more than the reference's %d, another key", scs[i].Name, b.Evals, b.Key, a.Evals)
		}
	}
}
