package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Online calibration survives a restart through the state file: a core
// pricing Llama-3.1-8B on H100 with its geometry prior learns engines
// 1.6× slower than the prior, and the core started again on the same
// state file prices them as calibrated (the profile is the resolver's,
// added when the engine first reports, so the saved calibration waits
// for it), not from the prior.
func TestCalibrationSurvivesRestart(t *testing.T) {
	const model, gpu = "meta-llama/Llama-3.1-8B-Instruct", "H100"
	state := filepath.Join(t.TempDir(), "state.json")
	eng := controller.Engine{ID: "e1", Node: "n1", Model: model, GPU: gpu, TP: 1, Role: controller.RolePrefill, Live: true}
	c, err := New(DefaultConfig(), WithStateFile(state))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UpsertEngine(eng); err != nil {
		t.Fatal(err)
	}
	prior := c.Controller().Profiles()
	if len(prior) == 0 || prior[len(prior)-1].Origin != controller.OriginPrior {
		t.Fatalf("setup: no prior profile for %s on %s", model, gpu)
	}
	pp := prior[len(prior)-1]
	now := t0
	for i := 0; i < 120; i++ {
		now += sec
		l := float64(500 + 20*i)
		b := float64(8 + i%32)
		li := controller.LatencyInterval{IntervalS: 1,
			PrefillCount: 1, PrefillSeconds: 1.6 * pp.Prefill.Seconds(l), PrefillTokens: l, PrefillTokensSq: l * l,
			DecodeCount: 10, DecodeSeconds: 10 * 1.6 * pp.Decode.StepSeconds(b, b*1000), DecodeBatch: b, DecodeCtxTokens: b * 1000}
		if err := c.ObserveLatency("e1", now, li); err != nil {
			t.Fatal(err)
		}
	}
	c.Step(now)
	learned := c.Controller().Profiles()
	cal := learned[len(learned)-1]
	if r := cal.Prefill.Seconds(2000) / pp.Prefill.Seconds(2000); r < 1.5 || r > 1.7 {
		t.Fatalf("setup: calibrated prefill ×%.2f of the prior; want ≈ 1.6", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c2, err := New(DefaultConfig(), WithStateFile(state))
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.UpsertEngine(eng); err != nil {
		t.Fatal(err)
	}
	got := c2.Controller().Profiles()
	p2 := got[len(got)-1]
	if p2.Calibration == nil || p2.Calibration.PrefillSamples != cal.Calibration.PrefillSamples || p2.Calibration.DecodeSamples != cal.Calibration.DecodeSamples {
		t.Fatalf("restarted core's calibration %+v; want %+v", p2.Calibration, cal.Calibration)
	}
	if p2.Prefill != cal.Prefill || p2.Decode != cal.Decode {
		t.Errorf("restarted core prices prefill %+v decode %+v; want the calibrated %+v %+v", p2.Prefill, p2.Decode, cal.Prefill, cal.Decode)
	}
	// It keeps learning from there.
	l := 2000.0
	if err := c2.ObserveLatency("e1", now+sec, controller.LatencyInterval{IntervalS: 1, PrefillCount: 1, PrefillSeconds: 1.6 * pp.Prefill.Seconds(l), PrefillTokens: l, PrefillTokensSq: l * l}); err != nil {
		t.Fatal(err)
	}
	got = c2.Controller().Profiles()
	if n := got[len(got)-1].Calibration.PrefillSamples; n != cal.Calibration.PrefillSamples+1 {
		t.Errorf("prefill samples after one more interval %d; want %d", n, cal.Calibration.PrefillSamples+1)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	// Started without calibration, the saved one is not applied.
	c3, err := New(DefaultConfig(), WithStateFile(state), WithCalibration(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := c3.UpsertEngine(eng); err != nil {
		t.Fatal(err)
	}
	got = c3.Controller().Profiles()
	if p3 := got[len(got)-1]; p3.Calibration != nil || p3.Prefill != pp.Prefill {
		t.Errorf("WithCalibration(false) restored a calibration: %+v", p3.Calibration)
	}
}

// A state file whose calibration is impossible (a multiplier outside the
// calibration's bounds) stops the start with the entry and the field.
func TestStateFileBadCalibrationRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	bad := `{"version":1,"seq":0,"last_move_ns":0,"confirm":{"dir":0,"count":0,"seq":0},"engines":[],"risks":[],` +
		`"calibrations":[{"model":"m","gpu":"H100","tp":1,"start":[0,0,0,0,0,0],` +
		`"prefill":{"m":[[0,0,0],[0,0,0],[0,0,0]],"v":[0,0,0],"n":0,"last_ns":0,"theta":[1,1,1]},` +
		`"decode":{"m":[[0,0,0],[0,0,0],[0,0,0]],"v":[0,0,0],"n":0,"last_ns":0,"theta":[1,1e6,1]},` +
		`"stats":{"prefill_scale":[1,1,1],"decode_scale":[1,1,1],"prefill_samples":0,"decode_samples":0,"prefill_fit_error":0,"decode_fit_error":0}}]}`
	if err := os.WriteFile(state, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(DefaultConfig(), WithStateFile(state))
	if err == nil || !strings.Contains(err.Error(), "calibrations[0].decode: theta") {
		t.Fatalf("bad calibration: %v; want an error naming calibrations[0].decode theta", err)
	}
}
