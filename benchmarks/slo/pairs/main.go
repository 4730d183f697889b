// Command pairs reads the scenario suite's JSON results (narwhal-sim
// suite --json) and prints what issue 20 judges a controller change by.
//
// Each directory holds one file per run, named for it: tune.json,
// held.json, even.json (--half tune --even-start) and devK.json
// (--half dev --dev-draw K); benchmarks/slo/draws.sh writes them.
//
//	go run ./benchmarks/slo/pairs BASE            # acceptance 1, run by run
//	go run ./benchmarks/slo/pairs BASE CANDIDATE  # candidate − base, paired
//
// With one directory it prints, per run, acceptance 1's five figures and
// which of them hold: the share of scenarios within threshold − 0.5 pt
// (at least 90 %), the mean against threshold (at least +2), the mean
// against static-best on shifting scenarios (at least +3) and on
// stationary ones (at least −1), and quick reversals per simulated hour
// (at most 1), as sim.AcceptanceOf reads them, and, where the results carry
// it (static_opening), narwhal against its opening split held: what its
// moves are worth. With two it pairs the
// scenarios by run and name and prints, per group, the mean difference
// in points against static-best with its standard error, the scenarios
// better and worse by more than -margin, the four worst and best, and
// the quick reversals of both. Groups follow how sessions 20–26 judged a
// change: tune with dev draws 0–4 (where changes were designed), the even
// start, dev draws 5 and later (drawn after), and held last (read after
// the choice, never to make it).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/narwhal-io/narwhal/sim"
)

// row is one scenario's figures for pairing.
type row struct {
	vsBest   float64 // narwhal − static-best, points
	quickRev int
}

// suiteRun is one results file: its name (file name without .json), its
// variant's summary rows (sim.SummarizeSuite) and its rows by scenario
// name.
type suiteRun struct {
	name    string
	variant string
	summary []sim.SuiteRow
	rows    map[string]row
	keys    []string // scenario names in file order
}

