package controller

import (
	"fmt"
	"math"
	"testing"
)

// rolloutProfile: prefill takes a flat prefillS seconds per request
// (B = C = 0), decode a 10 ms step plus perSeq per sequence.
func rolloutProfile(prefillS, perSeq float64) Profile {
	return Profile{Model: "m", GPU: "g", Source: "test", HasPrefill: true, HasDecode: true,
		Prefill: PrefillFit{A: prefillS, MaxInput: 1 << 20},
		Decode:  DecodeFit{A: 0.01, PerSeq: perSeq, MaxBatch: 1 << 20, MaxCtxPerSeq: 1 << 20}}
}

// rolloutSnapshot builds a frozen snapshot by hand: np prefill engines
// each with queuedS of queued prefill, nd decode engines each holding
// seqs sequences and kv KV tokens of kvCap, demand of rate requests/s of
// 100-token prompts and output tokens of output on both horizons, TTFT
// SLO 5 s, TPOT SLO 0.1 s, the switch taking switchS.
func rolloutSnapshot(p Profile, np, nd int, queuedS float64, seqs, kv, kvCap int64, rate, output, switchS float64) *Snapshot {
	cfg := DefaultConfig()
	cfg.Scoring = ScoringRollout
	s := &Snapshot{AtNs: 1000 * sec, Config: cfg, SwitchS: switchS,
		Timing:   Timing{StepNs: sec, ShortNs: 10 * sec, LongNs: 60 * sec, TTFTSLOS: 5, TPOTSLOS: 0.1},
		Profiles: []Profile{p}, DecodeCorrection: 1, DecodeLoadCorrection: 1}
	for i := 0; i < np+nd; i++ {
		e := EngineView{ID: fmt.Sprintf("e%02d", i), Role: RolePrefill, State: StateServing, Live: true, KVCapacityTokens: kvCap, HasProfile: true}
		if i < np {
			e.Resident.QueuedPrefillS = queuedS
		} else {
			e.Role = RoleDecode
			e.Resident.DecodeSeqs, e.Resident.KVTokens = seqs, kv
		}
		s.Engines = append(s.Engines, e)
	}
	for _, h := range []*HorizonDemand{&s.Short, &s.Long} {
		*h = HorizonDemand{RatePerS: rate, Requests: rate * 60, MeanInput: 100, MeanInputSq: 100 * 100, MeanOutput: output,
			DecodeCtx: 100 + output/2, FeasibleShare: 1, FeasibleMeanInput: 100, FeasibleMeanInputSq: 100 * 100, SpanS: 60}
	}
	s.Short.SpanS = 10
	s.prepare()
	return s
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want)) }

// A queue that drains in k seconds: 20 requests ahead of a pool serving
// 20/s wait 1 s; an engine adding 20/s at 0.5 s serves the last 10 at
// 40/s, 0.25 s more.
func TestRolloutDrainTime(t *testing.T) {
	if got := drainTime(20, 0, 20, nil, 0, 1); !near(got, 1, 1e-12) {
		t.Fatalf("drain 20 requests at 20/s: %v s, want 1", got)
	}
	join := []rolloutEvent{{At: 0.5, Prefill: true, Mu: [2]float64{20, 20}}}
	if got := drainTime(20, 0, 20, join, 0, 1); !near(got, 0.75, 1e-12) {
		t.Fatalf("with a join at 0.5 s: %v s, want 0.75", got)
	}
	// Decode engines joining do not serve prefill.
	dec := []rolloutEvent{{At: 0.5, Cap: [2]float64{99, 99}}}
	if got := drainTime(20, 0, 20, dec, 0, 1); !near(got, 1, 1e-12) {
		t.Fatalf("a decode join changed the prefill drain: %v s", got)
	}
	// No engine until one joins at 0.5 s: the queue waits for it.
	if got := drainTime(20, 0, 0, join, 0, 1); !near(got, 1.5, 1e-12) {
		t.Fatalf("no engine until 0.5 s: %v s, want 0.5 + 1", got)
	}
	if got := drainTime(5, 0, 0, nil, 0, 1); !math.IsInf(got, 1) {
		t.Fatalf("no engine ever: %v, want +Inf", got)
	}
	if got := drainTime(0, 7, 0, nil, 0, 1); got != 0 {
		t.Fatalf("empty queue: %v, want 0", got)
	}
}

