package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// stationaryWorkload draws n requests with Poisson arrivals at ratePerS
// and shapes from shape: the mix and the rate never change, so any split
// the controller needs it needs from the start.
func stationaryWorkload(n int, ratePerS float64, seed uint64, shape func(*rand.Rand) (in, out int64)) []Request {
	rng := rand.New(rand.NewPCG(seed, 0x6e61727768616c))
	reqs := make([]Request, n)
	at := 0.0
	for i := range reqs {
		at += -math.Log(1-rng.Float64()) / ratePerS
		in, out := shape(rng)
		reqs[i] = Request{ArrivalNs: int64(at * 1e9), InputTokens: in, OutputTokens: out}
	}
	return reqs
}

// TestSteadyMixDoesNotOscillate is issue 6's "no oscillation" on the whole
// system: the simulated cluster, the real core and controller, 30 minutes
// of a stationary mix from the operator's 8:8, for two mixes and three
// seeds each. Prefill-heavy: the bundled Azure code trace's shapes,
// resampled, at a constant 34 req/s; the controller must reach its split
// within the first five minutes and then hold (no move after 300 s, none
// reversing another). Decode-heavy: prompts of 200-1500 tokens and
// outputs of 150-600 at 40 req/s, a load that keeps both phases near
// target pressure at the best split; there the controller still adjusts
// to the horizon's Poisson noise now and then (measured: 3-6 moves and
// 1-2 reversals in 30 minutes, benchmarks/slo/HISTORY.md), and the test
// only bounds that loosely: its first move toward decode, at most 8 moves
// and 2 reversals in all (the same controller with confirmation,
// hysteresis, cooldown and dwell all off stays inside it too; the
// prefill-heavy mix is the one that tells them apart: 8 moves and a
// reversal at every seed without them).
func TestSteadyMixDoesNotOscillate(t *testing.T) {
	code, err := BundledTrace()
	if err != nil {
		t.Fatal(err)
	}
	mixes := []struct {
		name   string
		rate   float64
		dir    string
		strict bool
		shape  func(*rand.Rand) (int64, int64)
	}{
		{"prefill-heavy (Azure code shapes)", 34, "decode_to_prefill", true, func(r *rand.Rand) (int64, int64) {
			s := code[r.IntN(len(code))]
			return s.InputTokens, s.OutputTokens
		}},
		{"decode-heavy", 40, "prefill_to_decode", false, func(r *rand.Rand) (int64, int64) {
			return 200 + r.Int64N(1301), 150 + r.Int64N(451)
		}},
	}
	seeds := []uint64{1, 2, 3}
	if raceDetector {
		// six 30-minute runs took 290 s of the sim package's 584 s under
		// -race on a 2-vCPU AMD EPYC (the default test timeout is 600 s);
		// one seed per mix keeps the controller's concurrency covered
		seeds = seeds[:1]
	}
	for _, mix := range mixes {
		for _, seed := range seeds {
			reqs := stationaryWorkload(int(mix.rate*1800), mix.rate, seed, mix.shape)
			cfg := testConfig("narwhal", 16)
			cfg.TTFTSLOS, cfg.Seed = 1.5, seed
			type mv struct {
				atS float64
				dir string
				n   int
			}
			var moves []mv
			var t0 int64
			res, err := Run(context.Background(), cfg, reqs, WithDecisionHook(func(d controller.Decision) {
				if t0 == 0 {
					t0 = d.AtNs
				}
				if len(d.Moves) > 0 {
					moves = append(moves, mv{float64(d.AtNs-t0) / 1e9, d.Direction, len(d.Moves)})
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			if len(moves) == 0 || moves[0].dir != mix.dir {
				t.Fatalf("%s, seed %d: moves %+v; want the first toward %s (the scenario must exercise the controller)", mix.name, seed, moves, mix.dir)
			}
			if !mix.strict {
				if len(moves) > 8 || res.Reversals > 2 {
					t.Errorf("%s, seed %d: %d moves, %d reversals in 30 minutes of a steady mix; want at most 8 and 2: %+v", mix.name, seed, len(moves), res.Reversals, moves)
				}
			}
			for i, m := range moves {
				if !mix.strict {
					break
				}
				if m.atS > 300 {
					t.Errorf("%s, seed %d: move %d at %.0f s after 300 s of a steady mix; all moves: %+v", mix.name, seed, i, m.atS, moves)
				}
				if m.dir != mix.dir {
					t.Errorf("%s, seed %d: move %d at %.0f s reverses the first; all moves: %+v", mix.name, seed, i, m.atS, moves)
				}
			}
			if mix.strict && res.Reversals != 0 {
				t.Errorf("%s, seed %d: %d reversals; want 0", mix.name, seed, res.Reversals)
			}
			t.Logf("%s, seed %d: SLO %.2f %%, moves %+v, mean engines %.2f / %.2f", mix.name, seed, 100*res.SLOAttainment, moves, res.MeanPrefillEngines, res.MeanDecodeEngines)
		}
	}
}

// TestReversalsAndQuickReversals: a move toward the role the previous
// move left is a reversal; within 60 s of it, a quick one.
func TestReversalsAndQuickReversals(t *testing.T) {
	s := &simulator{}
	for _, m := range []struct {
		atS float64
		to  controller.Role
	}{{0, controller.RolePrefill}, {5, controller.RolePrefill}, {30, controller.RoleDecode}, {200, controller.RolePrefill}, {259, controller.RoleDecode}, {400, controller.RoleDecode}} {
		s.now = int64(m.atS * 1e9)
		s.noteMove(m.to)
	}
	// reversals at 30 s (25 s after the last move: quick), 200 s (170 s
	// after), 259 s (59 s after: quick)
	if s.reversals != 3 || s.quickRevs != 2 {
		t.Fatalf("reversals %d, quick %d; want 3 and 2", s.reversals, s.quickRevs)
	}
}
