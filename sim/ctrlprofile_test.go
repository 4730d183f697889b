package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
)

// --engine-slowdown multiplies the engines' true times.
func TestEngineSlowdownScalesTrueTimes(t *testing.T) {
	p, err := LookupProfile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	base := p.PrefillNs(1000, 1e6)
	dbase := p.DecodeStepNs(16, 16000)
	p.Slowdown = 1.3
	if got := float64(p.PrefillNs(1000, 1e6)) / float64(base); got < 1.299 || got > 1.301 {
		t.Errorf("prefill ×%v; want 1.3", got)
	}
	if got := float64(p.DecodeStepNs(16, 16000)) / float64(dbase); got < 1.299 || got > 1.301 {
		t.Errorf("decode ×%v; want 1.3", got)
	}
	for _, bad := range []float64{-1, 0.001, 1000} {
		c := testConfig("narwhal", 4)
		c.EngineSlowdown = bad
		if _, err := c.Normalize(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("slowdown %v: %v", bad, err)
		}
	}
}

// runCalib runs the synthetic workload under the narwhal policy and
// returns the controller's profile of the simulated engines at the end.
func runCalib(t *testing.T, slowdown float64, mode string, calibrate bool) controller.Profile {
	t.Helper()
	cfg := testConfig("narwhal", 8)
	cfg.TTFTSLOS, cfg.TPOTSLOS = 2, 0.2
	cfg.EngineSlowdown, cfg.ControllerProfile, cfg.Calibrate = slowdown, mode, calibrate
	var c *core.Core
	if _, err := Run(context.Background(), cfg, syntheticWorkload(2000), WithCoreReady(func(x *core.Core) { c = x })); err != nil {
		t.Fatal(err)
	}
	p, _ := LookupProfile(cfg.Profile)
	for _, q := range c.Controller().Profiles() {
		if profile.NormModel(q.Model) == profile.NormModel(p.Model) && q.TP == p.TP {
			return q
		}
	}
	t.Fatal("no profile for the simulated engines")
	return controller.Profile{}
}

// End to end in the simulator: engines 30 % slower than their published
// profile report their per-interval figures (the wire's LatencyInterval),
// and the controller started from the stale (nominal) profile learns the
// slowdown; with --calibrate=false it keeps the stale one.
func TestCalibrationLearnsTheSlowdownEndToEnd(t *testing.T) {
	p, _ := LookupProfile(DefaultProfile)
	nominal, err := ControllerProfiles(p, 4000, 4000)
	if err != nil {
		t.Fatal(err)
	}
	nom := nominal.Profiles[0]
	cal := runCalib(t, 1.3, ProfileNominal, true)
	if cal.Calibration == nil || cal.Calibration.PrefillSamples == 0 || cal.Calibration.DecodeSamples == 0 {
		t.Fatalf("no calibration: %+v", cal.Calibration)
	}
	for _, l := range []float64{500, 1500, 3000} {
		if r := cal.Prefill.Seconds(l) / nom.Prefill.Seconds(l); r < 1.2 || r > 1.4 {
			t.Errorf("prefill(%v): calibrated / nominal = %.3f; want ≈ 1.3", l, r)
		}
	}
	if r := cal.Decode.StepSeconds(16, 16*1500) / nom.Decode.StepSeconds(16, 16*1500); r < 1.2 || r > 1.4 {
		t.Errorf("decode step: calibrated / nominal = %.3f; want ≈ 1.3", r)
	}
	stale := runCalib(t, 1.3, ProfileNominal, false)
	if r := stale.Prefill.Seconds(1500) / nom.Prefill.Seconds(1500); stale.Calibration != nil || r < 0.98 || r > 1.02 {
		t.Errorf("--calibrate=false changed the profile: %+v", stale.Calibration)
	}
	prior := runCalib(t, 1, ProfilePrior, false)
	if prior.Origin != controller.OriginPrior {
		t.Errorf("--controller-profile prior: origin %q", prior.Origin)
	}
}

// --controller-profile none: no profile and no prior for the engines'
// model; the controller decides on observed pressure only.
func TestControllerProfileNone(t *testing.T) {
	cfg := testConfig("narwhal", 8)
	cfg.TTFTSLOS, cfg.TPOTSLOS = 2, 0.2
	cfg.ControllerProfile = ProfileNone
	bases := map[string]int{}
	if _, err := Run(context.Background(), cfg, syntheticWorkload(1000), WithDecisionHook(func(d controller.Decision) { bases[d.Basis]++ })); err != nil {
		t.Fatal(err)
	}
	if bases[controller.BasisUnprofiled] == 0 || bases[controller.BasisOfferedDemand] != 0 {
		t.Fatalf("decision bases %v; want observed_pressure_unprofiled only", bases)
	}
}

