package core

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/controller"
)

func addEngines(t *testing.T, c *Core, model, gpu string, tp int, np, nd int) {
	t.Helper()
	for i := 0; i < np+nd; i++ {
		r := controller.RolePrefill
		if i >= np {
			r = controller.RoleDecode
		}
		e := controller.Engine{ID: "x" + string(rune('a'+i)), Node: "n1", Model: model, GPU: gpu, TP: tp, Role: r, Live: true, KVCapacityTokens: 200000}
		if err := c.UpsertEngine(e); err != nil {
			t.Fatal(err)
		}
	}
}

// prefillFlood records a second of requests whose TTFT is far past the
// SLO (a prefill pool that is short), ending at now.
func prefillFlood(t *testing.T, c *Core, now int64, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		arr := now - sec + int64(i)*sec/int64(n)
		c.OfferStarted(arr)
		if err := c.OfferSized(arr, 3000, 16); err != nil {
			t.Fatal(err)
		}
		if err := c.Admitted(arr, "xa", 3000, 16); err != nil {
			t.Fatal(err)
		}
		if err := c.FirstToken(arr+int64(3*c.Config().TTFTSLOS*1e9), arr); err != nil {
			t.Fatal(err)
		}
	}
}

// An engine whose model and GPU have no profile and no prior (decision
// basis observed_pressure_unprofiled, a closed-set decision_basis) is
// still moved once its prefill latencies say the pool is short, and the
// core names the model in Unprofiled and narwhal_profile_missing.
func TestUnprofiledEnginesMoveOnObservedPressure(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	addEngines(t, c, "acme/house-model-13b", "H100", 1, 2, 4)
	if got := c.Unprofiled(); len(got) != 1 || got[0] != "acme/house-model-13b on H100" {
		t.Fatalf("Unprofiled() = %v", got)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, col := range c.Collectors() {
		reg.MustRegister(col)
	}
	if got := gathered(t, reg, "narwhal_profile_missing"); len(got) != 1 || got[`gpu="H100",model="acme/house-model-13b"`] != 1 {
		t.Fatalf("narwhal_profile_missing = %v", got)
	}
	now := t0
	var moved bool
	var basis string
	for i := 0; i < 120 && !moved; i++ {
		now += sec
		prefillFlood(t, c, now, 20)
		d := c.Step(now)
		basis = d.Basis
		moved = len(d.Moves) > 0 && d.Moves[0].To == controller.RolePrefill
		if len(d.Unprofiled) != 1 {
			t.Fatalf("decision names unprofiled %v", d.Unprofiled)
		}
	}
	if !moved {
		t.Fatalf("no move toward prefill after 120 s of TTFT at 3× the SLO; last basis %s", basis)
	}
	if basis != controller.BasisUnprofiled {
		t.Fatalf("basis %q; want %q", basis, controller.BasisUnprofiled)
	}
}

// Without WithoutPrior the core prices a known model on a known GPU with
// the geometry prior (origin "prior"), calibrates it from latency
// intervals, and exports the profile's coefficients, samples and error.
func TestPriorResolvesAndCalibrates(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	addEngines(t, c, "meta-llama/Llama-3.1-8B-Instruct", "NVIDIA H100 80GB HBM3", 1, 2, 2)
	if u := c.Unprofiled(); len(u) != 0 {
		t.Fatalf("Unprofiled() = %v", u)
	}
	var prior controller.Profile
	for _, p := range c.Controller().Profiles() {
		if p.Model == "meta-llama/Llama-3.1-8B-Instruct" {
			prior = p
		}
	}
	if prior.Origin != controller.OriginPrior || !strings.Contains(prior.Source, "H100-SXM-80GB") {
		t.Fatalf("profile %+v", prior)
	}
	// The engines run 30 % slower than the prior: calibration learns it.
	now := t0
	for i := 0; i < 60; i++ {
		now += sec
		l := float64(500 + 100*(i%20))
		li := controller.LatencyInterval{IntervalS: 1, PrefillCount: 2, PrefillSeconds: 2 * 1.3 * prior.Prefill.Seconds(l), PrefillTokens: 2 * l, PrefillTokensSq: 2 * l * l,
			DecodeCount: 50, DecodeSeconds: 50 * 1.3 * prior.Decode.StepSeconds(float64(8+i%32), float64(1000*(8+i%32))), DecodeBatch: float64(8 + i%32), DecodeCtxTokens: float64(1000 * (8 + i%32))}
		if err := c.ObserveLatency("xa", now, li); err != nil {
			t.Fatal(err)
		}
	}
	var cal controller.Profile
	for _, p := range c.Controller().Profiles() {
		if p.Model == "meta-llama/Llama-3.1-8B-Instruct" {
			cal = p
		}
	}
	if cal.Calibration == nil || cal.Calibration.PrefillSamples != 60 || cal.Calibration.DecodeSamples != 60 {
		t.Fatalf("calibration %+v", cal.Calibration)
	}
	for _, l := range []float64{600, 1500, 2400} {
		if r := cal.Prefill.Seconds(l) / prior.Prefill.Seconds(l); r < 1.25 || r > 1.35 {
			t.Errorf("calibrated prefill(%v) / prior = %.3f; want 1.3", l, r)
		}
	}
	if r := cal.Decode.StepSeconds(20, 20000) / prior.Decode.StepSeconds(20, 20000); r < 1.25 || r > 1.35 {
		t.Errorf("calibrated decode step / prior = %.3f; want 1.3", r)
	}
	if cal.Calibration.PrefillFitError > 0.05 {
		t.Errorf("prefill fit error %.3f after 60 exact intervals", cal.Calibration.PrefillFitError)
	}
	d := c.Step(now)
	if len(d.Profiles) != 1 || d.Profiles[0].Origin != controller.OriginPrior || !d.Profiles[0].Calibrated {
		t.Fatalf("decision profiles %+v", d.Profiles)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, col := range c.Collectors() {
		reg.MustRegister(col)
	}
	samples := gathered(t, reg, "narwhal_profile_calibration_samples_total")
	for _, ph := range []string{"prefill", "decode"} {
		k := `gpu="NVIDIA H100 80GB HBM3",model="meta-llama/Llama-3.1-8B-Instruct",origin="prior",phase="` + ph + `",tp="1"`
		if samples[k] != 60 {
			t.Errorf("samples %s = %v; want 60 (all: %v)", ph, samples[k], samples)
		}
	}
	if n := len(gathered(t, reg, "narwhal_profile_coefficient_seconds")); n != 6 {
		t.Errorf("%d coefficient series; want 6", n)
	}
	if fe := gathered(t, reg, "narwhal_profile_fit_error_ratio"); len(fe) != 2 {
		t.Errorf("fit error series %v", fe)
	}
	// Bad intervals change nothing.
	if err := c.ObserveLatency("xa", now, controller.LatencyInterval{PrefillSeconds: -1}); err == nil {
		t.Error("a negative interval was accepted")
	}
	if err := c.ObserveLatency("nope", now, controller.LatencyInterval{}); err == nil {
		t.Error("an interval for an unknown engine was accepted")
	}
}

// WithoutPrior and WithCalibration(false) turn both off.
func TestWithoutPriorAndCalibrationOff(t *testing.T) {
	c, err := New(DefaultConfig(), WithoutPrior(), WithCalibration(false))
	if err != nil {
		t.Fatal(err)
	}
	addEngines(t, c, "meta-llama/Llama-3.1-8B-Instruct", "H100", 1, 1, 1)
	if u := c.Unprofiled(); len(u) != 1 {
		t.Fatalf("Unprofiled() = %v; want the model without a prior", u)
	}
}

// gathered returns name's samples keyed by their labels in declaration
// (sorted) order (`a="x",b="y"`).
func gathered(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var parts []string
			for _, lp := range m.GetLabel() {
				parts = append(parts, lp.GetName()+"="+`"`+lp.GetValue()+`"`)
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[strings.Join(parts, ",")] = v
		}
	}
	return out
}
