package fuzz

import (
	"errors"
	"math"
	"os"
	"testing"

	"github.com/narwhal-io/narwhal/core/profile"
)

// FuzzProfileFile feeds arbitrary bytes to the profile file parser (what
// an operator's --profiles file or ConfigMap holds): it must never panic,
// must fail only with profile.ErrFile, and a profile it accepts must
// price every prompt it covers, and decode steps of sequences of 1,024
// tokens where it covers them, at a finite time, never negative, that
// does not fall as the work grows.
func FuzzProfileFile(f *testing.F) {
	if b, err := os.ReadFile("../core/profile/testdata/example-profiles.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"profiles":[{"model":"m","gpu":"H100","tp":1,"source":"s","prefill_points":[{"input_tokens":512,"seconds":0.03},{"input_tokens":4096,"seconds":0.3}]}]}`))
	f.Add([]byte(`{"profiles":[{"model":"m","gpu":"H100","tp":1,"source":"s","decode_points":[{"batch":1,"ctx_tokens":1024,"seconds":0.007},{"batch":64,"ctx_tokens":65536,"seconds":0.011}]}]}`))
	f.Add([]byte(`{"profiles":[{"model":"m","gpu":"H100","tp":1,"source":"s","prefill_points":[{"input_tokens":1e308,"seconds":-0}]}]}`))
	f.Add([]byte(`{"profiles":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := profile.Parse("fuzz.json", data)
		if err != nil {
			if !errors.Is(err, profile.ErrFile) {
				t.Fatalf("error without ErrFile: %v", err)
			}
			if set != nil {
				t.Fatalf("a set returned with the error %v", err)
			}
			return
		}
		if set == nil || len(set.Profiles) == 0 {
			t.Fatalf("accepted without a profile")
		}
		for i := range set.Profiles {
			p := &set.Profiles[i]
			if p.HasPrefill {
				prev := 0.0
				for _, in := range []float64{1, 16, 512, 4096, 32768} {
					if !p.CoversPrefill(int64(in)) {
						break
					}
					s := p.Prefill.Seconds(in)
					if !(s >= 0) || math.IsInf(s, 0) || s < prev*(1-1e-9) {
						t.Fatalf("profile %d: prefill of %g tokens %g s (after %g s)", i, in, s, prev)
					}
					prev = s
				}
			}
			if p.HasDecode && p.CoversDecode(1024) {
				prev := 0.0
				for _, b := range []float64{1, 8, 64, 256} {
					s := p.Decode.StepSeconds(b, b*1024)
					if !(s >= 0) || math.IsInf(s, 0) || s < prev*(1-1e-9) {
						t.Fatalf("profile %d: decode step of batch %g %g s (after %g s)", i, b, s, prev)
					}
					prev = s
				}
			}
		}
	})
}
