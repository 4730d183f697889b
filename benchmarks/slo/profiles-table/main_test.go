package main

import (
	"fmt"
	"strings"
	"testing"
)

func jl(row string, seed int, x float64, mode string, cal bool, e, slo, warm float64) string {
	return fmt.Sprintf(`{"row":%q,"seed":%d,"slowdown":%v,"mode":%q,"calibrate":%v,"error":%v,"result":{"slo_attainment":%v,"slo_attainment_after_warmup":%v}}`,
		row, seed, x, mode, cal, e, slo, warm)
}

// The band is the exact runs' range over errors 0.99–1.01 per seed; the
// calibrated run's distance outside it is 0 inside and the gap outside.
func TestTableBandAndDistance(t *testing.T) {
	in := strings.Join([]string{
		jl("CAT", 1, 1, "exact", false, 1, 0.95, 0.95),
		jl("CAT", 1, 1, "exact", false, 0.99, 0.93, 0.93),
		jl("CAT", 1, 1, "exact", false, 1.01, 0.96, 0.96),
		jl("CAT", 1, 1, "prior", true, 1, 0.94, 0.94), // inside 93–96
		jl("CAT", 2, 1, "exact", false, 1, 0.90, 0.90),
		jl("CAT", 2, 1, "exact", false, 0.99, 0.89, 0.89),
		jl("CAT", 2, 1, "exact", false, 1.01, 0.91, 0.91),
		jl("CAT", 2, 1, "prior", true, 1, 0.87, 0.87), // 2 pt under 89
	}, "\n")
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "| CAT | 95.00/90.00 | 93.00–96.00 / 89.00–91.00 | 94.00/87.00 | 3.00 | 2.00 |"
	if !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "largest outside the ±1 % band: 2.00 pt (CAT seed 2)") {
		t.Errorf("summary wrong:\n%s", out.String())
	}
}

func TestTableRefusesBadInput(t *testing.T) {
	if err := run(strings.NewReader("{not json"), &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: %v", err)
	}
	if err := run(strings.NewReader(""), &strings.Builder{}); err == nil {
		t.Error("empty input accepted")
	}
}