// Two prefill engines of 1 s per request hold 5 s of queue each (10
// requests at 1 request/s per engine) while 1 request/s arrives: the
// first arrival waits 10/2 = 5 s plus its own 1 s (ρ = 0.5 adds no
// median wait), TTFT 6 s = 1.2 × the SLO; the queue drains at a net
// 1 request/s in 10 s, so the rollout leaves no backlog and a split with
// an extra prefill engine it cannot get in time saves nothing.
func TestRolloutPrefillQueueDrains(t *testing.T) {
	s := rolloutSnapshot(rolloutProfile(1, 0.0001), 2, 2, 5, 0, 0, 100000, 1, 10, 30)
	if s.Basis != BasisOfferedDemand {
		t.Fatalf("basis %s", s.Basis)
	}
	sc := s.Split(0)
	if !near(sc.PrefillPressure, 1.2, 1e-9) || !near(sc.ShortPrefill, 1.2, 1e-9) || !near(sc.LongPrefill, 1.2, 1e-9) {
		t.Fatalf("prefill pressure %v (short %v, long %v), want 1.2", sc.PrefillPressure, sc.ShortPrefill, sc.LongPrefill)
	}
	// After the drain the pool is at ρ = 0.5: most arrivals meet the SLO.
	if sc.MissShare <= 0 || sc.MissShare > 0.2 {
		t.Fatalf("miss share %v, want in (0, 0.2]", sc.MissShare)
	}
	if sc.Score != sc.MissShare {
		t.Fatalf("score %v, want the miss share %v at no move", sc.Score, sc.MissShare)
	}
	// The horizon: the long span past the switch.
	if got := s.rolloutHorizonS(); got != 90 {
		t.Fatalf("horizon %v s, want 60 + 30", got)
	}
}

// A split that waits out a switch delay: 100 requests queued on two
// prefill engines (1 request/s each); a decode engine moved to prefill
// (no resident sequences, so no drain) joins after the 40 s switch, having
// no effect before: by then 80 requests are served, the last 20 take 20/3
// s at 3/s. The first arrival's TTFT is 46.67 + 1 s, not 100/3 + 1 s as
// if the engine were there at once.
func TestRolloutWaitsOutSwitch(t *testing.T) {
	s := rolloutSnapshot(rolloutProfile(1, 0.0001), 2, 2, 50, 0, 0, 100000, 0.5, 10, 40)
	ev := s.rolloutEvents(1)
	if len(ev) != 1 || ev[0].At != 40 || !ev[0].Prefill || ev[0].Mu[1] != 1 {
		t.Fatalf("events %+v, want one prefill engine of 1 request/s at 40 s", ev)
	}
	if got := drainTime(100, 0, 2, ev, 1, 1); !near(got, 40+20.0/3, 1e-12) {
		t.Fatalf("drain %v s, want %v", got, 40+20.0/3)
	}
	p0, p1 := s.Split(0), s.Split(1)
	if !near(p0.PrefillPressure, 51.0/5, 1e-9) {
		t.Fatalf("current split prefill pressure %v, want (50 + 1) / 5", p0.PrefillPressure)
	}
	if want := (40 + 20.0/3 + 1) / 5; !near(p1.PrefillPressure, want, 1e-9) {
		t.Fatalf("one engine to prefill: pressure %v, want %v", p1.PrefillPressure, want)
	}
	if cf := s.closedSplit(1); cf.PrefillPressure >= p1.PrefillPressure {
		t.Fatalf("the closed form (engine there at once) predicts %v, want below the rollout's %v", cf.PrefillPressure, p1.PrefillPressure)
	}
}

