package controller

import (
	"fmt"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

const sec = int64(1e9)

// fakeHistory is a stationary history: cells hold counts per second of
// window, scaled to each window's span, and a fixed evidence answer. It
// counts Window calls.
type fakeHistory struct {
	cells []buckets.Cell // Count: per second... scaled by perS
	perS  []float64
	// since and until (optional, with perS): cell i arrives only in
	// [since[i], until[i]) (0: unbounded), so that a window's mix depends
	// on where it lies; a bounded cell outside a window is left out.
	since, until []int64
	overflow     buckets.Cohort
	// retainedOverflow: overflow retained outside the windows read (the
	// window's own overflow counts as retained too).
	retainedOverflow bool
	ev               buckets.Evidence
	windows          int
	lastCut          int64
}

func (f *fakeHistory) Window(fromNs, toNs int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	f.windows++
	w := buckets.Window{FromNs: fromNs, ToNs: toNs, Buckets: 1, Overflow: f.overflow}
	for i, c := range f.cells {
		if f.perS != nil {
			lo, hi := fromNs, toNs
			if f.since != nil && f.since[i] != 0 {
				lo = max(lo, f.since[i])
			}
			if f.until != nil && f.until[i] != 0 {
				hi = min(hi, f.until[i])
			}
			if hi <= lo && (lo != fromNs || hi != toNs) {
				continue
			}
			c.Count = int64(f.perS[i]*float64(hi-lo)/1e9 + 0.5)
		}
		dst = append(dst, c)
		w.Exact += c.Count
	}
	return dst, w
}

func (f *fakeHistory) HasOverflow() bool { return f.overflow.Count > 0 || f.retainedOverflow }

func (f *fakeHistory) Evidence(cutoffNs, toNs int64) buckets.Evidence {
	f.lastCut = cutoffNs
	return f.ev
}

// rate returns cells giving ratePerS requests/s of one shape over spanS.
func steady(input, output int64, ratePerS float64) *fakeHistory {
	return &fakeHistory{
		cells: []buckets.Cell{{Shape: buckets.Shape{Input: input, Output: output}}},
		perS:  []float64{ratePerS},
		ev:    buckets.Evidence{SpanNs: 30 * sec, Observations: 1000, Buckets: 30},
	}
}

// timing: 1 s step, 10 s short horizon, 60 s long; DistServe OPT-13B chat SLOs.
func testTiming() Timing {
	return Timing{StepNs: sec, ShortNs: 10 * sec, LongNs: 60 * sec, TTFTSLOS: 0.25, TPOTSLOS: 0.1}
}

// testConfig: gates that pass by default (1 confirm step, no cooldown or dwell).
func testConfig() Config {
	c := DefaultConfig()
	c.CooldownS, c.DwellS, c.ConfirmSteps = 0, 0, 1
	c.MinEvidenceArrivals = 10
	return c
}

// closedFormConfig: testConfig with the closed-form scoring, for the
// tests that pin its pressures, margins and corrections (the default
// scoring is the rollout; rollout_test.go pins that one).
func closedFormConfig() Config {
	c := testConfig()
	c.Scoring = ScoringClosedForm
	return c
}

func newTestController(t testing.TB, cfg Config, np, nd int, opts ...Option) *Controller {
	t.Helper()
	c, err := New(cfg, testTiming(), BuiltinProfiles(), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	addEngines(t, c, np, nd)
	return c
}

func addEngines(t testing.TB, c *Controller, np, nd int) {
	t.Helper()
	for i := 0; i < np+nd; i++ {
		r := RolePrefill
		if i >= np {
			r = RoleDecode
		}
		e := Engine{ID: fmt.Sprintf("e%03d", i), Node: "n", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: r, Live: true, KVCapacityTokens: 66144}
		if err := c.UpsertEngine(e); err != nil {
			t.Fatalf("upsert: %v", err)
		}
	}
}

// setResident reports r as the resident work of every serving engine in
// role at nowNs, with KV capacity capTok tokens each.
func setResident(t testing.TB, c *Controller, role Role, nowNs int64, r Resident, capTok int64) {
	t.Helper()
	for _, e := range c.Engines() {
		if e.Role == role && e.State == StateServing {
			if err := c.UpdateEngine(e.ID, nowNs, r, capTok, true); err != nil {
				t.Fatal(err)
			}
		}
	}
}
