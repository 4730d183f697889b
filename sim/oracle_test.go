package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A workload whose mix turns over halfway: prompt-heavy (long inputs,
// a few output tokens), then decode-heavy (short inputs, long outputs).
func mixTurnover() []Request {
	var reqs []Request
	for i := 0; i < 2400; i++ { // 8 per second for 300 s
		reqs = append(reqs, Request{ArrivalNs: int64(i) * 1e9 / 8, InputTokens: 3000 + int64(i%7)*100, OutputTokens: 4})
	}
	for i := 0; i < 1800; i++ { // then 6 per second for 300 s
		reqs = append(reqs, Request{ArrivalNs: 300e9 + int64(i)*1e9/6, InputTokens: 100 + int64(i%5)*20, OutputTokens: 1500})
	}
	return reqs
}

// The hindsight schedule follows a mix that turns over: it beats every
// static split, its schedule moves toward prefill first and toward decode
// after the turn, and the schedule it reports reproduces its result.
func TestOracleScheduleFollowsTheMix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few hundred simulations")
	}
	reqs := mixTurnover()
	cfg := testConfig("oracle", 6)
	cfg.TTFTSLOS, cfg.TPOTSLOS = 2, 0.1
	or, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = "static-best"
	sb, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range sb.Splits {
		t.Logf("static:%d %.4f", sp.Prefill, sp.SLOAttainment)
	}
	t.Logf("oracle %.4f (%s), static-best %.4f (static:%d)", or.SLOAttainment, or.Schedule, sb.SLOAttainment, *sb.BestSplit)
	if or.SLOAttainment < sb.SLOAttainment+0.05 {
		t.Fatalf("oracle %.4f; want at least static-best %.4f + 5 pt on a mix that turns over", or.SLOAttainment, sb.SLOAttainment)
	}
	moves := strings.Split(or.Schedule, ",")
	first, last := parseMove(t, moves[0]), parseMove(t, moves[len(moves)-1])
	if first.target <= 3 || first.atNs >= 300e9 {
		t.Errorf("first move %q; want one toward prefill (from 3:3) before the turn at 300 s", moves[0])
	}
	if last.target >= first.target || last.atNs < 240e9 {
		t.Errorf("last move %q; want one toward decode, near or after the turn at 300 s", moves[len(moves)-1])
	}
	cfg.Policy = "scheduled:" + or.Schedule
	re, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if re.SLOAttainment != or.SLOAttainment || re.Moves != or.Moves {
		t.Fatalf("scheduled:%s gives %.4f with %d moves; the oracle reported %.4f with %d", or.Schedule, re.SLOAttainment, re.Moves, or.SLOAttainment, or.Moves)
	}
	if or.Policy != "oracle" {
		t.Errorf("policy %q; want oracle", or.Policy)
	}
}

func parseMove(t *testing.T, m string) scheduledMove {
	t.Helper()
	spec, err := parsePolicy("scheduled:"+m, 6)
	if err != nil || len(spec.moves) != 1 {
		t.Fatalf("move %q: %v", m, err)
	}
	return spec.moves[0]
}

// A cancelled context stops the search with the context's error.
func TestOracleStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := testConfig("oracle", 6)
	if _, err := Run(ctx, cfg, mixTurnover()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v; want context.Canceled", err)
	}
}
