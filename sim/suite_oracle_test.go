package sim

import (
	"context"
	"math"
	"strings"
	"testing"
)

// The suite's hindsight schedule: on the quick suite's shifting scenario
// (a regime change inside ten minutes) it beats static-best, its schedule
// reproduces its attainment from static-best's split, the summary's
// oracle column is the difference of the two attainments and narwhal's
// VsOracle the difference of narwhal's and the oracle's; the second run
// takes the oracle from the cache, a stale key recomputes it, and a run
// without Oracle reports nothing of it but keeps it cached.
func TestSuiteOracleHeadroomAndCache(t *testing.T) {
	src := testSources(t)
	cache := map[string]SuiteBaseline{}
	o := SuiteOptions{Sources: src, Variants: []SuiteVariant{{Name: "narwhal"}}, Parallel: 2, Baselines: cache, Oracle: true}
	res, err := RunSuite(context.Background(), QuickSuite(), o)
	if err != nil {
		t.Fatal(err)
	}
	shift, still := res[0], res[1]
	if !shift.Scenario.Shifts() || still.Scenario.Shifts() || shift.Oracle == nil || still.Oracle == nil {
		t.Fatalf("results: %+v / %+v", shift.Oracle, still.Oracle)
	}
	sb, or := shift.Baseline.StaticBest, shift.Oracle.Outcome.Attainment
	t.Logf("shifting: static-best %.4f (static:%d), oracle %.4f (%s, %d runs); stationary: static-best %.4f, oracle %.4f",
		sb, shift.Baseline.BestSplit, or, shift.Oracle.Schedule, shift.Oracle.Runs, still.Baseline.StaticBest, still.Oracle.Outcome.Attainment)
	if or <= sb || shift.Oracle.Outcome.Moves == 0 || shift.Oracle.StartSplit != shift.Baseline.BestSplit {
		t.Fatalf("shifting scenario: oracle %+v; want above static-best %.4f with moves from static:%d", shift.Oracle, sb, shift.Baseline.BestSplit)
	}
	if still.Oracle.Outcome.Attainment < still.Baseline.StaticBest {
		t.Fatalf("stationary: oracle %.4f below static-best %.4f it starts from", still.Oracle.Outcome.Attainment, still.Baseline.StaticBest)
	}
	if got, want := shift.Oracle.VsStaticBest, 100*(or-sb); got != want {
		t.Fatalf("VsStaticBest %v; want %v", got, want)
	}
	// The schedule is a real one: scheduled:<Schedule> from static-best's
	// split on the scenario's workload gives the oracle's attainment.
	cfg, reqs := scenarioReplay(t, src, shift)
	cfg.InitialPrefill, cfg.Policy = shift.Baseline.BestSplit, "scheduled:"+shift.Oracle.Schedule
	re, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if re.SLOAttainment != or {
		t.Fatalf("scheduled:%s gives %.4f; the oracle reported %.4f", shift.Oracle.Schedule, re.SLOAttainment, or)
	}
	// The summary: an oracle row per group with oracle − static-best, and
	// narwhal − oracle on narwhal's row.
	rows := SummarizeSuite(res, []string{"narwhal"})
	byKey := map[string]SuiteRow{}
	for _, r := range rows {
		byKey[r.Policy+" "+r.Group] = r
	}
	ors, nws := byKey["oracle tune/shifting"], byKey["narwhal tune/shifting"]
	if ors.N != 1 || ors.VsStaticBest.Mean != 100*(or-sb) || ors.VsStaticBest.P10 != 100*(or-sb) || ors.VsThreshold != nil || ors.VsOracle != nil {
		t.Fatalf("oracle row %+v; want oracle − static-best %.4f", ors, 100*(or-sb))
	}
	nwAtt := shift.Narwhal["narwhal"].Attainment
	if nws.VsOracle == nil || nws.VsOracle.Mean != 100*(nwAtt-or) {
		t.Fatalf("narwhal row vs oracle %+v; want %.4f", nws.VsOracle, 100*(nwAtt-or))
	}
	all := byKey["oracle all/all"]
	wantMean := (100*(or-sb) + 100*(still.Oracle.Outcome.Attainment-still.Baseline.StaticBest)) / 2
	if all.N != 2 || math.Abs(all.VsStaticBest.Mean-wantMean) > 1e-9 {
		t.Fatalf("oracle all/all %+v; want mean %.4f", all.VsStaticBest, wantMean)
	}
	var b strings.Builder
	if err := WriteSuiteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "− oracle: mean") || !strings.Contains(b.String(), "| tune/shifting | oracle | 1 |") {
		t.Fatalf("table:\n%s", b.String())
	}
	b.Reset()
	if err := WriteOracleTable(&b, res, "narwhal"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), shift.Scenario.Name) || strings.Count(b.String(), "\n") != 4 {
		t.Fatalf("oracle table:\n%s", b.String())
	}

	// The cache is hit: a marked cached attainment comes back.
	for k, bl := range cache {
		if bl.Oracle == nil || bl.Oracle.Key != oracleKey(k, bl.BestSplit) {
			t.Fatalf("cache %s: oracle %+v", k, bl.Oracle)
		}
		bl.Oracle.Outcome.Attainment = 0.123
		cache[k] = bl
	}
	res2, err := RunSuite(context.Background(), QuickSuite(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res2 {
		if r.Oracle.Outcome.Attainment != 0.123 {
			t.Fatalf("%s: cached oracle not used: %+v", r.Scenario.Name, r.Oracle)
		}
	}
	// A stale key (another search, start or scenario) recomputes it.
	k := BaselineKey(res[0].Scenario, src)
	bl := cache[k]
	bl.Oracle.Key = "stale"
	cache[k] = bl
	res3, err := RunSuite(context.Background(), QuickSuite()[:1], o)
	if err != nil {
		t.Fatal(err)
	}
	if res3[0].Oracle.Outcome.Attainment != or || cache[k].Oracle.Key != oracleKey(k, bl.BestSplit) {
		t.Fatalf("stale oracle: %+v, cached key %s", res3[0].Oracle, cache[k].Oracle.Key)
	}
	// A changed switch time is another baseline key, so another oracle key.
	sc := QuickSuite()[0]
	sc.SwitchS += 20
	if BaselineKey(sc, src) == k || oracleKey(BaselineKey(sc, src), bl.BestSplit) == oracleKey(k, bl.BestSplit) ||
		oracleKey(k, bl.BestSplit+1) == oracleKey(k, bl.BestSplit) {
		t.Fatal("oracle key does not follow the switch time or the starting split")
	}
	// Without Oracle: nothing of it reported, the cached one kept.
	o.Oracle = false
	res4, err := RunSuite(context.Background(), QuickSuite(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res4 {
		if r.Oracle != nil || r.Baseline.Oracle != nil {
			t.Fatalf("%s: oracle reported without the option", r.Scenario.Name)
		}
		if cache[BaselineKey(r.Scenario, src)].Oracle == nil {
			t.Fatalf("%s: cached oracle dropped by a run without the option", r.Scenario.Name)
		}
	}
	for _, r := range SummarizeSuite(res4, []string{"narwhal"}) {
		if r.Policy == "oracle" || r.VsOracle != nil {
			t.Fatalf("summary without the option: %+v", r)
		}
	}
}

// lateSchedule shifts every move of a cached schedule, keeps a static
// one static and refuses one the scheduled policy would refuse.
func TestLateScheduleShiftsEveryMove(t *testing.T) {
	for _, c := range []struct {
		in   string
		late int
		want string
	}{
		{"5@60,6@120,4@1800", 30, "scheduled:5@90,6@150,4@1830"},
		{"3@0", 60, "scheduled:3@60"},
		{"3@0.5", 10, "scheduled:3@10.5"},
		{"static:7", 30, "static:7"},
	} {
		if got, err := lateSchedule(c.in, 8, c.late); err != nil || got != c.want {
			t.Errorf("lateSchedule(%q, 8, %d) = %q, %v; want %q", c.in, c.late, got, err, c.want)
		}
	}
	for _, bad := range []string{"5@x", "5@60,4@30", "9@60", "", "5"} {
		if got, err := lateSchedule(bad, 8, 30); err == nil {
			t.Errorf("lateSchedule(%q, 8, 30) = %q; want an error", bad, got)
		}
	}
}

// The late oracle (SuiteOptions.OracleLateS): on the quick suite's
// shifting scenario it is the oracle's schedule run that many seconds
// late from static-best's split (the same attainment as that scheduled
// run), it reports its difference to static-best, and the summary and
// table carry an "oracle_late" row that is not taken for a narwhal
// variant in the acceptance lines.
func TestSuiteOracleLate(t *testing.T) {
	src := testSources(t)
	o := SuiteOptions{Sources: src, Variants: []SuiteVariant{{Name: "narwhal"}}, Parallel: 2, Baselines: map[string]SuiteBaseline{}, Oracle: true, OracleLateS: 60}
	res, err := RunSuite(context.Background(), QuickSuite(), o)
	if err != nil {
		t.Fatal(err)
	}
	shift := res[0]
	if shift.Oracle == nil || shift.Oracle.Late == nil || shift.Oracle.LateS != 60 {
		t.Fatalf("late oracle missing: %+v", shift.Oracle)
	}
	cfg, reqs := scenarioReplay(t, src, shift)
	cfg.InitialPrefill = shift.Baseline.BestSplit
	if cfg.Policy, err = lateSchedule(shift.Oracle.Schedule, cfg.Engines, 60); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Policy, "scheduled:") {
		t.Fatalf("the quick shifting scenario's oracle makes no move: %s", cfg.Policy)
	}
	r, err := Run(context.Background(), cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	late := shift.Oracle.Late.Attainment
	if late != r.SLOAttainment {
		t.Fatalf("late oracle %.4f; %s from static:%d gives %.4f", late, cfg.Policy, shift.Baseline.BestSplit, r.SLOAttainment)
	}
	if late == shift.Oracle.Outcome.Attainment {
		t.Fatalf("a minute late changes nothing (%.4f): not replayed late", late)
	}
	if got, want := shift.Oracle.LateVsStaticBest, 100*(late-shift.Baseline.StaticBest); got != want {
		t.Fatalf("LateVsStaticBest %v; want %v", got, want)
	}
	rows := SummarizeSuite(res, []string{"narwhal"})
	var lr *SuiteRow
	for i := range rows {
		if rows[i].Policy == "oracle_late" && rows[i].Group == "tune/shifting" {
			lr = &rows[i]
		}
	}
	if lr == nil || lr.N != 1 || lr.VsStaticBest.Mean != 100*(late-shift.Baseline.StaticBest) || lr.VsThreshold != nil {
		t.Fatalf("oracle_late row %+v", lr)
	}
	var b strings.Builder
	if err := WriteSuiteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| tune/shifting | oracle_late | 1 |") || strings.Contains(b.String(), "- oracle_late:") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// scenarioReplay is a suite result's scenario as the suite ran it: its
// config at the cached SLOs and its workload at the cached rate scale.
func scenarioReplay(t *testing.T, src map[string]ShapeSource, r ScenarioResult) (Config, []Request) {
	t.Helper()
	reqs, _, _, err := r.Scenario.Workload(src, r.Baseline.RateScale)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := scenarioConfig(r.Scenario, r.Baseline.TTFTSLOS, r.Baseline.TPOTSLOS)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, reqs
}
