package core

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

const sec = int64(1e9)
const t0 = int64(1_700_000_000) * sec

func newCore(t testing.TB, opts ...Option) *Core {
	t.Helper()
	c, err := New(DefaultConfig(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []controller.Role{controller.RolePrefill, controller.RolePrefill, controller.RoleDecode, controller.RoleDecode} {
		e := controller.Engine{ID: "e" + string(rune('0'+i)), Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: r, Live: true, KVCapacityTokens: 66144}
		if err := c.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	f := func(mod func(*Config), want string) {
		t.Helper()
		c := DefaultConfig()
		mod(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Fatalf("unexpected error; got %v; want one containing %q", err, want)
		}
		if _, err := New(c); err == nil {
			t.Fatalf("New accepted a bad config (%s)", want)
		}
	}
	f(func(c *Config) { c.StepS = -1 }, "step_s must be > 0 and <= 31536000, got -1")
	f(func(c *Config) { c.DemandWindowS = 0.5 }, "demand_window_s must be >= step_s (1), got 0.5")
	f(func(c *Config) { c.MinEvidenceSpanS = 100 }, "min_evidence_span_s must be <= demand_window_s (60), got 100")
	f(func(c *Config) { c.TTFTSLOS = 0 }, "ttft_slo_s must be > 0")
	f(func(c *Config) { c.Controller.ConfirmSteps = 0 }, "controller.confirm_steps must be >= 1, got 0")
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestPerRequestCallsDoNotAllocate(t *testing.T) {
	now := t0
	// a clock that the records keep passing (its slow path runs), and
	// records 0.7 s apart, so that buckets expire inside the measured loop
	c := newCore(t, WithClock(func() int64 { return now }))
	expired := func() int64 { s, _ := c.Demand().Arrivals.Expired(); return s + c.Attainment().Expired() }
	before := expired()
	n := testing.AllocsPerRun(1000, func() {
		now += 7e8
		c.OfferStarted(now)
		if err := c.OfferSized(now, 1000, 128); err != nil {
			t.Fatal(err)
		}
		if err := c.Tokenized(now, 1000, 1010, 128); err != nil {
			t.Fatal(err)
		}
		tb := c.Roles()
		if err := c.Admitted(now, tb.Prefill[0], 1010, 128); err != nil {
			t.Fatal(err)
		}
		if err := c.FirstToken(now+1e8, now); err != nil {
			t.Fatal(err)
		}
		if err := c.Completed(now+5e8, now, now+1e8, 128, 100); err != nil {
			t.Fatal(err)
		}
		c.OfferStarted(now)
		_ = c.OfferAbandoned(now)
		_ = c.Refused(now)
		if err := c.RefusedSized(now+1e8, now); err != nil {
			t.Fatal(err)
		}
		if err := c.RefusedSized(now, now+1); !errors.Is(err, ErrInvalidInput) {
			t.Fatal(err)
		}
		_ = c.Failed(now+5e8, now, 0)
		_ = c.Expired(now+5e8, now, now+1e8)
		// gone after 0.5 s with no first token, past the 0.25-s TTFT SLO:
		// also a prefill pressure record
		_ = c.Expired(now+5e8, now, 0)
		if err := c.Completed(now+3e9, now, now+1e8, 128, 100); !errors.Is(err, ErrAheadOfClock) {
			t.Fatal(err)
		}
		// refusals do not allocate either
		if err := c.Admitted(now, "nope", 1, 1); !errors.Is(err, ErrUnknownEngine) {
			t.Fatal(err)
		}
		if err := c.OfferSized(now, -1, 1); !errors.Is(err, ErrInvalidInput) {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("per-request calls allocate %v times; want 0", n)
	}
	if expired() <= before || c.AheadRefused() == 0 {
		t.Fatalf("the measured loop must expire buckets and refuse records ahead of the clock (expired %d, refused %d)", expired()-before, c.AheadRefused())
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	c := newCore(t)
	before := c.State(t0)
	for _, err := range []error{
		c.OfferSized(t0, -5, 1), c.OfferSized(t0, 1, 1<<30), c.OfferSized(0, 1, 1),
		c.Tokenized(t0, 1, -1, 1), c.Admitted(t0, "ghost", 1, 1), c.Admitted(t0, "", 1, 1),
		c.FirstToken(t0, t0+1), c.Completed(t0, t0+5, 0, 1, 1), c.Completed(t0+9, t0, t0+10, 1, 1),
		c.Failed(t0, t0+1, 0), c.Expired(t0+5, t0, t0+6),
	} {
		if err == nil {
			t.Fatal("bad input accepted")
		}
		if !errors.Is(err, ErrInvalidInput) && !errors.Is(err, ErrUnknownEngine) {
			t.Fatalf("error %v is neither ErrInvalidInput nor ErrUnknownEngine", err)
		}
	}
	after := c.State(t0)
	b1, _ := json.Marshal(before)
	b2, _ := json.Marshal(after)
	if string(b1) != string(b2) {
		t.Fatalf("refused input changed state:\n%s\n%s", b1, b2)
	}
}

func TestStateShowsLifecycle(t *testing.T) {
	c := newCore(t)
	now := t0
	for i := 0; i < 30; i++ {
		now += 100e6
		c.OfferStarted(now)
		c.OfferSized(now, 1000, 64)
		c.Admitted(now, "e0", 1000, 64)
		c.FirstToken(now+50e6, now)                          // TTFT 0.05 s: met
		c.Completed(now+50e6+63*50e6, now, now+50e6, 64, 64) // TPOT 0.05 s: met
	}
	c.OfferStarted(now)
	c.OfferStarted(now)
	c.OfferAbandoned(now)
	c.Refused(now)      // a refused request ends a pending offer too
	c.OfferStarted(now) // one body still being read
	d := c.Step(now + 5*sec)
	st := c.State(now + 5*sec)
	if st.DemandHistory.Arrivals.Observations != 30 || st.DemandHistory.Unsized.Pending != 1 || st.DemandHistory.Unsized.Observations != 1 {
		t.Fatalf("unexpected demand_history %+v", st.DemandHistory)
	}
	comp := st.Attainment.ByOutcome["completed"]
	if comp.Total != 30 || comp.TTFTMet != 30 || comp.TPOTMet != 30 || st.Attainment.ByOutcome["refused"].Total != 1 || st.Attainment.CoveredS <= 0 {
		t.Fatalf("unexpected attainment %+v", st.Attainment)
	}
	if st.LatestDecision == nil || st.LatestDecision.Seq != d.Seq || len(st.Engines) != 4 || len(st.Roles.Prefill) != 2 {
		t.Fatalf("unexpected state %+v", st)
	}
	// One pending body: incomplete demand, observed pressure basis with
	// both ratios: TTFT 0.05/0.25 = 0.2, TPOT 0.05/0.1 = 0.5.
	if d.Basis != controller.BasisObservedPressure || math.Abs(d.ObservedPrefillRatio-0.2) > 1e-4 || math.Abs(d.ObservedDecodeRatio-0.5) > 1e-4 {
		t.Fatalf("unexpected decision basis/ratios %s %v %v", d.Basis, d.ObservedPrefillRatio, d.ObservedDecodeRatio)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"demand_history"`, `"unsized"`, `"covered_s"`, `"latest_decision"`, `"engines"`, `"roles"`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("state JSON lacks %s", k)
		}
	}
}

// metricValues gathers the core's collectors through a pedantic registry:
// each gauge or counter by its name and its labels ("name,label=value").
func metricValues(t *testing.T, c *Core) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, col := range c.Collectors() {
		if err := reg.Register(col); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return got
}

func TestCollectors(t *testing.T) {
	c := newCore(t)
	c.Step(t0)
	got := metricValues(t, c)
	for k, want := range map[string]float64{
		"narwhal_controller_decisions_total,basis=offered_demand": 1,
		"narwhal_controller_decisions_total,basis=recovery":       0,
		"narwhal_controller_moves_total":                          0,
		"narwhal_engines,role=prefill,state=serving":              2,
		"narwhal_engines,role=decode,state=serving":               2,
		"narwhal_engines,role=decode,state=draining":              0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Fatalf("metric %s: got %v (present %v); want %v", k, v, ok, want)
		}
	}
	if _, ok := got["narwhal_demand_history_cell_limit,kind=arrivals"]; !ok {
		var names []string
		for k := range got {
			names = append(names, k)
		}
		t.Logf("metrics: %v", names)
	}
}

func TestStateFileRestart(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	journal := filepath.Join(dir, "journal.jsonl")
	sink, err := controller.NewJSONLinesSink(journal)
	if err != nil {
		t.Fatal(err)
	}
	c := newCore(t, WithStateFile(state), WithJournalSink(sink))
	// Prefill-heavy load: 8 req/s of 1500-token prompts, 8 output tokens.
	now := t0
	for i := 0; i < 60*8; i++ {
		now += 125e6
		c.OfferStarted(now)
		c.OfferSized(now, 1500, 8)
	}
	var moved controller.Decision
	for i := 0; i < 5 && moved.Action != controller.ActionMove; i++ {
		moved = c.Step(now + int64(i)*sec)
	}
	if moved.Action != controller.ActionMove {
		t.Fatalf("setup: expected a move; last %s %q %s", moved.Action, moved.Blocked, moved.Reason)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	hist, err := controller.LoadJournal(journal, 100)
	if err != nil || len(hist) == 0 || hist[len(hist)-1].Seq != moved.Seq {
		t.Fatalf("journal not on disk: %v %v", len(hist), err)
	}
	c2, err := New(DefaultConfig(), WithStateFile(state), WithJournalHistory(hist))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Engines() {
		e.Role = controller.RoleNone // agents know no roles
		if err := c2.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := c2.Roles().Prefill, c.Roles().Prefill; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("roles changed across restart; got %v; want %v", got, want)
	}
	for i := 0; i < 60*8; i++ {
		c2.OfferSized(now-60*sec+int64(i)*125e6, 1500, 8)
	}
	d := c2.Step(moved.AtNs + 5*sec)
	if d.Seq != moved.Seq+1 || (d.Action == controller.ActionMove) {
		t.Fatalf("after restart: seq %d action %s; want seq %d and no move inside cooldown", d.Seq, d.Action, moved.Seq+1)
	}
	if d.Action == controller.ActionBlocked && d.Blocked != controller.GateCooldown {
		t.Fatalf("unexpected gate %q", d.Blocked)
	}
	if got := c2.Decisions(0, 0); len(got) < 2 {
		t.Fatalf("journal history not restored: %d", len(got))
	}
}

// TestConcurrentUse runs the router, agent and controller sides at once
// (meaningful under -race).
func TestConcurrentUse(t *testing.T) {
	c := newCore(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			now := t0 + int64(w)
			for i := 0; i < 2000; i++ {
				now += 1e6
				c.OfferStarted(now)
				c.OfferSized(now, 500, 100)
				tb := c.Roles()
				c.Admitted(now, tb.Prefill[i%len(tb.Prefill)], 500, 100)
				c.FirstToken(now+1e8, now)
				c.Completed(now+3e9, now, now+1e8, 100, 80)
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			c.UpdateEngine("e2", t0, controller.Resident{DecodeSeqs: int64(i % 7), KVTokens: int64(i % 7 * 100)}, 66144, true)
			_ = c.State(t0 + int64(i)*1e6)
		}
	}()
	for i := 0; i < 50; i++ {
		c.Step(t0 + int64(i)*sec)
	}
	close(done)
	wg.Wait()
	if got := len(c.Decisions(0, 0)); got != 50 {
		t.Fatalf("unexpected decisions %d; want 50", got)
	}
}

func TestRunStepsOnTheWallClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StepS = 0.005
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "demand_window_s must be <= ") {
		t.Fatalf("a window needing more buckets than a ring holds must be refused; got %v", err)
	}
	cfg.DemandWindowS, cfg.MinEvidenceSpanS = 10, 1
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	ds := c.Decisions(0, 0)
	if len(ds) < 3 {
		t.Fatalf("Run made %d steps in 60 ms at 5 ms steps; want several", len(ds))
	}
	if ds[0].Basis != controller.BasisNoEngines || ds[0].AtNs < time.Now().Add(-time.Minute).UnixNano() {
		t.Fatalf("unexpected first decision %+v", ds[0])
	}
}

// TestStepReadsTheGivenDemandReaders: with WithDemandReaders the controller
// steps on the given arrivals and outputs (here 120 requests over the
// window that the core itself never saw), while the core keeps recording
// its own demand (one request) for State and Demand.
func TestStepReadsTheGivenDemandReaders(t *testing.T) {
	width := DefaultConfig().StepS * 1e9
	arr, err := buckets.NewHistory(int64(width), 60*sec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := buckets.NewHistory(int64(width), 240*sec)
	if err != nil {
		t.Fatal(err)
	}
	now := t0 + 30*sec
	for i := range int64(120) {
		if !arr.Record(now-20*sec+i*(sec/10), buckets.Shape{Input: 500, Output: 200}) {
			t.Fatal("record refused")
		}
	}
	merged := newCore(t, WithDemandReaders(arr, out))
	local := newCore(t)
	for _, c := range []*Core{merged, local} {
		if err := c.OfferSized(now-5*sec, 1000, 100); err != nil {
			t.Fatal(err)
		}
	}
	dm, dl := merged.Step(now), local.Step(now)
	if got := dm.Snapshot.Long.Requests; got != 120 {
		t.Fatalf("with readers: long-horizon requests %v; want 120 (the given arrivals)", got)
	}
	if got := dm.Snapshot.Long.MeanInput; got != 500 {
		t.Fatalf("with readers: mean input %v; want 500", got)
	}
	if got := dl.Snapshot.Long.Requests; got != 1 {
		t.Fatalf("own histories: long-horizon requests %v; want 1", got)
	}
	if got := merged.Demand().Arrivals.Stats(); got.Observations != 1 {
		t.Fatalf("the core's own arrivals: %+v; want the 1 local request", got)
	}
	if merged.Demand() == local.Demand() || merged.Attainment() == nil {
		t.Fatal("Demand/Attainment must be the core's own histories")
	}
	if _, err := New(DefaultConfig(), WithDemandReaders(arr, nil)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("one reader only: got %v; want ErrInvalidConfig", err)
	}
}

// Step at a time that is not a Unix time changes nothing: not the
// no-clock bound on evidence (it would refuse every record as ahead), not
// the clock-behind gauge, not the pending offers' marks, not the saved
// state (found by fuzz.FuzzCoreAPISequence).
func TestStepRefusesNonPositiveTime(t *testing.T) {
	c := newCore(t)
	defer c.Close()
	c.OfferStarted(t0)
	if err := c.OfferSized(t0, 100, 10); err != nil {
		t.Fatal(err)
	}
	c.OfferStarted(t0)
	d := c.Step(t0)
	for _, at := range []int64{0, -1} {
		if got := c.Step(at); got.Seq != 0 || got.Reason != controller.ReasonStepTime {
			t.Fatalf("step at %d: got seq %d %q; want a refused hold", at, got.Seq, got.Reason)
		}
	}
	if err := c.OfferSized(t0+2*sec, 100, 10); err != nil {
		t.Fatalf("a record after a refused step: %v", err)
	}
	if c.ClockBehindNs() != 0 || c.Stuck() || c.Demand().Pending() != 0 {
		t.Fatalf("refused steps moved the clock state: behind %d, pending %d", c.ClockBehindNs(), c.Demand().Pending())
	}
	st := c.Controller().State()
	if err := st.Validate(0); err != nil || st.Seq != d.Seq {
		t.Fatalf("saved state after refused steps: seq %d (want %d), %v", st.Seq, d.Seq, err)
	}
}