// KV overflow during the drain: two decode engines of 10,000 KV tokens
// hold 4,000 each (10 sequences: too few for the KV correction); prefill delivers 1 request/s of 105-token contexts that
// hardly leave. Both engines take the 90 s of arrivals (9,450 tokens
// more). With one moved to prefill, the one left fills up after about 57
// s and the rest stall: predicted KV need 4,000 + 9,450, over the 10,000
// capacity, and the stalled requests count as misses.
func TestRolloutKVOverflowDuringDrain(t *testing.T) {
	s := rolloutSnapshot(rolloutProfile(0.1, 0.0001), 1, 2, 0, 10, 4000, 10000, 1, 1e6, 30)
	// The decode context is 100 + output/2; pin it to 105 tokens.
	s.Short.DecodeCtx, s.Long.DecodeCtx = 105, 105
	s.prepare()
	stay, move := s.Split(0), s.Split(1)
	if stay.KVCapacityTokens != 20000 || move.KVCapacityTokens != 10000 {
		t.Fatalf("capacities %v, %v", stay.KVCapacityTokens, move.KVCapacityTokens)
	}
	if !near(stay.KVNeedTokens, 8000+90*105, 0.01) {
		t.Fatalf("current split KV need %v, want about %v", stay.KVNeedTokens, 8000+90*105)
	}
	if !near(move.KVNeedTokens, 4000+90*105, 0.01) || move.DecodePressure < 1.3 {
		t.Fatalf("after the move: KV need %v (want about %v), decode pressure %v (want >= 1.3)", move.KVNeedTokens, 4000+90*105, move.DecodePressure)
	}
	if stay.MissShare > 0.01 {
		t.Fatalf("current split misses %v, want about none", stay.MissShare)
	}
	// A third of the horizon's requests stall, and the stall is left
	// behind when the rollout ends.
	if move.MissShare < 1.0/3 {
		t.Fatalf("split with KV overflow misses %v, want >= 1/3", move.MissShare)
	}
	if best, _ := s.Best(); best.Moves != 0 {
		t.Fatalf("best moves %d, want 0", best.Moves)
	}
}

// Controller level: a prefill backlog that the switch delay makes
// unreachable. The closed form scores the split where the moves land and
// moves a decode engine to prefill; the rollout sees that the engine
// arrives after 170 s, when the pool has drained the backlog itself, and
// holds.
const cfgMissMargin = 0.03

func TestRolloutHoldsForUnreachableBacklog(t *testing.T) {
	ps, err := NewProfileSet(rolloutProfile(1, 0.0001))
	if err != nil {
		t.Fatal(err)
	}
	run := func(scoring string) Decision {
		cfg := testConfig()
		cfg.Scoring, cfg.SwitchS = scoring, 170
		tm := testTiming()
		tm.TTFTSLOS = 5
		c, err := New(cfg, tm, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			e := Engine{ID: fmt.Sprintf("e%d", i), Model: "m", GPU: "g", Role: RolePrefill, Live: true, KVCapacityTokens: 100000}
			if i >= 2 {
				e.Role = RoleDecode
			} else {
				e.Resident.QueuedPrefillS = 50
			}
			if err := c.UpsertEngine(e); err != nil {
				t.Fatal(err)
			}
		}
		return c.Step(1000*sec, Inputs{Arrivals: steady(100, 10, 0.5), Outputs: steady(10, 10, 0.5)})
	}
	cf := run(ScoringClosedForm)
	if cf.Action != ActionMove || cf.Direction != "decode_to_prefill" {
		t.Fatalf("closed form: %s %s (%s), want a move to prefill", cf.Action, cf.Direction, cf.Reason)
	}
	ro := run(ScoringRollout)
	if ro.Action != ActionHold || ro.Improvement > cfgMissMargin {
		t.Fatalf("rollout: %s, best %d, improvement %v (%s), want hold", ro.Action, ro.Best.Moves, ro.Improvement, ro.Reason)
	}
	if ro.Current.MissShare <= 0 || ro.Current.PrefillPressure <= 1 {
		t.Fatalf("rollout journal: miss share %v, prefill pressure %v: want the backlog's misses and pressure", ro.Current.MissShare, ro.Current.PrefillPressure)
	}
}

