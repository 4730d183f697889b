package profile

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The published measurements the prior is held against (testdata, copied
// unmodified from ../shared/profiles; see testdata/SOURCES.md):
// Splitwise's Llama2-70B TP8 medians on DGX-A100 and DGX-H100
// (perf_model.csv) and DistServe's OPT fits on A100-80GB
// (profiler-a100-80g.distserve.json) evaluated on a grid within the
// published KV capacity (max_num_tokens.csv).

// published is one measured (or published-fit) figure and the prior's.
type published struct {
	source, phase string
	x             string
	measured, got float64 // seconds
}

func (p published) ratio() float64 { return p.got / p.measured }

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func mustPrior(t testing.TB, model, gpu string, tp int) *Prior {
	t.Helper()
	g, ok := LookupGeometry(model)
	if !ok {
		t.Fatalf("no geometry %s", model)
	}
	d, ok := LookupGPU(gpu)
	if !ok {
		t.Fatalf("no gpu %s", gpu)
	}
	p, err := NewPrior(g, d, tp)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var csvRows [][]string

func splitwisePoints(t testing.TB) []published {
	if csvRows == nil {
		f, err := os.Open("testdata/perf_model.csv")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		csvRows, err = csv.NewReader(f).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
	}
	rows := csvRows
	type key struct {
		hw                    string
		prompt, batch, tokens int
	}
	pt, tt := map[key][]float64{}, map[key][]float64{}
	for _, r := range rows[1:] {
		if r[0] != "llama2-70b" || r[10] != "8" || (r[1] != "a100-80gb" && r[1] != "h100-80gb") {
			continue
		}
		atoi := func(s string) int { v, _ := strconv.Atoi(s); return v }
		k := key{r[1], atoi(r[2]), atoi(r[3]), atoi(r[4])}
		p, _ := strconv.ParseFloat(r[7], 64)
		tk, _ := strconv.ParseFloat(r[8], 64)
		pt[k] = append(pt[k], p)
		tt[k] = append(tt[k], tk)
	}
	keys := make([]key, 0, len(pt))
	for k := range pt {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.hw != b.hw {
			return a.hw < b.hw
		}
		if a.prompt != b.prompt {
			return a.prompt < b.prompt
		}
		if a.batch != b.batch {
			return a.batch < b.batch
		}
		return a.tokens < b.tokens
	})
	var out []published
	for _, k := range keys {
		gpu := "A100-80GB"
		if k.hw == "h100-80gb" {
			gpu = "H100"
		}
		p := mustPrior(t, "meta-llama/Llama-2-70b-hf", gpu, 8)
		src := "Splitwise llama2-70b TP8 " + k.hw
		// Prefill: batch-1 prompts (token_size 128 rows; the others repeat the prompt).
		if k.batch == 1 && k.tokens == 128 {
			out = append(out, published{src, "prefill", fmt.Sprintf("L=%d", k.prompt), median(pt[k]) / 1e3, p.PrefillSeconds(float64(k.prompt))})
		}
		// Decode: the batch sweep at prompt 512 (token_size 128); mean
		// context over the generation: prompt + tokens/2 per sequence.
		if k.prompt == 512 && k.tokens == 128 {
			ctx := float64(k.batch) * float64(k.prompt+k.tokens/2)
			out = append(out, published{src, "decode", fmt.Sprintf("b=%d ctx=%d", k.batch, k.prompt+k.tokens/2), median(tt[k]) / 1e3, p.DecodeStepSeconds(float64(k.batch), ctx)})
		}
	}
	return out
}

func distServePoints(t testing.TB) []published {
	b, err := os.ReadFile("testdata/profiler-a100-80g.distserve.json")
	if err != nil {
		t.Fatal(err)
	}
	var fits map[string]map[string]struct {
		Prefill   []float64 `json:"prefill"`
		Small     []float64 `json:"decoding_smallbs"`
		Large     []float64 `json:"decoding_largebs"`
		Threshold int       `json:"decoding_large_small_bs_threshold"`
	}
	if err := json.Unmarshal(b, &fits); err != nil {
		t.Fatal(err)
	}
	capB, err := os.ReadFile("testdata/max_num_tokens.csv")
	if err != nil {
		t.Fatal(err)
	}
	kvCap := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(capB)), "\n")[1:] {
		f := strings.Split(line, ",")
		if f[2] == "1" {
			v, _ := strconv.ParseFloat(f[3], 64)
			kvCap[f[0]+"/"+f[1]] = v
		}
	}
	models := make([]string, 0, len(fits))
	for m := range fits {
		models = append(models, m)
	}
	sort.Strings(models)
	var out []published
	for _, m := range models {
		tps := make([]int, 0)
		for k := range fits[m] {
			v, _ := strconv.Atoi(k)
			tps = append(tps, v)
		}
		sort.Ints(tps)
		for _, tp := range tps {
			f := fits[m][strconv.Itoa(tp)]
			p := mustPrior(t, m, "A100-80GB", tp)
			src := fmt.Sprintf("DistServe %s TP%d A100-80GB", strings.TrimPrefix(m, "facebook/"), tp)
			for _, l := range []float64{128, 256, 512, 1024, 2048} {
				ms := f.Prefill[0] + f.Prefill[1]*l + f.Prefill[2]*l*l
				out = append(out, published{src, "prefill", fmt.Sprintf("L=%g", l), ms / 1e3, p.PrefillSeconds(l)})
			}
			kc := kvCap[m+"/"+strconv.Itoa(tp)]
			for _, bs := range []float64{1, 8, 32, 64, 128, 256} {
				for _, ctx := range []float64{256, 1024, 2048} {
					if kc > 0 && bs*ctx > kc {
						continue
					}
					c := f.Small
					if int(bs) >= f.Threshold {
						c = f.Large
					}
					ms := c[0] + c[1]*bs*(ctx+1) + c[2]*bs
					out = append(out, published{src, "decode", fmt.Sprintf("b=%g ctx=%g", bs, ctx), ms / 1e3, p.DecodeStepSeconds(bs, bs*ctx)})
				}
			}
		}
	}
	return out
}