func readRun(path, variant string) (*suiteRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Scenarios []sim.ScenarioResult `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Scenarios) == 0 {
		return nil, fmt.Errorf("%s: no scenarios (not a narwhal-sim suite --json output?)", path)
	}
	r := &suiteRun{name: strings.TrimSuffix(filepath.Base(path), ".json"), variant: variant, rows: map[string]row{}}
	for i, s := range doc.Scenarios {
		o, ok := s.Narwhal[variant]
		if !ok {
			return nil, fmt.Errorf("%s: scenario %d (%s) has no variant %q", path, i, s.Scenario.Name, variant)
		}
		if _, dup := r.rows[s.Scenario.Name]; dup {
			return nil, fmt.Errorf("%s: scenario %s twice", path, s.Scenario.Name)
		}
		r.rows[s.Scenario.Name] = row{vsBest: 100 * (o.Attainment - s.Baseline.StaticBest), quickRev: o.QuickReversals}
		r.keys = append(r.keys, s.Scenario.Name)
	}
	r.summary = sim.SummarizeSuite(doc.Scenarios, []string{variant})
	return r, nil
}

// readDir reads every *.json in dir, in the order runOrder gives.
func readDir(dir, variant string) ([]*suiteRun, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no *.json results", dir)
	}
	var runs []*suiteRun
	for _, p := range paths {
		r, err := readRun(p, variant)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	sort.SliceStable(runs, func(i, j int) bool { return runOrder(runs[i].name) < runOrder(runs[j].name) })
	return runs, nil
}

// devDraw returns K for a run named devK.
func devDraw(name string) (int, bool) {
	k, err := strconv.Atoi(strings.TrimPrefix(name, "dev"))
	return k, strings.HasPrefix(name, "dev") && err == nil && k >= 0
}

// runOrder: tune, held, even, dev draws by K, then anything else.
func runOrder(name string) int {
	switch name {
	case "tune":
		return 0
	case "held":
		return 1
	case "even":
		return 2
	}
	if k, ok := devDraw(name); ok {
		return 3 + k
	}
	return 1 << 30
}

// group names the comparison group of a run.
func group(name string) string {
	switch name {
	case "tune":
		return "tune + dev 0–4"
	case "even":
		return "even start"
	case "held":
		return "held (read after)"
	}
	if k, ok := devDraw(name); ok {
		if k <= 4 {
			return "tune + dev 0–4"
		}
		return "dev 5+"
	}
	return "other: " + name
}

var groupOrder = []string{"tune + dev 0–4", "even start", "dev 5+", "held (read after)"}

// meanSE returns the mean and its standard error (0 below two values).
func meanSE(x []float64) (float64, float64) {
	if len(x) == 0 {
		return 0, 0
	}
	var s float64
	for _, v := range x {
		s += v
	}
	m := s / float64(len(x))
	if len(x) < 2 {
		return m, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - m) * (v - m)
	}
	return m, math.Sqrt(ss / float64(len(x)-1) / float64(len(x)))
}

// opening is the variant's mean against its opening split held over
// one traffic group of a run (NaN: no scenario ran it).
func opening(r *suiteRun, traffic string) float64 {
	for _, x := range r.summary {
		if x.Policy == r.variant && x.Group == "all/"+traffic && x.VsOpening != nil {
			return x.VsOpening.Mean
		}
	}
	return math.NaN()
}

func yn(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeAcceptance(w io.Writer, runs []*suiteRun) {
	fmt.Fprintln(w, "| run | scenarios | ≥ thr − 0.5 | vs threshold | shifting vs static-best | stationary vs static-best | quick rev./h | vs opening split held: shifting / stationary |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	var met [5]int
	for _, r := range runs {
		a, _ := sim.AcceptanceOf(r.summary, r.variant, "all") // readRun saw the variant in every scenario
		fmt.Fprintf(w, "| %s | %d | %.0f %% (%s) | %+.2f (%s) | %+.2f over %d (%s) | %+.2f over %d (%s) | %.2f (%s) | %s / %s |\n",
			r.name, a.N, 100*a.WithinShare, yn(a.Met[0]), a.VsThreshold, yn(a.Met[1]), a.Shifting, a.NShifting, yn(a.Met[2]),
			a.Stationary, a.NStationary, yn(a.Met[3]), a.QuickRevPerH, yn(a.Met[4]), signedOrDash(opening(r, "shifting")), signedOrDash(opening(r, "stationary")))
		for i, ok := range a.Met {
			if ok {
				met[i]++
			}
		}
	}
	fmt.Fprintf(w, "| met on (of %d runs) | | %d | %d | %d | %d | %d | |\n", len(runs), met[0], met[1], met[2], met[3], met[4])
}

// signedOrDash prints x with its sign, "–" for NaN (nothing measured).
func signedOrDash(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%+.2f", x)
}

// diff is one paired scenario: candidate − base against static-best.
type diff struct {
	d             float64
	run, scenario string
}

func writePairs(w io.Writer, base, cand []*suiteRun, margin float64) error {
	byName := map[string]*suiteRun{}
	for _, r := range base {
		byName[r.name] = r
	}
	diffs := map[string][]diff{}
	quick := map[string][2]int{}
	paired := 0
	for _, c := range cand {
		b, ok := byName[c.name]
		if !ok {
			continue
		}
		g := group(c.name)
		q := quick[g]
		for _, k := range c.keys {
			bx, ok := b.rows[k]
			if !ok {
				continue
			}
			cx := c.rows[k]
			diffs[g] = append(diffs[g], diff{cx.vsBest - bx.vsBest, c.name, k})
			q[0] += bx.quickRev
			q[1] += cx.quickRev
			paired++
		}
		quick[g] = q
	}
	if paired == 0 {
		return errors.New("no scenario appears in both directories (same run file, same scenario name)")
	}
	groups := slices.Clone(groupOrder)
	for g := range diffs {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	fmt.Fprintf(w, "| group | scenarios | candidate − base (pt vs static-best) | better / worse by > %.1f | worst | best | quick reversals base → candidate |\n", margin)
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---:|")
	for _, g := range groups {
		ds := diffs[g]
		if len(ds) == 0 {
			continue
		}
		xs := make([]float64, len(ds))
		better, worse := 0, 0
		for i, d := range ds {
			xs[i] = d.d
			if d.d > margin {
				better++
			} else if d.d < -margin {
				worse++
			}
		}
		m, se := meanSE(xs)
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].d < ds[j].d })
		ends := func(sel []diff) string {
			var parts []string
			for _, d := range sel {
				parts = append(parts, fmt.Sprintf("%s %+.1f", short(d.scenario), d.d))
			}
			return strings.Join(parts, ", ")
		}
		n := min(4, len(ds))
		best := slices.Clone(ds[len(ds)-n:])
		slices.Reverse(best)
		fmt.Fprintf(w, "| %s | %d | %+.2f ± %.2f | %d / %d | %s | %s | %d → %d |\n",
			g, len(ds), m, se, better, worse, ends(ds[:n]), ends(best), quick[g][0], quick[g][1])
	}
	return nil
}

// short is a scenario's name up to its kind (x4-17-flash-32xopt-13b… →
// x4-17, d03a-drift-… → d03a).
func short(name string) string {
	for _, k := range []string{sim.KindShift, sim.KindDrift, sim.KindStationary, sim.KindFlash, sim.KindMixed} {
		if i := strings.Index(name, "-"+k+"-"); i > 0 {
			return name[:i]
		}
	}
	return name
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pairs:", err)
		os.Exit(2)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("pairs", flag.ContinueOnError)
	variant := fs.String("variant", "narwhal", "the narwhal variant to read (suite --variant NAME=...)")
	margin := fs.Float64("margin", 0.5, "points a paired scenario must move by to count as better or worse")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: pairs [-variant NAME] [-margin PT] BASE_DIR [CANDIDATE_DIR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return errors.New("want one or two directories of suite results")
	}
	if !(*margin >= 0) {
		return fmt.Errorf("-margin %v: want a number of points >= 0", *margin)
	}
	base, err := readDir(fs.Arg(0), *variant)
	if err != nil {
		return err
	}
	if fs.NArg() == 1 {
		writeAcceptance(w, base)
		return nil
	}
	cand, err := readDir(fs.Arg(1), *variant)
	if err != nil {
		return err
	}
	return writePairs(w, base, cand, *margin)
}