// The switch time the rollout assumes is the measured one once moves
// complete: move start to MoveDone, less the drain the decision saw.
func TestRolloutMeasuresSwitchTime(t *testing.T) {
	cfg := testConfig()
	cfg.Scoring, cfg.SwitchS = ScoringRollout, 30
	rec := &recordingActuator{}
	c := newTestController(t, cfg, 1, 3, WithActuator(rec))
	in := Inputs{Arrivals: steady(2000, 10, 40), Outputs: steady(10, 10, 40)}
	if s := c.Snapshot(1000*sec, in); s.SwitchS != 30 {
		t.Fatalf("switch %v before any move, want the switch_s setting", s.SwitchS)
	}
	var d Decision
	at := 1000 * sec
	for i := 0; i < 5 && d.Action != ActionMove; i++ {
		at += sec
		d = c.Step(at, in)
	}
	if d.Action != ActionMove {
		t.Fatalf("no move to measure: %s (%s)", d.Action, d.Reason)
	}
	for _, m := range d.Moves {
		c.MoveDone(m.EngineID, at+12*sec, nil)
	}
	if s := c.Snapshot(at+13*sec, in); !near(s.SwitchS, 12, 1e-9) {
		t.Fatalf("switch %v after a 12 s move from an engine without drain, want 12", s.SwitchS)
	}
}

