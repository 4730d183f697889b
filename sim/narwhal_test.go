package sim

import (
	"context"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

func TestNarwhalDrivesRealCore(t *testing.T) {
	reqs := syntheticWorkload(2000) // 300 s at ~6.7 req/s
	cfg := testConfig("narwhal", 8)
	cfg.TTFTSLOS = 1
	var decisions, withMoves int
	var lastSeq uint64
	var c *core.Core
	res, err := Run(context.Background(), cfg, reqs,
		WithDecisionHook(func(d controller.Decision) {
			decisions++
			if d.Seq <= lastSeq {
				t.Errorf("decision seq %d after %d", d.Seq, lastSeq)
			}
			lastSeq = d.Seq
			if len(d.Moves) > 0 {
				withMoves++
			}
		}),
		WithCoreReady(func(x *core.Core) { c = x }))
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		t.Fatal("WithCoreReady was not called")
	}
	if res.CoreErrors != 0 {
		t.Fatalf("facade calls failed: %d, last: %s", res.CoreErrors, res.LastCoreError)
	}
	if res.Completed != len(reqs) {
		t.Fatalf("unexpected completions; got %d; want %d", res.Completed, len(reqs))
	}
	// One Step per second of simulated time from the first arrival until
	// the last request ended.
	if want := int(res.SimSeconds); decisions < want || decisions > want+2 {
		t.Fatalf("unexpected decisions; got %d; want about %d (one per 1 s step)", decisions, want)
	}
	if res.Moves < withMoves {
		t.Fatalf("moves %d fewer than decisions with moves %d", res.Moves, withMoves)
	}
	// The core saw every engine, with the simulated profile's KV capacity.
	engs := c.Engines()
	if len(engs) != 8 {
		t.Fatalf("core knows %d engines; want 8", len(engs))
	}
	for _, e := range engs {
		if e.KVCapacityTokens != 212304 || e.Model != "facebook/opt-66b" {
			t.Fatalf("engine %s: capacity %d model %q; want 212304 facebook/opt-66b", e.ID, e.KVCapacityTokens, e.Model)
		}
	}
}

func TestPaceFollowsWallClock(t *testing.T) {
	reqs := []Request{{ArrivalNs: 0, InputTokens: 100, OutputTokens: 2}, {ArrivalNs: 2e9, InputTokens: 100, OutputTokens: 2}}
	cfg := testConfig("static:1", 2)
	res, err := Run(context.Background(), cfg, reqs, WithPace(100))
	if err != nil {
		t.Fatal(err)
	}
	// 2 s of virtual arrivals at 100× must take at least 20 ms of wall time.
	if res.WallSeconds < 0.02 {
		t.Fatalf("pace ignored; wall %.4fs; want ≥ 0.02s", res.WallSeconds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, cfg, reqs, WithPace(0.001)); err == nil {
		t.Fatal("a cancelled context did not stop a paced run")
	}
}

func TestNarwhalSameSeedSameResult(t *testing.T) {
	reqs := syntheticWorkload(1500)
	cfg := testConfig("narwhal", 6)
	run := func() Result {
		r, err := Run(context.Background(), cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		r.WallSeconds = 0
		r.Series = nil
		return *r
	}
	a, b := run(), run()
	if a.SLOAttainment != b.SLOAttainment || a.Moves != b.Moves || a.MeanPrefillEngines != b.MeanPrefillEngines || a.Events != b.Events {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
}

// TestPacedRunWithConcurrentReaders is the demo's situation: the replay
// drives the core while an HTTP server reads it from other goroutines.
func TestPacedRunWithConcurrentReaders(t *testing.T) {
	reqs := syntheticWorkload(200) // 30 s of arrivals
	cfg := testConfig("narwhal", 4)
	done := make(chan struct{})
	readerDone := make(chan int)
	_, err := Run(context.Background(), cfg, reqs, WithPace(1000),
		WithCoreReady(func(c *core.Core) {
			go func() {
				n := 0
				for {
					select {
					case <-done:
						readerDone <- n
						return
					default:
					}
					_ = c.State(cfg.StartUnixNs)
					_ = c.Decisions(0, 16)
					_ = c.Roles().Prefill
					n++
				}
			}()
		}))
	close(done)
	n := <-readerDone
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the concurrent reader never ran")
	}
}

// The controller's profile covers an overflow cohort's context: the
// largest input of one request plus the largest requested output of
// another, and an unbounded request at the default output.
func TestProfileRangeCoversOverflowCohort(t *testing.T) {
	reqs := []reqState{
		{Request: Request{InputTokens: 7000, EstInputTokens: 9000, OutputTokens: 10, ReqOutput: 256}},
		{Request: Request{InputTokens: 100, EstInputTokens: 90, OutputTokens: 1500, ReqOutput: 2048}},
	}
	in, ctx := profileRange(reqs, 256)
	if in != 9000 || ctx != 9000+2048 {
		t.Fatalf("range %d / %d, want 9000 / 11048", in, ctx)
	}
	if _, ctx := profileRange(reqs[:1], 512); ctx != 9000+512 {
		t.Fatalf("unbounded outputs: ctx %d, want 9512 (input + default output)", ctx)
	}
	ps, err := ControllerProfiles(mustProfile(t, DefaultProfile), in, ctx)
	if err != nil {
		t.Fatal(err)
	}
	prof := mustProfile(t, DefaultProfile)
	i, ok := ps.Lookup(prof.Model, prof.GPU)
	if !ok || !ps.Profiles[i].CoversDecode(ctx) || !ps.Profiles[i].CoversPrefill(in) {
		t.Fatalf("profile set %+v does not cover input %d, context %d", ps, in, ctx)
	}
}

func mustProfile(t *testing.T, name string) Profile {
	t.Helper()
	p, err := LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