// priorTable returns the comparison as a markdown table (one row per
// source and phase, then the totals) and the per-phase verdicts.
func priorTable(t testing.TB) (string, map[string][2]float64) {
	pts := append(splitwisePoints(t), distServePoints(t)...)
	type agg struct{ errs []float64 }
	by := map[string]*agg{}
	var order []string
	phase := map[string]*agg{}
	worst := map[string]float64{}
	for _, p := range pts {
		k := p.source + "|" + p.phase
		if by[k] == nil {
			by[k] = &agg{}
			order = append(order, k)
		}
		e := math.Abs(p.ratio() - 1)
		by[k].errs = append(by[k].errs, e)
		if phase[p.phase] == nil {
			phase[p.phase] = &agg{}
		}
		phase[p.phase].errs = append(phase[p.phase].errs, e)
		r := p.ratio()
		if r < 1 {
			r = 1 / r
		}
		worst[p.phase] = max(worst[p.phase], r)
	}
	var sb strings.Builder
	sb.WriteString("| source | phase | points | median abs error | worst ratio (prior/measured) |\n|---|---|---:|---:|---:|\n")
	for _, k := range order {
		src, ph, _ := strings.Cut(k, "|")
		w, wr := 0.0, 1.0
		for _, p := range pts {
			if p.source == src && p.phase == ph {
				r := p.ratio()
				if math.Abs(r-1) > w {
					w, wr = math.Abs(r-1), r
				}
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %d | %.1f %% | %.2f |\n", src, ph, len(by[k].errs), 100*median(by[k].errs), wr)
	}
	res := map[string][2]float64{}
	for _, ph := range []string{"prefill", "decode"} {
		m := median(phase[ph].errs)
		res[ph] = [2]float64{m, worst[ph]}
		fmt.Fprintf(&sb, "| **all** | **%s** | %d | **%.1f %%** | **%.2f×** (max(p/m, m/p)) |\n", ph, len(phase[ph].errs), 100*m, worst[ph])
	}
	return sb.String(), res
}

// TestPriorAgainstPublished holds the geometry prior to the bounds
// (acceptance 1): per phase, median absolute error ≤ 30 % and every point
// within a factor of 2 of the published figure. Run with -v to print the
// table in core/profile/README.md.
func TestPriorAgainstPublished(t *testing.T) {
	table, res := priorTable(t)
	t.Log("\n" + table)
	for ph, r := range res {
		if r[0] > 0.30 {
			t.Errorf("%s: median abs error %.1f %% > 30 %%", ph, 100*r[0])
		}
		if r[1] > 2 {
			t.Errorf("%s: a point off by %.2f× > 2×", ph, r[1])
		}
	}
}

func TestPriorPoints(t *testing.T) {
	if testing.Verbose() && os.Getenv("PRIOR_POINTS") != "" {
		for _, p := range append(splitwisePoints(t), distServePoints(t)...) {
			t.Logf("%-40s %-8s %-16s measured %8.2f ms prior %8.2f ms ratio %.2f", p.source, p.phase, p.x, p.measured*1e3, p.got*1e3, p.ratio())
		}
	}
}