// --controller-profile FILE loads a profile file; a bad one is refused
// with its file and line.
func TestControllerProfileFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n\"profiles\": [{\"model\": \"\"}]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("narwhal", 4)
	cfg.ControllerProfile = bad
	_, err := Run(context.Background(), cfg, syntheticWorkload(10))
	if err == nil || !strings.Contains(err.Error(), bad+":2: profiles[0].model") {
		t.Fatalf("bad file: %v", err)
	}
}

// --controller-profile-error X hands the controller the exact (or
// nominal) profile with every time X times the engines' own, and is
// refused for the modes it does not apply to.
func TestControllerProfileError(t *testing.T) {
	p, _ := LookupProfile(DefaultProfile)
	exact, err := ControllerProfiles(p, 4000, 4000)
	if err != nil {
		t.Fatal(err)
	}
	ex := exact.Profiles[0]
	for _, mode := range []string{ProfileExact, ProfileNominal} {
		cfg := testConfig("narwhal", 8)
		cfg.TTFTSLOS, cfg.TPOTSLOS = 2, 0.2
		cfg.ControllerProfile, cfg.ControllerProfileError = mode, 1.05
		var c *core.Core
		res, err := Run(context.Background(), cfg, syntheticWorkload(200), WithCoreReady(func(x *core.Core) { c = x }))
		if err != nil {
			t.Fatal(err)
		}
		if res.ControllerProfileError != 1.05 {
			t.Errorf("%s: result's controller_profile_error %v; want 1.05", mode, res.ControllerProfileError)
		}
		got := c.Controller().Profiles()[0]
		for _, l := range []float64{500, 2000} {
			if r := got.Prefill.Seconds(l) / ex.Prefill.Seconds(l); r < 1.045 || r > 1.055 {
				t.Errorf("%s: prefill(%v) ×%.4f of exact; want 1.05", mode, l, r)
			}
		}
		if r := got.Decode.StepSeconds(32, 32*1000) / ex.Decode.StepSeconds(32, 32*1000); r < 1.045 || r > 1.055 {
			t.Errorf("%s: decode step ×%.4f of exact; want 1.05", mode, r)
		}
	}
	for _, bad := range []struct {
		mode string
		x    float64
	}{{ProfilePrior, 1.01}, {ProfileNone, 0.99}, {ProfileExact, 0.05}, {ProfileExact, 11}} {
		cfg := testConfig("narwhal", 4)
		cfg.ControllerProfile, cfg.ControllerProfileError = bad.mode, bad.x
		if _, err := cfg.Normalize(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s with error %v: %v; want ErrBadConfig", bad.mode, bad.x, err)
		}
	}
}

// The engines report their latency intervals whatever --calibrate says,
// as an agent streams them whatever the core does with them:
// --calibrate=false is the core's option (core.WithCalibration), not a
// silenced agent. A core built with calibration on, driven by a run with
// cfg.Calibrate false, still learns from the intervals.
func TestLatencyIntervalsReachTheCoreWithoutCalibrate(t *testing.T) {
	cfg := testConfig("narwhal", 8)
	cfg.TTFTSLOS, cfg.TPOTSLOS = 2, 0.2
	cfg.EngineSlowdown, cfg.ControllerProfile, cfg.Calibrate = 1.3, ProfileNominal, false
	var c *core.Core
	factory := func(a controller.Actuator, ps *controller.ProfileSet) (*core.Core, error) {
		cc := core.DefaultConfig()
		cc.TTFTSLOS, cc.TPOTSLOS = cfg.TTFTSLOS, cfg.TPOTSLOS
		var err error
		c, err = core.New(cc, core.WithActuator(a), core.WithProfiles(ps)) // calibration on
		return c, err
	}
	if _, err := Run(context.Background(), cfg, syntheticWorkload(2000), WithCoreFactory(factory)); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, _ := LookupProfile(cfg.Profile)
	for _, q := range c.Controller().Profiles() {
		if profile.NormModel(q.Model) == profile.NormModel(p.Model) && q.TP == p.TP {
			if q.Calibration == nil || q.Calibration.PrefillSamples == 0 || q.Calibration.DecodeSamples == 0 {
				t.Fatalf("the core saw no latency intervals: %+v", q.Calibration)
			}
			return
		}
	}
	t.Fatal("no profile for the simulated engines")
}
