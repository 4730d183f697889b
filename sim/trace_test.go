package sim

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestReadAzureCSV(t *testing.T) {
	// last line without a newline, as in the published code trace
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:15:51.0000000,10,0"
	reqs, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{ArrivalNs: 0, InputTokens: 374, OutputTokens: 44},
		{ArrivalNs: 4314579000, InputTokens: 396, OutputTokens: 109},
		{ArrivalNs: 4319410000, InputTokens: 10, OutputTokens: 0},
	}
	if len(reqs) != len(want) {
		t.Fatalf("unexpected rows; got %d; want %d", len(reqs), len(want))
	}
	for i := range want {
		if reqs[i] != want[i] {
			t.Fatalf("row %d: got %+v; want %+v", i, reqs[i], want[i])
		}
	}
}

func TestReadMooncakeJSONL(t *testing.T) {
	in := `{"timestamp": 3000, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}
{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14]}
`
	reqs, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0] != (Request{0, 7322, 490, 0, 0, 0}) || reqs[1] != (Request{3e9, 6758, 500, 0, 0, 0}) {
		t.Fatalf("unexpected requests (want sorted by arrival, ms -> ns): %+v", reqs)
	}
}

func TestReadTraceRejectsBadInput(t *testing.T) {
	f := func(name, in string) {
		t.Helper()
		if _, err := ReadTrace(strings.NewReader(in)); !errors.Is(err, ErrBadTrace) {
			t.Fatalf("%s: got %v; want ErrBadTrace", name, err)
		}
	}
	f("empty", "")
	f("header only", "TIMESTAMP,ContextTokens,GeneratedTokens\n")
	f("bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n")
	f("columns", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1\n")
	f("negative", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-1,2\n")
	f("json", `{"timestamp": 1, "input_length": 5}`)
	f("json syntax", `{"timestamp": 1,`)
}

func TestWorkloadScaleConcatSlice(t *testing.T) {
	a := []Request{{ArrivalNs: 0, InputTokens: 1}, {ArrivalNs: 10e9, InputTokens: 2}, {ArrivalNs: 20e9, InputTokens: 3}}
	b := []Request{{ArrivalNs: 0, InputTokens: 4}, {ArrivalNs: 4e9, InputTokens: 5}}
	w, err := Workload([][]Request{a, b}, []float64{2, 1}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a at 2×: 0, 5, 10 s; mean gap 5 s; b starts at 15 s: 15, 19 s.
	wantT := []int64{0, 5e9, 10e9, 15e9, 19e9}
	for i, r := range w {
		if r.ArrivalNs != wantT[i] || r.InputTokens != int64(i+1) {
			t.Fatalf("request %d: got %+v; want arrival %d input %d", i, r, wantT[i], i+1)
		}
	}
	if w[3].Trace != 1 || w[2].Trace != 0 {
		t.Fatalf("trace index not kept: %+v", w)
	}
	w, err = Workload([][]Request{a, b}, []float64{2, 1}, 5, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 3 || w[0].ArrivalNs != 0 || w[2].ArrivalNs != 10e9 {
		t.Fatalf("unexpected slice 5:16: %+v", w)
	}
	if _, err := Workload([][]Request{a}, []float64{0}, 0, 0); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("rate scale 0: got %v; want ErrBadConfig", err)
	}
	if _, err := Workload([][]Request{a, b}, []float64{1, 2, 3}, 0, 0); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("3 scales for 2 traces: got %v; want ErrBadConfig", err)
	}
	if _, err := Workload([][]Request{a}, []float64{1}, 100, 200); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("empty slice: got %v; want ErrBadConfig", err)
	}
}

func TestPrepareMaxTokensAndEstimate(t *testing.T) {
	reqs := make([]Request, 20000)
	for i := range reqs {
		reqs[i] = Request{InputTokens: 1000, OutputTokens: int64(i % 3000)}
	}
	Prepare(reqs, 7, 0.3, 0.15)
	var none int
	var logSum, logSq float64
	for _, r := range reqs {
		if r.ReqOutput == 0 {
			none++
		} else if r.ReqOutput < r.OutputTokens || r.ReqOutput < 256 || r.ReqOutput&(r.ReqOutput-1) != 0 {
			t.Fatalf("max_tokens %d for output %d: want a power-of-two cap ≥ 256 covering the output", r.ReqOutput, r.OutputTokens)
		}
		l := math.Log(float64(r.EstInputTokens) / 1000)
		logSum += l
		logSq += l * l
	}
	if frac := float64(none) / float64(len(reqs)); math.Abs(frac-0.3) > 0.02 {
		t.Fatalf("unexpected share without max_tokens; got %.3f; want 0.30±0.02", frac)
	}
	n := float64(len(reqs))
	mean := logSum / n
	sd := math.Sqrt(logSq/n - mean*mean)
	if math.Abs(mean) > 0.01 || math.Abs(sd-0.15) > 0.01 {
		t.Fatalf("unexpected estimate error; got log-mean %.4f sd %.4f; want 0, 0.15", mean, sd)
	}
	again := make([]Request, len(reqs))
	for i := range again {
		again[i] = Request{InputTokens: 1000, OutputTokens: int64(i % 3000)}
	}
	Prepare(again, 7, 0.3, 0.15)
	for i := range again {
		if again[i] != reqs[i] {
			t.Fatalf("same seed gave a different draw at %d", i)
		}
	}
}

func TestBundledTrace(t *testing.T) {
	reqs, err := BundledTrace()
	if err != nil {
		t.Fatal(err)
	}
	// SOURCES.md: 8,819 rows, 3,436 s, max input 7437, max output 1899.
	if len(reqs) != 8819 {
		t.Fatalf("unexpected rows; got %d; want 8819", len(reqs))
	}
	var maxIn, maxOut int64
	for _, r := range reqs {
		maxIn, maxOut = max(maxIn, r.InputTokens), max(maxOut, r.OutputTokens)
	}
	span := float64(reqs[len(reqs)-1].ArrivalNs) / 1e9
	if maxIn != 7437 || maxOut != 1899 || math.Abs(span-3435.95) > 1 {
		t.Fatalf("unexpected trace; got max input %d, max output %d, span %.2fs; want 7437, 1899, ~3436s", maxIn, maxOut, span)
	}
}

// A slice bound that is not a number of seconds within the bounded
// timeline, or a rate scale that stretches the timeline past it, is
// refused by name. They used to pass: --slice NaN: kept everything,
// --slice 1e300: and --rate-scale 1e-12 overflowed the arrival times and
// panicked Run (makeslice: len out of range) sizing the time series.
func TestWorkloadRefusesUnboundedTimeline(t *testing.T) {
	a := []Request{{ArrivalNs: 0, InputTokens: 1}, {ArrivalNs: 10e9, InputTokens: 2}, {ArrivalNs: 20e9, InputTokens: 3}}
	for _, c := range []struct {
		scale, from, to float64
		mention         string
	}{
		{1, math.NaN(), 0, "slice NaN:0"},
		{1, 0, math.NaN(), "slice 0:NaN"},
		{1, 1e300, 0, "slice 1e+300:0"},
		{1, 0, 1e300, "slice 0:1e+300"},
		{1, 0, math.Inf(1), "slice 0:+Inf"},
		{1, 0, math.Inf(-1), "slice 0:-Inf"},
		{1e-12, 0, 0, "rate scale 1e-12 spans trace 0 past 31536000 s"},
		{1e-300, 0, 0, "rate scale 1e-300 spans trace 0 past 31536000 s"},
	} {
		w, err := Workload([][]Request{a}, []float64{c.scale}, c.from, c.to)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.mention) {
			t.Fatalf("Workload(scale %v, slice %v:%v): unexpected result; got %d requests, %v; want ErrBadConfig mentioning %q",
				c.scale, c.from, c.to, len(w), err, c.mention)
		}
	}
	// Within the bound (20 s at 1e-6: 2e7 s; a slice to a year) is
	// still a workload.
	if w, err := Workload([][]Request{a}, []float64{1e-6}, 0, 365*24*3600); err != nil || len(w) != 3 || w[2].ArrivalNs != 2e16 {
		t.Fatalf("a 2e7 s timeline: unexpected result; got %+v, %v; want 3 requests, the last at 2e16 ns, nil", w, err)
	}
}
