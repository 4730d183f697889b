// Command profiles-table prints the tables of benchmarks/slo/PROFILES.md
// from the JSON lines benchmarks/slo/profiles.sh writes (stdin):
//
//	sh benchmarks/slo/profiles.sh > /tmp/profiles.jsonl
//	go run ./benchmarks/slo/profiles-table < /tmp/profiles.jsonl
//
// Cells are "seed 1 / seed 2", SLO attainment in %. "exact ±1 %" is the
// range the exact profile spans at --controller-profile-error 0.99, 1
// and 1.01 (per seed); "outside ±1 %" is how far the calibrated run lies
// outside that range (0 inside it), the larger of the two seeds.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// line is one run of profiles.sh.
type line struct {
	Row       string  `json:"row"`
	Seed      int     `json:"seed"`
	Slowdown  float64 `json:"slowdown"`
	Mode      string  `json:"mode"`
	Calibrate bool    `json:"calibrate"`
	Error     float64 `json:"error"`
	Result    struct {
		SLO       float64 `json:"slo_attainment"`
		SLOWarmup float64 `json:"slo_attainment_after_warmup"`
	} `json:"result"`
}

type key struct {
	row      string
	seed     int
	slowdown float64
	mode     string
	cal      bool
	err      float64
}

type runs struct {
	m    map[key]line
	rows []string
}

func read(r io.Reader) (*runs, error) {
	rs := &runs{m: map[key]line{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for sc.Scan() {
		n++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if l.Error == 0 {
			l.Error = 1
		}
		rs.m[key{l.Row, l.Seed, l.Slowdown, l.Mode, l.Calibrate, l.Error}] = l
		if !slices.Contains(rs.rows, l.Row) {
			rs.rows = append(rs.rows, l.Row)
		}
	}
	return rs, sc.Err()
}

// get returns the attainment in % of one run, NaN when absent.
func (rs *runs) get(row string, seed int, x float64, mode string, cal bool, e float64, warm bool) float64 {
	l, ok := rs.m[key{row, seed, x, mode, cal, e}]
	if !ok {
		return math.NaN()
	}
	if warm {
		return 100 * l.Result.SLOWarmup
	}
	return 100 * l.Result.SLO
}

// band is the exact profile's range over errors 0.99, 1 and 1.01.
func (rs *runs) band(row string, seed int, x float64, warm bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, e := range []float64{0.99, 1, 1.01} {
		if v := rs.get(row, seed, x, "exact", false, e, warm); !math.IsNaN(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	return lo, hi
}

// outside is how far v lies outside [lo, hi] (0 inside).
func outside(v, lo, hi float64) float64 {
	switch {
	case math.IsNaN(v) || math.IsInf(lo, 0):
		return math.NaN()
	case v < lo:
		return lo - v
	case v > hi:
		return v - hi
	}
	return 0
}

func pair(a, b float64) string { return fmt.Sprintf("%.2f/%.2f", a, b) }

// table writes one table: the calibrated mode against exact, the band,
// and the other modes beside.
func (rs *runs) table(w io.Writer, x float64, warm bool) {
	calMode, others := "prior", [][2]any{{"prior", false}, {"none", false}, {"exact", true}}
	if x != 1 {
		calMode, others = "nominal", [][2]any{{"nominal", false}}
	}
	head := fmt.Sprintf("| row | exact | exact ±1 %% | %s --calibrate=true | max abs diff | outside ±1 %% |", calMode)
	sep := "|---|---:|---:|---:|---:|---:|"
	for _, o := range others {
		head += fmt.Sprintf(" %s --calibrate=%v |", o[0], o[1])
		sep += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	var worstDiff, worstOut float64
	var worstDiffAt, worstOutAt string
	for _, row := range rs.rows {
		var ex, cal, d, o [2]float64
		var bands [2]string
		for s := 1; s <= 2; s++ {
			ex[s-1] = rs.get(row, s, x, "exact", false, 1, warm)
			cal[s-1] = rs.get(row, s, x, calMode, true, 1, warm)
			lo, hi := rs.band(row, s, x, warm)
			bands[s-1] = fmt.Sprintf("%.2f–%.2f", lo, hi)
			d[s-1] = math.Abs(cal[s-1] - ex[s-1])
			o[s-1] = outside(cal[s-1], lo, hi)
			if d[s-1] > worstDiff {
				worstDiff, worstDiffAt = d[s-1], fmt.Sprintf("%s seed %d", row, s)
			}
			if o[s-1] > worstOut {
				worstOut, worstOutAt = o[s-1], fmt.Sprintf("%s seed %d", row, s)
			}
		}
		cells := fmt.Sprintf("| %s | %s | %s / %s | %s | %.2f | %.2f |", row, pair(ex[0], ex[1]), bands[0], bands[1],
			pair(cal[0], cal[1]), max(d[0], d[1]), max(o[0], o[1]))
		for _, oth := range others {
			m, c := oth[0].(string), oth[1].(bool)
			cells += " " + pair(rs.get(row, 1, x, m, c, 1, warm), rs.get(row, 2, x, m, c, 1, warm)) + " |"
		}
		fmt.Fprintln(w, cells)
	}
	fmt.Fprintf(w, "\nLargest difference from exact: %.2f pt (%s); largest outside the ±1 %% band: %.2f pt", worstDiff, worstDiffAt, worstOut)
	if worstOutAt != "" {
		fmt.Fprintf(w, " (%s)", worstOutAt)
	}
	fmt.Fprintln(w, ".")
}

func run(in io.Reader, out io.Writer) error {
	rs, err := read(in)
	if err != nil {
		return err
	}
	if len(rs.rows) == 0 {
		return fmt.Errorf("no runs on stdin")
	}
	for _, x := range []float64{1, 0.7, 1.3} {
		for _, warm := range []bool{false, true} {
			span := "whole run"
			if warm {
				span = "after the warm-up"
			}
			fmt.Fprintf(out, "Slowdown %v, %s:\n\n", x, span)
			rs.table(out, x, warm)
			fmt.Fprintln(out)
		}
	}
	return nil
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "profiles-table:", err)
		os.Exit(1)
	}
}