func TestScoringConfigValidated(t *testing.T) {
	for _, tc := range []struct {
		mut   func(*Config)
		field string
	}{
		{func(c *Config) { c.Scoring = "fluid" }, "controller.scoring"},
		{func(c *Config) { c.Scoring = "" }, "controller.scoring"},
		{func(c *Config) { c.MissMargin = -0.01 }, "controller.miss_margin"},
		{func(c *Config) { c.MissMargin = 1 }, "controller.miss_margin"},
		{func(c *Config) { c.SwitchS = math.NaN() }, "controller.switch_s"},
		{func(c *Config) { c.SwitchS = 4000 }, "controller.switch_s"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		err := c.Validate()
		if err == nil || !contains(err.Error(), tc.field) {
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// The tails: a normal's P(X > mean + y), and the exponentially modified
// Gaussian's against its limits.
func TestRolloutTails(t *testing.T) {
	if got := normalTail(0, 1); !near(got, 0.5, 1e-12) {
		t.Fatalf("normalTail(0) = %v", got)
	}
	if got := normalTail(1.959963985, 1); !near(got, 0.025, 1e-6) {
		t.Fatalf("normalTail(1.96) = %v, want 0.025", got)
	}
	if normalTail(-1, 0) != 1 || normalTail(1, 0) != 0 {
		t.Fatal("step at sd 0")
	}
	// sd → 0: the exponential's own tail exp(−θy).
	if got := emgTail(2, 0, 0.5); !near(got, math.Exp(-1), 1e-12) {
		t.Fatalf("emgTail(2; sd 0, θ 0.5) = %v, want e^-1", got)
	}
	if got := emgTail(2, 1e-6, 0.5); !near(got, math.Exp(-1), 1e-5) {
		t.Fatalf("emgTail(2; sd 1e-6, θ 0.5) = %v, want about e^-1", got)
	}
	// Adding a nonnegative wait can only raise the tail.
	for _, y := range []float64{-3, -1, 0, 0.5, 2, 5} {
		if emgTail(y, 1, 2) < normalTail(y, 1) {
			t.Fatalf("emgTail(%v) below the normal's tail", y)
		}
	}
}

// BenchmarkStep32 is one controller step over 32 engines (16 prefill with
// a queue, 16 decode holding sequences) under both scorings, in the same
// binary: the rollout simulates 33 candidate splits × 2 horizons × 64
// steps, plus the gates' re-scoring of the proposed splits.
func BenchmarkStep32(b *testing.B) {
	for _, scoring := range []string{ScoringClosedForm, ScoringRollout} {
		b.Run(scoring, func(b *testing.B) {
			cfg := testConfig()
			cfg.Scoring = scoring
			cfg.CooldownS = 1e6 // measure scoring and gates, not a stream of moves
			c := newTestController(b, cfg, 16, 16)
			setResident(b, c, RolePrefill, 0, Resident{QueuedPrefillS: 2, RunningPrefillS: 0.2}, 66144)
			setResident(b, c, RoleDecode, 0, Resident{DecodeSeqs: 24, KVTokens: 30000}, 66144)
			in := Inputs{Arrivals: steady(1500, 200, 60), Outputs: steady(200, 180, 60),
				ObservedPrefill: PhaseObservation{Count: 100, Mean: 0.7}, ObservedDecode: PhaseObservation{Count: 100, Mean: 0.6}}
			at := 1000 * sec
			c.Step(at, in)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				at += sec
				c.Step(at, in)
			}
		})
	}
}

// The measured-prefill correction by hand: 4 engines serving 10
// requests/s (S = 0.4 s) at 8 requests/s (ρ = 0.8) predict a mean TTFT of
// S/(1−ρ) = 2 s. Measured 0.1 s, six times that (0.6 s) is still below
// the prediction: k = ρ + S/0.6 = 0.8 + 2/3, and then S/(k−ρ) = 0.6 s.
func TestMeasuredPrefillScale(t *testing.T) {
	if got := measuredPrefillScale(8, 10, 4, 0.1); !near(got, 0.8+0.4/0.6, 1e-12) {
		t.Fatalf("scale %v, want %v", got, 0.8+0.4/0.6)
	}
	// Within prefillContradiction of the measurement: no correction.
	if got := measuredPrefillScale(8, 10, 4, 2.0/prefillContradiction); got != 1 {
		t.Fatalf("prediction at the bound: scale %v, want 1", got)
	}
	// Never upward: a measurement above the prediction changes nothing.
	if got := measuredPrefillScale(8, 10, 4, 30); got != 1 {
		t.Fatalf("measured above the prediction: scale %v, want 1", got)
	}
	// Bounded, and no correction without a pool, a rate or a measurement.
	if got := measuredPrefillScale(1e6, 10, 4, 0.01); got != maxPrefillScale {
		t.Fatalf("scale %v, want the bound %v", got, maxPrefillScale)
	}
	for _, c := range [][4]float64{{8, 10, 0, 0.1}, {8, 0, 4, 0.1}, {0, 10, 4, 0.1}, {8, 10, 4, 0}, {8, math.Inf(1), 4, 0.1}} {
		if got := measuredPrefillScale(c[0], c[1], int(c[2]), c[3]); got != 1 {
			t.Fatalf("measuredPrefillScale%v = %v, want 1", c, got)
		}
	}
}

// In a snapshot: two 1 s prefill engines at 1.9 requests/s (ρ = 0.95)
// predict a 20 s mean TTFT; 80 observations at 0.2 × the 5 s SLO (1 s)
// contradict it, so the rollout divides the prefill work by
// 0.95 + 1/6 and predicts fewer misses. Not under the closed form, not
// with too few observations, and not while the pool measures a queue
// past the SLO.
func TestRolloutPrefillMeasuredCorrection(t *testing.T) {
	build := func(scoring string, queuedS float64, obs int64) *Snapshot {
		s := rolloutSnapshot(rolloutProfile(1, 0.0001), 2, 2, queuedS, 0, 0, 100000, 1.9, 10, 30)
		s.Config.Scoring = scoring
		s.ObservedPrefill = PhaseObservation{Count: obs, Mean: 0.2, Max: 0.5}
		s.prepare()
		return s
	}
	plain := build(ScoringRollout, 0, 0)
	fixed := build(ScoringRollout, 0, 80)
	want := 0.95 + 1.0/(prefillContradiction*1)
	for h := 0; h < 2; h++ {
		if plain.prefillScale[h] != 1 || !near(fixed.prefillScale[h], want, 1e-9) {
			t.Fatalf("horizon %d: scale %v without observations (want 1), %v with (want %v)", h, plain.prefillScale[h], fixed.prefillScale[h], want)
		}
	}
	a, b := plain.Split(0), fixed.Split(0)
	if !(b.MissShare < a.MissShare) || !(b.LongPrefill < a.LongPrefill) {
		t.Fatalf("corrected split: miss %v, long prefill %v; uncorrected %v, %v: want both lower", b.MissShare, b.LongPrefill, a.MissShare, a.LongPrefill)
	}
	if s := build(ScoringClosedForm, 0, 80); s.prefillScale != [2]float64{1, 1} {
		t.Fatalf("closed form: scale %v, want none", s.prefillScale)
	}
	// 6 s queued per engine, past the 5 s SLO: the pool is behind.
	if s := build(ScoringRollout, 6, 80); !s.prefillBehind || s.prefillScale != [2]float64{1, 1} {
		t.Fatalf("behind %v: scale %v, want none", s.prefillBehind, s.prefillScale)
	}
}

// Past fullScanSplits candidates the rollout's Best searches coarse to
// fine and NeededDecodeEngines bisects: on a 200-engine fleet whose
// prefill pool is short (a queue and a prefill-heavy load), both agree
// with scoring every split, and the best split is a multi-engine move
// that only the finer grids find exactly.
func TestRolloutLargeFleetSearchMatchesFullScan(t *testing.T) {
	for _, tc := range []struct {
		name            string
		np, nd          int
		queued, rate    float64
		seqs            int64
		wantPrefillMove bool
	}{
		{"prefill short", 40, 160, 20, 300, 4, true},
		{"decode short", 160, 40, 0, 20, 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rolloutSnapshot(rolloutProfile(0.2, 0.0005), tc.np, tc.nd, tc.queued, tc.seqs, tc.seqs*300, 1<<22, tc.rate, 200, 10)
			if n := s.MaxMoves() - s.MinMoves() + 1; n <= fullScanSplits {
				t.Fatalf("%d candidates: the test needs more than %d", n, fullScanSplits)
			}
			best, cur := s.Best()
			want := cur
			for j := s.MinMoves(); j <= s.MaxMoves(); j++ {
				if sc := s.Split(j); sc.Score < want.Score || (sc.Score == want.Score && abs(j) < abs(want.Moves)) {
					want = sc
				}
			}
			if best.Moves != want.Moves {
				t.Fatalf("coarse-to-fine best %d moves (score %v), full scan %d (score %v)", best.Moves, best.Score, want.Moves, want.Score)
			}
			if tc.wantPrefillMove != (best.Moves > 1) || (!tc.wantPrefillMove && best.Moves > -2) {
				t.Fatalf("best %d moves: want a multi-engine move toward the short pool", best.Moves)
			}
			for h := 0; h < 2; h++ {
				linear := s.PrefillEngines + s.DecodeEngines
				for j := s.MaxMoves(); j >= s.MinMoves(); j-- {
					if n, ok := s.decodeWithinTarget(j, h); ok {
						linear = n
						break
					}
				}
				if got := s.NeededDecodeEngines(h); got != linear {
					t.Fatalf("horizon %d: bisection needs %d decode engines, a full scan %d", h, got, linear)
				}
			}
		})
	}
}

// Reusing a step's TTFT tail while its arguments repeat changes no score:
// with the queue empty (the same slack every step) and decode engines
// joining the prefill pool mid-rollout (a new service rate, own time and
// load), every split scores exactly as when every step computes its tail.
func TestRolloutTailReuseChangesNothing(t *testing.T) {
	s := rolloutSnapshot(rolloutProfile(0.2, 0.0001), 4, 4, 0, 10, 4000, 100000, 15, 200, 5)
	defer func() { rolloutReuseTail = true }()
	for j := s.MinMoves(); j <= s.MaxMoves(); j++ {
		rolloutReuseTail = true
		reused := s.rolloutSplit(j)
		rolloutReuseTail = false
		fresh := s.rolloutSplit(j)
		if reused != fresh {
			t.Fatalf("split %d: with the tail reused %+v, computed every step %+v", j, reused, fresh)
		}
	}
	// the scenario does exercise it: engines joining change the scores
	if a, b := s.rolloutSplit(0), s.rolloutSplit(2); a.MissShare == b.MissShare {
		t.Fatalf("two engines joining prefill left the miss share at %v", a.MissShare)
	}
}
