package core

// Every rule of the reference page (shared/spec/narwhal-slo-and-demand.md),
// proved where it is wired: through New and the core's public calls (State,
// Step, Demand, Attainment, Collectors, Controller().Snapshot). Each test is
// named for its rule; benchmarks/mutation lists the mutation each one
// catches. The rules proved inside their packages (core/buckets,
// core/controller) are proved here again at the core's API.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

func at(s float64) int64 { return t0 + int64(math.Round(s*1e9)) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newCoreCfg(t testing.TB, cfg Config, opts ...Option) *Core {
	t.Helper()
	c, err := New(cfg, opts...)
	must(t, err)
	for i, r := range []controller.Role{controller.RolePrefill, controller.RolePrefill, controller.RoleDecode, controller.RoleDecode} {
		e := controller.Engine{ID: "e" + string(rune('0'+i)), Node: "n1", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: r, Live: true, KVCapacityTokens: 66144}
		must(t, c.UpsertEngine(e))
	}
	return c
}

// fillExact sizes 128 distinct shapes that each take an exact cell of the
// arrivals bucket at ts (input 1..n, output 1, skipping shapes whose probe
// window is full), so that later shapes overflow. It returns the shapes.
func fillExact(t *testing.T, c *Core, ts int64) []buckets.Shape { return fillExactOut(t, c, ts, 1) }

func fillExactOut(t *testing.T, c *Core, ts, out int64) []buckets.Shape {
	t.Helper()
	var used [buckets.ExactCells]bool
	var shapes []buckets.Shape
	for i := 0; len(shapes) < buckets.ExactCells; i++ {
		if i > 1e5 {
			t.Fatalf("cannot fill %d exact cells (%d filled)", buckets.ExactCells, len(shapes))
		}
		s := buckets.Shape{Input: int64(1 + i), Output: out}
		home := buckets.ProbeStart(s)
		for j := 0; j < buckets.ProbeWindow; j++ {
			if k := (home + j) % buckets.ExactCells; !used[k] {
				used[k] = true
				must(t, c.OfferSized(ts, s.Input, s.Output))
				shapes = append(shapes, s)
				break
			}
		}
	}
	return shapes
}

// fillOutputs completes 128 distinct (requested, actual) shapes at ts so
// that the outputs bucket's exact cells are full.
func fillOutputs(t *testing.T, c *Core, ts int64) {
	t.Helper()
	var used [buckets.ExactCells]bool
	n := 0
	for i := 0; n < buckets.ExactCells; i++ {
		if i > 1e5 {
			t.Fatalf("cannot fill %d exact output cells (%d filled)", buckets.ExactCells, n)
		}
		s := buckets.Shape{Input: 1000, Output: int64(2 + i)}
		home := buckets.ProbeStart(s)
		for j := 0; j < buckets.ProbeWindow; j++ {
			if k := (home + j) % buckets.ExactCells; !used[k] {
				used[k] = true
				must(t, c.Completed(ts, ts-sec, ts-sec/2, s.Input, s.Output))
				n++
				break
			}
		}
	}
}

func attTotal(c *Core) buckets.AttainmentWindow { return c.Attainment().Window(0, math.MaxInt64) }

// ---- SLO attainment ----

func TestSpecAttainmentBucketsByMonitorInterval(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MonitorIntervalS = 10 // demand buckets are 1 s
	c := newCoreCfg(t, cfg)
	must(t, c.Completed(at(1), at(0.5), at(0.6), 10, 10))
	must(t, c.Completed(at(9.5), at(9), at(9.1), 10, 10))
	must(t, c.Completed(at(10.5), at(10), at(10.1), 10, 10))
	w := c.Attainment().Window(at(3), at(3))
	if w.FromNs != at(0) || w.ToNs != at(10) || w.ByOutcome[buckets.OutcomeCompleted].Total != 2 {
		t.Fatalf("attainment bucket of t=3 s: %+v; want [0 s, 10 s) holding 2 requests (monitor_interval_s wide)", w)
	}
	st := c.State(at(65))
	if st.Attainment.FromNs != at(0) {
		t.Fatalf("State's window starts at %d s; want the 10 s bucket holding now-60 s (0 s)", (st.Attainment.FromNs-t0)/sec)
	}
}

func TestSpecAttainmentCountsTTFTMetTPOTMetAndTotalForEveryOutcome(t *testing.T) {
	c := newCore(t)                                       // TTFT SLO 0.25 s, TPOT SLO 0.1 s
	must(t, c.Completed(at(2), at(0), at(0.1), 11, 11))   // TTFT met, TPOT 0.19: missed
	must(t, c.Completed(at(1.5), at(0), at(0.5), 11, 11)) // TTFT missed, TPOT 0.1: met
	must(t, c.Failed(at(1), at(0), at(0.2)))              // TTFT met
	must(t, c.Failed(at(1), at(0), 0))
	must(t, c.Expired(at(3), at(0), at(0.3))) // TTFT missed
	must(t, c.Refused(at(1)))
	w := c.State(at(5)).Attainment.ByOutcome
	want := map[string]buckets.Counts{
		"completed": {TTFTMet: 1, TPOTMet: 1, Total: 2},
		"failed":    {TTFTMet: 1, TPOTMet: 0, Total: 2},
		"expired":   {TTFTMet: 0, TPOTMet: 0, Total: 1},
		"refused":   {TTFTMet: 0, TPOTMet: 0, Total: 1},
	}
	for k, v := range want {
		if w[k] != v {
			t.Fatalf("attainment %s: %+v; want %+v", k, w[k], v)
		}
	}
}

// TestPruningAdvancesFromTheNewestRecordedBucket: a step long after the
// last record expires nothing (the reproduction: one step 300 s
// later emptied every history); the next record does, and covered_s stays
// the age of what is really retained.
func TestPruningAdvancesFromTheNewestRecordedBucket(t *testing.T) {
	c := newCore(t)
	must(t, c.OfferSized(at(0), 1000, 64))
	must(t, c.Admitted(at(0), "e0", 1000, 64))
	must(t, c.Completed(at(1), at(0), at(0.1), 64, 10))
	c.Step(at(1))
	d := c.Step(at(300))
	st := c.State(at(300))
	dh := st.DemandHistory
	if dh.Arrivals.Observations != 1 || dh.Residency.Observations != 1 || dh.Outputs.Observations != 1 {
		t.Fatalf("a step 300 s after the last record expired history: %+v", dh)
	}
	if got := attTotal(c).ByOutcome[buckets.OutcomeCompleted].Total; got != 1 {
		t.Fatalf("attainment after the step: %d requests; want 1 (nothing recorded since)", got)
	}
	if st.Attainment.CoveredS != 240 {
		t.Fatalf("covered_s %v; want 240 (the oldest retained bucket, at 0 s, is 300 s old; capped at four windows)", st.Attainment.CoveredS)
	}
	// Queries look at a window ending at now: nothing arrived in it.
	if d.Snapshot.Long.Requests != 0 || d.Snapshot.Short.Requests != 0 {
		t.Fatalf("the step's windows end at now; got long %v short %v requests", d.Snapshot.Long.Requests, d.Snapshot.Short.Requests)
	}
	// New evidence expires: the arrivals window (60 s) and the outputs
	// (240 s) fall out as the newest recorded bucket moves.
	must(t, c.OfferSized(at(300), 500, 8))
	must(t, c.Completed(at(300), at(299), at(299.1), 8, 8))
	dh = c.State(at(300)).DemandHistory
	if dh.Arrivals.Observations != 1 || dh.Outputs.Observations != 1 {
		t.Fatalf("after new records: %+v; want only the new observations", dh)
	}
	if s, _ := c.Demand().Arrivals.Expired(); s != 1 {
		t.Fatalf("arrivals expired %d; want 1", s)
	}
	// covered_s: the span since the oldest retained bucket (60 s, four
	// windows back from the newest recorded bucket), in which the core
	// recorded every request there was; what is retained is what that
	// span held.
	if st := c.State(at(300)); st.Attainment.CoveredS != 240 || st.Attainment.ByOutcome["completed"].Total != 1 || attTotal(c).ByOutcome[buckets.OutcomeCompleted].Total != 1 {
		t.Fatalf("after the old bucket expired: covered_s %v, %+v; want 240 s holding the one new request", st.Attainment.CoveredS, st.Attainment.ByOutcome)
	}
}

// TestRunDoesNotExpireHistory: Run steps on the wall clock, years after
// these records (t0 is in 2023); the steps expire none of them.
func TestRunDoesNotExpireHistory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StepS, cfg.DemandWindowS, cfg.MinEvidenceSpanS = 0.005, 10, 1
	c := newCoreCfg(t, cfg)
	must(t, c.OfferSized(at(0), 1000, 64))
	must(t, c.Completed(at(1), at(0), at(0.1), 64, 10))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	must(t, c.Run(ctx))
	if n := len(c.Decisions(0, 0)); n < 2 {
		t.Fatalf("Run made %d steps; want several", n)
	}
	dh := c.State(at(1)).DemandHistory
	if dh.Arrivals.Observations != 1 || dh.Outputs.Observations != 1 || attTotal(c).ByOutcome[buckets.OutcomeCompleted].Total != 1 {
		t.Fatalf("after Run: %+v; want the records kept", dh)
	}
	// Run made the wall clock the core's clock: a record a minute ahead
	// of it is refused.
	if err := c.OfferSized(time.Now().Add(time.Minute).UnixNano(), 1, 1); !errors.Is(err, ErrAheadOfClock) {
		t.Fatalf("a record a minute ahead of the wall clock: %v; want ErrAheadOfClock", err)
	}
}

func TestSpecAttainmentRetainsFourDemandWindows(t *testing.T) {
	c := newCore(t) // window 60 s, attainment buckets 10 s
	must(t, c.Refused(at(0)))
	must(t, c.Refused(at(240)))
	if got := attTotal(c).ByOutcome[buckets.OutcomeRefused].Total; got != 2 {
		t.Fatalf("at 240 s: %d retained; want 2 (four windows)", got)
	}
	must(t, c.Refused(at(250)))
	if got := attTotal(c).ByOutcome[buckets.OutcomeRefused].Total; got != 2 {
		t.Fatalf("at 250 s: %d retained; want 2 (the bucket at 0 s expired)", got)
	}
	if c.Attainment().Expired() != 1 {
		t.Fatalf("expired %d; want 1", c.Attainment().Expired())
	}
}

func TestSpecAttainmentWindowIncludesTheFullBoundaryBucket(t *testing.T) {
	c := newCore(t)
	must(t, c.Refused(at(1)))
	must(t, c.Refused(at(65)))
	st := c.State(at(65)) // window [5 s, 65 s]: the bucket [0, 10) is the boundary
	if got := st.Attainment.ByOutcome["refused"].Total; got != 2 || st.Attainment.FromNs != at(0) {
		t.Fatalf("window from %d s holds %d; want from 0 s, 2 (boundary bucket whole)", (st.Attainment.FromNs-t0)/sec, got)
	}
}

func TestSpecCoveredSIsTheAgeOfTheOldestRetainedBucketCapped(t *testing.T) {
	c := newCore(t)
	if got := c.State(at(5)).Attainment.CoveredS; got != 0 {
		t.Fatalf("covered_s before any record: %v; want 0", got)
	}
	must(t, c.Refused(at(0)))
	if got := c.State(at(30)).Attainment.CoveredS; got != 30 {
		t.Fatalf("covered_s %v; want 30", got)
	}
	must(t, c.Refused(at(200)))
	if got := c.State(at(205)).Attainment.CoveredS; got != 205 {
		t.Fatalf("covered_s %v; want 205", got)
	}
	if got := c.State(at(1000)).Attainment.CoveredS; got != 240 {
		t.Fatalf("covered_s %v; want 240 (capped at the retention)", got)
	}
}

// ---- Unsized offers ----

func TestSpecUnsizedPendingCountsBodiesStillBeingRead(t *testing.T) {
	c := newCore(t)
	for range 3 {
		c.OfferStarted(at(0))
	}
	must(t, c.OfferSized(at(0), 100, 10))
	if got := c.State(at(1)).DemandHistory.Unsized.Pending; got != 2 {
		t.Fatalf("pending %d; want 2", got)
	}
	d := c.Step(at(1))
	if d.Snapshot.PendingUnsized != 2 || d.Snapshot.IncompleteReason != "unsized_pending" {
		t.Fatalf("decision: pending %d reason %q; want 2, unsized_pending", d.Snapshot.PendingUnsized, d.Snapshot.IncompleteReason)
	}
}

// A request refused after it was sized is no longer a body being read,
// but its sized event already ended its pending offer: RefusedSized
// records the refusal and leaves the other offers pending (Refused, for
// a refusal before sizing, ends one). Both count in attainment; a bad
// arrival changes nothing.
func TestSpecUnsizedPendingRefusedAfterSizing(t *testing.T) {
	c := newCore(t)
	for range 3 {
		c.OfferStarted(at(0))
	}
	must(t, c.OfferSized(at(0.1), 100, 10))
	must(t, c.RefusedSized(at(0.2), at(0.1)))
	st := c.State(at(1))
	if st.DemandHistory.Unsized.Pending != 2 {
		t.Fatalf("after a sized request's refusal: pending %d; want 2 (two bodies still being read)", st.DemandHistory.Unsized.Pending)
	}
	must(t, c.Refused(at(0.3))) // refused while its body was read
	if got := c.State(at(1)).DemandHistory.Unsized.Pending; got != 1 {
		t.Fatalf("after a refusal before sizing: pending %d; want 1", got)
	}
	before := c.State(at(1))
	for _, bad := range [][2]float64{{0.5, 0.6}, {0.5, 0.51}} {
		if err := c.RefusedSized(at(bad[0]), at(bad[1])); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("RefusedSized(%v, arrival %v): %v; want ErrInvalidInput", bad[0], bad[1], err)
		}
	}
	if err := c.RefusedSized(at(0.5), 0); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("RefusedSized without an arrival: %v; want ErrInvalidInput", err)
	}
	after := c.State(at(1))
	if after.DemandHistory.Unsized.Pending != before.DemandHistory.Unsized.Pending || refusedCount(c, after) != refusedCount(c, before) || refusedCount(c, after) != 2 {
		t.Fatalf("refused calls changed state: pending %d -> %d, refused %d -> %d (want 2)", before.DemandHistory.Unsized.Pending,
			after.DemandHistory.Unsized.Pending, refusedCount(c, before), refusedCount(c, after))
	}
}

// TestCrashedRoutersOfferTimesOutUnderTraffic: an offer a crashed router
// left pending times out after pending_timeout_s while other routers'
// offers keep starting and ending (ends carry no identity, and matching
// them oldest-first credited them to the leaked offer, which then never
// expired: every decision read incomplete demand for as long as traffic
// flowed). Offers that start and end between steps are never expired.
func TestCrashedRoutersOfferTimesOutUnderTraffic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PendingTimeoutS = 30
	traffic := func(c *Core, from, to float64) {
		for s := from; s < to; s++ {
			for i := range 10 { // ten short offers a second, each read and sized
				c.OfferStarted(at(s + 0.05*float64(i)))
				must(t, c.OfferSized(at(s+0.05*float64(i)+0.01), 500, 100))
			}
			c.Step(at(s + 1))
		}
	}
	healthy := newCoreCfg(t, cfg)
	traffic(healthy, 0, 120)
	if got := healthy.PendingExpired(); got != 0 {
		t.Fatalf("healthy traffic: %d offers expired; want 0", got)
	}

	c := newCoreCfg(t, cfg)
	c.OfferStarted(at(0)) // the crashed router's offer
	c.Step(at(0))
	traffic(c, 0, 29)
	if got := c.State(at(29)).DemandHistory.Unsized.Pending; got != 1 {
		t.Fatalf("at 29 s: pending %d; want the crashed offer (1)", got)
	}
	traffic(c, 29, 60)
	st := c.State(at(60))
	if st.DemandHistory.Unsized.Pending != 0 || c.PendingExpired() != 1 {
		t.Fatalf("at 60 s: pending %d, expired %d; want 0 and 1", st.DemandHistory.Unsized.Pending, c.PendingExpired())
	}
	if d := c.Step(at(61)); d.Snapshot.Incomplete {
		t.Fatalf("demand still incomplete at 61 s: %q", d.Snapshot.IncompleteReason)
	}
	traffic(c, 61, 120)
	if got := c.PendingExpired(); got != 1 {
		t.Fatalf("after another minute of traffic: %d expired; want still 1", got)
	}
}

// TestPendingOfferTimesOut: a pending offer ends when sized (accepted or
// refused), refused, abandoned, or pending_timeout_s later, when it counts
// as an unsized observation (issue 16, item 2).
func TestPendingOfferTimesOut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PendingTimeoutS = 30
	c := newCoreCfg(t, cfg)
	c.OfferStarted(at(0)) // a router that crashed while reading the body
	c.Step(at(0))
	if d := c.Step(at(29)); d.Snapshot.IncompleteReason != "unsized_pending" {
		t.Fatalf("at 29 s: %q; want unsized_pending", d.Snapshot.IncompleteReason)
	}
	c.OfferStarted(at(29.5)) // a newer offer: not timed out with the old one
	d := c.Step(at(31))
	st := c.State(at(31))
	if st.DemandHistory.Unsized.Pending != 1 || st.DemandHistory.Unsized.Observations != 1 || c.PendingExpired() != 1 {
		t.Fatalf("after the timeout: %+v, expired %d; want 1 pending (the newer offer), 1 unsized observation", st.DemandHistory.Unsized, c.PendingExpired())
	}
	if d.Snapshot.PendingUnsized != 1 {
		t.Fatalf("decision pending %d; want 1", d.Snapshot.PendingUnsized)
	}
	c.Step(at(62))
	if got := c.State(at(62)).DemandHistory.Unsized; got.Pending != 0 || got.Observations != 2 {
		t.Fatalf("second timeout: %+v; want 0 pending, 2 observations", got)
	}
	if d := c.Step(at(63)); d.Snapshot.Incomplete {
		t.Fatalf("demand still incomplete: %q", d.Snapshot.IncompleteReason)
	}
	// Every refusal path ends a pending offer: a sized event whose values
	// are refused, one stamped too old, a predictive refusal.
	for _, end := range []func() error{
		func() error { return c.OfferSized(at(63), -1, 10) },
		func() error { return c.OfferSized(at(63), 10, buckets.MaxTokens+1) },
		func() error { return c.OfferSized(at(0), 10, 10) },
		func() error { return c.Refused(at(63)) },
		func() error { return c.OfferAbandoned(at(63)) },
	} {
		c.OfferStarted(at(63))
		_ = end()
		if got := c.demand.Pending(); got != 0 {
			t.Fatalf("an offer stays pending after its end (%d)", got)
		}
	}
}

func TestSpecUnsizedObservationsCountRetainedOffersEndedBeforeSizing(t *testing.T) {
	c := newCore(t)
	c.OfferStarted(at(0))
	must(t, c.OfferAbandoned(at(0)))
	c.OfferStarted(at(10))
	must(t, c.OfferAbandoned(at(10)))
	if got := c.State(at(10)).DemandHistory.Unsized.Observations; got != 2 {
		t.Fatalf("unsized observations %d; want 2", got)
	}
	must(t, c.OfferSized(at(61), 10, 10)) // the bucket at 0 s expires
	if got := c.State(at(61)).DemandHistory.Unsized.Observations; got != 1 {
		t.Fatalf("after expiry %d; want 1 (retained only)", got)
	}
	d := c.Step(at(61))
	if d.Snapshot.Long.Unsized != 1 {
		t.Fatalf("decision long unsized %d; want 1", d.Snapshot.Long.Unsized)
	}
}

// ---- Input-size repricing ----

func TestSpecParsedOffersEnterAtTheLocalEstimate(t *testing.T) {
	c := newCore(t)
	must(t, c.OfferSized(at(0.5), 1000, 64))
	d := c.Step(at(1))
	if d.Snapshot.Long.MeanInput != 1000 || d.Snapshot.Long.Requests != 1 {
		t.Fatalf("long %+v; want one request at its estimate 1000", d.Snapshot.Long)
	}
}

func TestSpecTokenizedRepricesAtTheOriginalArrival(t *testing.T) {
	c := newCore(t)
	a := at(3.5)
	must(t, c.OfferSized(a, 1000, 64))
	must(t, c.OfferSized(at(10), 50, 5)) // time moves on
	must(t, c.Tokenized(a, 1000, 1200, 64))
	cells, _ := c.Demand().Arrivals.Window(a, a, nil)
	var got []buckets.Cell
	for _, cl := range cells {
		if cl.Count > 0 {
			got = append(got, cl)
		}
	}
	if len(got) != 1 || got[0].Shape != (buckets.Shape{Input: 1200, Output: 64}) || got[0].Count != 1 {
		t.Fatalf("arrival bucket %+v; want the exact shape {1200 64} in the bucket of the original arrival", got)
	}
	if _, w := c.Demand().Arrivals.Window(at(4), at(10), nil); w.Count() != 1 {
		t.Fatalf("later buckets hold %d; want only the other offer", w.Count())
	}
}

func TestRejectedBeforeTokenizationKeepsEstimate(t *testing.T) {
	c := newCore(t)
	must(t, c.OfferSized(at(1), 250, 32))
	must(t, c.Refused(at(1.1))) // rejected before tokenization: no Tokenized
	must(t, c.OfferSized(at(1), 300, 32))
	must(t, c.Tokenized(at(1), 300, 280, 32))
	must(t, c.Admitted(at(1.2), "e0", 280, 32))
	d := c.Step(at(2))
	if d.Snapshot.Long.Requests != 2 || d.Snapshot.Long.MeanInput != 265 || d.Snapshot.Long.MaxInput != 280 || d.Snapshot.Long.Unsized != 0 {
		t.Fatalf("long %+v; want 2 requests, the kept estimate 250 and the repriced 280", d.Snapshot.Long)
	}
	if got := attTotal(c).ByOutcome[buckets.OutcomeRefused].Total; got != 1 {
		t.Fatalf("refusal not recorded (%d)", got)
	}
}

func TestSpecRepriceIntoAnotherCohortInvalidatesBoundaryEvidence(t *testing.T) {
	c := newCore(t)
	shapes := fillExactOut(t, c, at(5.5), 50)
	big := buckets.Shape{Input: 9000, Output: 50}
	must(t, c.OfferSized(at(5.5), big.Input, big.Output)) // overflows: defines the max input
	must(t, c.OfferSized(at(5.5), 100, 0))                // overflows, zero output
	other := buckets.Shape{Input: 8000, Output: 50}
	must(t, c.OfferSized(at(5.5), other.Input, other.Output))
	// inside the cohort: no boundary observation left it, not even the
	// one at the maximum input
	must(t, c.Tokenized(at(5.5), 100, 101, 0))
	must(t, c.Tokenized(at(5.5), big.Input, 8500, big.Output))
	must(t, c.Tokenized(at(5.5), 8500, big.Input, big.Output))
	if ev := c.Demand().Arrivals.Evidence(at(5), at(6)); ev.SkippedInvalid != 0 || ev.Buckets != 1 {
		t.Fatalf("a reprice inside the overflow cohort invalidated evidence: %+v", ev)
	}
	// out of the cohort, into an exact cell: the max-input observation
	must(t, c.Tokenized(at(5.5), big.Input, shapes[0].Input, big.Output))
	must(t, c.OfferSized(at(7.5), 10, 10))
	d := c.Step(at(8))
	if d.Snapshot.Long.InvalidBuckets != 1 {
		t.Fatalf("invalid buckets %d; want 1", d.Snapshot.Long.InvalidBuckets)
	}
	if ev := c.Demand().Arrivals.Evidence(at(5), at(8)); ev.SkippedInvalid != 1 || ev.Observations != 1 {
		t.Fatalf("evidence %+v; want the invalid bucket skipped", ev)
	}
	if d.Snapshot.Long.MaxInput != 9000 {
		t.Fatalf("max input %d; want 9000 kept (conservative)", d.Snapshot.Long.MaxInput)
	}
}

// ---- Bucketing and retention ----

func TestSpecBucketHoldsAtMost128ExactShapesAndOneOverflowCohort(t *testing.T) {
	c := newCore(t)
	for i := range int64(1000) {
		must(t, c.OfferSized(at(1.5), 100+i, 20))
	}
	dh := c.State(at(2)).DemandHistory.Arrivals
	if dh.RetainedCells > buckets.ExactCells || dh.RetainedCells < buckets.ExactCells-16 || dh.Observations != 1000 || dh.OverflowObservations != 1000-dh.RetainedCells {
		t.Fatalf("arrivals %+v; want <= 128 cells, 1000 observations, the rest in one overflow cohort", dh)
	}
	_, w := c.Demand().Arrivals.Window(at(1.5), at(1.5), nil)
	if w.Overflow.Count != 1000-w.Exact || w.Overflow.MaxInput != 1099 {
		t.Fatalf("window %+v; want one cohort with every overflowed count", w)
	}
}

func TestSpecUnsizedOffersAreOneShapePerBucket(t *testing.T) {
	c := newCore(t)
	for range 5 {
		c.OfferStarted(at(1))
		must(t, c.OfferAbandoned(at(1.5)))
	}
	dh := c.State(at(2)).DemandHistory
	if dh.Arrivals.RetainedCells != 0 || dh.Unsized.Observations != 5 {
		t.Fatalf("%+v; want 5 unsized observations using no exact cell", dh)
	}
	_, w := c.Demand().Arrivals.Window(at(1), at(1), nil)
	if w.Unsized != 5 || w.Count() != 0 {
		t.Fatalf("window %+v; want one unsized cell of 5", w)
	}
}

func TestSpecBucketWidthIsMinOfOneSecondStepAndEvidenceSpan(t *testing.T) {
	for _, tc := range []struct{ step, span, want float64 }{
		{2, 10, 1}, {0.5, 10, 0.5}, {1, 0.25, 0.25}, {0.5, 0.2, 0.2},
	} {
		cfg := DefaultConfig()
		cfg.StepS, cfg.MinEvidenceSpanS, cfg.DemandWindowS = tc.step, tc.span, 30
		c, err := New(cfg)
		must(t, err)
		for _, h := range []*buckets.History{c.Demand().Arrivals, c.Demand().Residency, c.Demand().Outputs} {
			if got := float64(h.WidthNs()) / 1e9; got != tc.want {
				t.Fatalf("step %v span %v: width %v; want %v", tc.step, tc.span, got, tc.want)
			}
		}
	}
}

func TestSpecArrivalsAndResidencyRetainOneDemandWindow(t *testing.T) {
	c := newCore(t)
	must(t, c.OfferSized(at(0), 10, 10))
	must(t, c.Admitted(at(0), "e0", 10, 10))
	must(t, c.OfferSized(at(60), 10, 10))
	must(t, c.Admitted(at(60), "e0", 10, 10))
	if dh := c.State(at(60)).DemandHistory; dh.Arrivals.Observations != 2 || dh.Residency.Observations != 2 {
		t.Fatalf("at 60 s: %+v; want both kept (one window)", dh)
	}
	must(t, c.OfferSized(at(61), 10, 10))
	must(t, c.Admitted(at(61), "e0", 10, 10))
	if dh := c.State(at(61)).DemandHistory; dh.Arrivals.Observations != 2 || dh.Residency.Observations != 2 {
		t.Fatalf("at 61 s: %+v; want the 0 s bucket expired", dh)
	}
}

func TestSpecOutputsRetainFourDemandWindows(t *testing.T) {
	c := newCore(t)
	must(t, c.Completed(at(0.5), at(0), at(0.1), 10, 10))
	must(t, c.Completed(at(240), at(239), at(239.1), 10, 10))
	if got := c.State(at(240)).DemandHistory.Outputs.Observations; got != 2 {
		t.Fatalf("at 240 s: %d; want 2 (four windows)", got)
	}
	must(t, c.Completed(at(241), at(240), at(240.1), 10, 10))
	if got := c.State(at(241)).DemandHistory.Outputs.Observations; got != 2 {
		t.Fatalf("at 241 s: %d; want 2 (0 s expired)", got)
	}
}

func TestSpecRecordingPrunesWithTheControlLoopStopped(t *testing.T) {
	c := newCore(t) // never stepped
	must(t, c.OfferSized(at(0), 10, 10))
	must(t, c.OfferSized(at(100), 10, 10))
	if s, _ := c.Demand().Arrivals.Expired(); s != 1 {
		t.Fatalf("expired %d; want 1 without any step", s)
	}
}

// ---- Overflow ----

func TestSpecOverflowKeepsEveryCountAndIsPricedAtItsLargestInputAndOutput(t *testing.T) {
	c := newCore(t)
	shapes := fillExact(t, c, at(0.5))
	must(t, c.OfferSized(at(0.5), 5000, 300))
	must(t, c.OfferSized(at(0.5), 9000, 50))
	must(t, c.OfferSized(at(0.5), 7000, 100))
	snap := c.Controller().Snapshot(at(1), c.inputs(at(1)))
	var sum, sumSq float64
	for _, s := range shapes {
		sum += float64(s.Input)
		sumSq += float64(s.Input) * float64(s.Input)
	}
	n := float64(len(shapes) + 3)
	sum += 3 * 9000
	sumSq += 3 * 9000 * 9000
	l := snap.Long
	if l.Requests != n || l.Overflow != 3 || l.MaxInput != 9000 {
		t.Fatalf("long %+v; want %v requests, 3 overflow, max input 9000", l, n)
	}
	defer func() {
		// a second bucket's cohort: the window merges both, every count
		fillExact(t, c, at(1.5))
		must(t, c.OfferSized(at(1.5), 6000, 10))
		must(t, c.OfferSized(at(1.5), 6000, 10))
		l := c.Controller().Snapshot(at(2), c.inputs(at(2))).Long
		if l.Overflow != 5 || l.MaxInput != 9000 || l.Requests != 2*float64(len(shapes))+5 {
			t.Fatalf("two buckets: %+v; want 5 overflow, max input 9000", l)
		}
	}()
	if math.Abs(l.MeanInput-sum/n) > 1e-9 || math.Abs(l.MeanInputSq-sumSq/n) > 1e-6 {
		t.Fatalf("mean input %v (sq %v); want %v (%v): the cohort priced at its largest input", l.MeanInput, l.MeanInputSq, sum/n, sumSq/n)
	}
	// requested outputs priced at the cohort's largest, 300 (no learned
	// discount: nothing completed)
	wantOut := (float64(len(shapes))*1 + 3*300) / n
	if math.Abs(l.MeanOutput-wantOut) > 1e-9 || l.MaxCtxPerSeq != 9300 {
		t.Fatalf("mean output %v, max ctx %d; want %v, 9300", l.MeanOutput, l.MaxCtxPerSeq, wantOut)
	}
}

func TestSpecOverflowWithZeroRequestedOutputMarksDecodeIncomplete(t *testing.T) {
	c := newCore(t)
	fillExact(t, c, at(0.5))
	must(t, c.OfferSized(at(0.5), 5000, 300))
	if d := c.Step(at(1)); d.Snapshot.Incomplete {
		t.Fatalf("complete demand reported incomplete: %q", d.Snapshot.IncompleteReason)
	}
	must(t, c.OfferSized(at(0.5), 6000, 0))
	d := c.Step(at(2))
	if !d.Snapshot.Incomplete || d.Snapshot.IncompleteReason != "decode_overflow_zero_output" || !d.Snapshot.Long.DecodeIncomplete || d.Basis == controller.BasisOfferedDemand {
		t.Fatalf("snapshot %+v basis %s; want decode demand incomplete", d.Snapshot, d.Basis)
	}
}

// TestOverflowInOutputHistoryDisablesLearnedDiscountsUntilTheObservationsExpire:
// the reproductions. With the loop stopped 130 s after the
// overflow, the first step must not learn (the overflow is still
// retained); once new completions expire it, learning is back at once.
func TestOverflowInOutputHistoryDisablesLearnedDiscountsUntilTheObservationsExpire(t *testing.T) {
	c := newCore(t)
	fillOutputs(t, c, at(0.5))
	must(t, c.Completed(at(0.5), at(0), at(0.1), 2000, 1)) // overflows
	if !c.Demand().Outputs.HasOverflow() {
		t.Fatal("BUG: no overflow recorded")
	}
	for i := range 20 {
		must(t, c.Completed(at(100+float64(i)), at(99), at(99.5), 100, 50))
	}
	d := c.Step(at(130)) // the first step, 130 s after the overflow
	if d.Snapshot.Outputs.Learned || d.Snapshot.Outputs.Reason != controller.OutputsOverflow {
		t.Fatalf("at 130 s: %+v; want learning off (overflow retained)", d.Snapshot.Outputs)
	}
	// A restarted core and one stepping on a merged reader agree.
	d2 := newCore(t, WithDemandReaders(c.Demand().Arrivals, windowOnly{c.Demand().Outputs})).Step(at(130))
	if d2.Snapshot.Outputs.Learned {
		t.Fatalf("reader without HasOverflow: %+v; want learning off", d2.Snapshot.Outputs)
	}
	c.Step(at(239))
	must(t, c.Completed(at(240), at(239), at(239.5), 100, 50))
	if d := c.Step(at(240)); d.Snapshot.Outputs.Learned {
		t.Fatal("at 240 s the overflow is still retained")
	}
	must(t, c.Completed(at(241), at(240), at(240.5), 100, 50)) // expires the 0 s bucket
	d = c.Step(at(241))
	if !d.Snapshot.Outputs.Learned || d.Snapshot.Outputs.Discount != 0.5 {
		t.Fatalf("at 241 s: %+v; want learning back (discount 0.5) as soon as the overflow expired", d.Snapshot.Outputs)
	}
}

// windowOnly hides HasOverflow: a reader like the leader's merged demand.
type windowOnly struct{ h *buckets.History }

func (w windowOnly) Window(from, to int64, dst []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	return w.h.Window(from, to, dst)
}
func (w windowOnly) Evidence(cut, to int64) buckets.Evidence { return w.h.Evidence(cut, to) }

func TestSpecCohortCrossingAWindowBoundaryCountsWhole(t *testing.T) {
	c := newCore(t)
	for range 7 {
		must(t, c.OfferSized(at(0.2), 10, 10))
	}
	must(t, c.OfferSized(at(60.4), 10, 10))
	d := c.Step(at(60.5)) // long window from 0.5 s: the bucket [0, 1) whole
	if d.Snapshot.Long.Requests != 8 || d.Snapshot.Long.FromNs != at(0) {
		t.Fatalf("long %+v; want 8 requests from 0 s (one extra bucket at most)", d.Snapshot.Long)
	}
	d = c.Step(at(61.5)) // [1.5, 61.5]: the bucket [0, 1) no longer intersects
	if d.Snapshot.Long.Requests != 1 || d.Snapshot.Long.FromNs != at(1) {
		t.Fatalf("long %+v; want 1 request from 1 s", d.Snapshot.Long)
	}
}

func TestSpecDemandHistoryAndMetricsExposeCellsLimitObservationsOverflow(t *testing.T) {
	c := newCore(t)
	fillExact(t, c, at(0.5))
	must(t, c.OfferSized(at(0.5), 9000, 10))
	must(t, c.OfferSized(at(0.5), 9001, 10))
	dh := c.State(at(1)).DemandHistory.Arrivals
	want := buckets.KindStats{RetainedCells: 128, CellLimit: 128 * 61, Observations: 130, OverflowObservations: 2}
	if dh != want {
		t.Fatalf("demand_history.arrivals %+v; want %+v", dh, want)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, col := range c.Collectors() {
		must(t, reg.Register(col))
	}
	got := gatherMetrics(t, reg)
	for k, v := range map[string]float64{
		"narwhal_demand_history_retained_cells,kind=arrivals":         128,
		"narwhal_demand_history_cell_limit,kind=arrivals":             128 * 61,
		"narwhal_demand_history_cell_limit,kind=outputs":              128 * 241,
		"narwhal_demand_history_observations,kind=arrivals":           130,
		"narwhal_demand_history_overflow_observations,kind=arrivals":  2,
		"narwhal_core_evidence_ahead_refused_total":                   0,
		"narwhal_core_pending_offers_expired_total":                   0,
		"narwhal_demand_history_overflow_observations,kind=residency": 0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("metric %s: %v (present %v); want %v", k, g, ok, v)
		}
	}
}

func gatherMetrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return got
}

// ---- Evidence ahead of the core's clock (issue 16, item 1) ----

// TestFutureEventDoesNotExpireRetainedWindow: a record stamped 29 s ahead
// of the core's clock is refused and counted; it moves nothing, so the
// window and ordinary 40 s old events stay.
func TestFutureEventDoesNotExpireRetainedWindow(t *testing.T) {
	now := at(100)
	c := newCore(t, WithClock(func() int64 { return now }))
	for i := range 300 {
		must(t, c.OfferSized(at(41+float64(i)*0.19), 100, 10))
	}
	err := c.OfferSized(now+29*sec, 100, 10)
	if !errors.Is(err, ErrAheadOfClock) || !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "ahead of the core's clock") {
		t.Fatalf("29 s ahead: %v; want ErrAheadOfClock", err)
	}
	for _, err := range []error{
		c.Completed(now+29*sec, now, now+sec, 1, 1), c.Admitted(now+29*sec, "e0", 1, 1), c.Refused(now + 29*sec),
		c.FirstToken(now+29*sec, now), c.Failed(now+29*sec, now, 0), c.Expired(now+29*sec, now, 0), c.OfferAbandoned(now + 29*sec),
	} {
		if !errors.Is(err, ErrAheadOfClock) {
			t.Fatalf("got %v; want ErrAheadOfClock", err)
		}
	}
	if got := c.AheadRefused(); got != 8 {
		t.Fatalf("refused ahead %d; want 8", got)
	}
	if got := c.State(now).DemandHistory.Arrivals.Observations; got != 300 {
		t.Fatalf("arrivals %d; want 300 kept", got)
	}
	if err := c.OfferSized(now-40*sec, 100, 10); err != nil {
		t.Fatalf("an ordinary 40 s old event refused: %v", err)
	}
	// within the tolerance (one demand bucket): accepted
	must(t, c.OfferSized(now+sec, 100, 10))
	// the clock moves: the same timestamp is fine now
	now += 30 * sec
	must(t, c.OfferSized(at(100)+29*sec, 100, 10))
	if got := c.AheadRefused(); got != 8 {
		t.Fatalf("refused ahead %d; want 8", got)
	}
	// Without a clock, the latest step plus one step bounds records.
	c2 := newCore(t)
	must(t, c2.OfferSized(at(500), 1, 1)) // before any step: no bound
	c2.Step(at(500))
	must(t, c2.OfferSized(at(502), 1, 1)) // step 1 s + one bucket
	if err := c2.OfferSized(at(502.001), 1, 1); !errors.Is(err, ErrAheadOfClock) {
		t.Fatalf("beyond step + tolerance: %v; want ErrAheadOfClock", err)
	}
}

func TestFutureToleranceIsASetting(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FutureToleranceS = 5
	now := at(0)
	c := newCoreCfg(t, cfg, WithClock(func() int64 { return now }))
	must(t, c.OfferSized(at(5), 1, 1))
	if err := c.OfferSized(at(5.01), 1, 1); !errors.Is(err, ErrAheadOfClock) {
		t.Fatalf("%v; want ErrAheadOfClock", err)
	}
	cfg.FutureToleranceS = 60
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "future_tolerance_s") {
		t.Fatalf("a tolerance of a whole window accepted: %v", err)
	}
}

// ---- Decision snapshots ----

// decodeLoad sizes and completes a steady load of rate req/s with input
// in and requested output out over [from, to), completions reporting TPOT
// tpot s and TTFT ttft s.
func steadyLoad(t *testing.T, c *Core, from, to float64, rate float64, in, out int64, ttft, tpot float64) {
	t.Helper()
	for ts := from; ts < to; ts += 1 / rate {
		a := at(ts)
		must(t, c.OfferSized(a, in, out))
		if tpot > 0 {
			ft := a + int64(ttft*1e9)
			must(t, c.FirstToken(ft, a))
			must(t, c.Completed(ft+int64(tpot*1e9)*(out-1), a, ft, out, out))
		}
	}
}

func TestSpecSnapshotHoldsProfilesDemandPressurePendingOutputAndResidentWork(t *testing.T) {
	c := newCore(t)
	steadyLoad(t, c, 0, 60, 4, 800, 100, 0.1, 0.05)
	must(t, c.UpdateEngine("e2", at(60), controller.Resident{DecodeSeqs: 10, KVTokens: 9000}, 66144, true))
	must(t, c.UpdateEngine("e0", at(60), controller.Resident{QueuedPrefillS: 0.5, RunningPrefillS: 0.1}, 66144, true))
	snap := c.Controller().Snapshot(at(60), c.inputs(at(60)))
	if len(snap.Profiles) == 0 || !snap.Profiles[snap.Engines[0].Profile].HasPrefill {
		t.Fatal("no profile coefficients in the snapshot")
	}
	if snap.Long.Requests < 200 || snap.Short.Requests < 20 {
		t.Fatalf("offered demand short %v long %v", snap.Short.Requests, snap.Long.Requests)
	}
	if snap.ObservedPrefill.Count == 0 || math.Abs(snap.ObservedPrefill.Mean-0.4) > 1e-3 || math.Abs(snap.ObservedDecode.Mean-0.5) > 1e-3 {
		t.Fatalf("observed pressure %+v %+v; want 0.4 and 0.5", snap.ObservedPrefill, snap.ObservedDecode)
	}
	// pending output: 10 resident sequences × half the expected output
	if want := 10 * snap.Long.MeanOutput / 2; snap.PendingOutputTokens != want || want == 0 {
		t.Fatalf("pending output %v; want %v", snap.PendingOutputTokens, want)
	}
	if snap.QueuedPrefillS != 0.5 || snap.RunningPrefillS != 0.1 || snap.ResidentDecodeKV != 9000 {
		t.Fatalf("resident work queued %v running %v decode kv %v", snap.QueuedPrefillS, snap.RunningPrefillS, snap.ResidentDecodeKV)
	}
	d := c.Step(at(60))
	if d.Snapshot.PendingOutputTokens != roundTo6(snap.PendingOutputTokens) {
		t.Fatalf("journal pending_output_tokens %v; want %v", d.Snapshot.PendingOutputTokens, snap.PendingOutputTokens)
	}
}

func roundTo6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func TestSpecFrozenSnapshotIsNotChangedByLiveState(t *testing.T) {
	ps := controller.BuiltinProfiles()
	c := newCore(t, WithProfiles(ps))
	steadyLoad(t, c, 0, 60, 6, 1500, 50, 0, 0)
	snap := c.Controller().Snapshot(at(60), c.inputs(at(60)))
	before := snap.Split(0)
	pBefore := snap.Profiles[snap.Engines[0].Profile]
	// live changes: the caller's profile set (the controller keeps its
	// own copy), the live profile itself (online calibration from the
	// engines' measured prefill times, 3× the profile's), residency, more
	// demand
	for i := range ps.Profiles {
		ps.Profiles[i].Prefill.A *= 10
		ps.Profiles[i].Decode.A *= 10
	}
	for k := range 20 {
		const n, l = 10.0, 1500.0
		pre := pBefore.Prefill
		li := controller.LatencyInterval{IntervalS: 1, PrefillCount: n, PrefillTokens: n * l, PrefillTokensSq: n * l * l,
			PrefillSeconds: 3 * n * (pre.A + pre.B*l + pre.C*l*l)}
		for _, id := range []string{"e0", "e1"} {
			must(t, c.ObserveLatency(id, at(59+float64(k)/20), li))
		}
	}
	if live := c.Controller().Snapshot(at(60), c.inputs(at(60))); live.Profiles[live.Engines[0].Profile].Prefill == pBefore.Prefill {
		t.Fatal("BUG: calibration did not change the live profile")
	}
	must(t, c.UpdateEngine("e2", at(60), controller.Resident{DecodeSeqs: 50, KVTokens: 60000}, 66144, true))
	steadyLoad(t, c, 59, 60, 50, 4000, 50, 0, 0)
	c.Step(at(60)) // the controller freezes again
	if fresh := c.Controller().Snapshot(at(60), c.inputs(at(60))).Split(0); fresh == before {
		t.Fatal("BUG: the live changes do not change a fresh score")
	}
	if after := snap.Split(0); after != before {
		t.Fatalf("score changed with live state:\n%+v\n%+v", before, after)
	}
	if p := snap.Profiles[snap.Engines[0].Profile]; p.Prefill != pBefore.Prefill || p.Decode != pBefore.Decode {
		t.Fatal("the snapshot's profiles alias the live profile set")
	}
}

func TestSpecOutputEstimatesAndDecodeCorrectionAreBuiltOnceForBothHorizons(t *testing.T) {
	c := newCore(t)
	for i := range 40 { // learned discount: 50 of 100 requested
		must(t, c.Completed(at(1+float64(i)), at(float64(i)), at(float64(i)+0.1), 100, 50))
	}
	steadyLoad(t, c, 0, 60, 20, 500, 100, 0, 0)
	b0 := c.Controller().EstimateBuilds()
	d := c.Step(at(60))
	if c.Controller().EstimateBuilds() != b0+1 {
		t.Fatalf("builds %d; want one per step", c.Controller().EstimateBuilds()-b0)
	}
	if d.Snapshot.Short.MeanOutput != 50 || d.Snapshot.Long.MeanOutput != 50 || !d.Snapshot.Outputs.Learned {
		t.Fatalf("mean output short %v long %v; want the one estimate (50) on both", d.Snapshot.Short.MeanOutput, d.Snapshot.Long.MeanOutput)
	}
	// Decode correction: observed TPOT 1.5× the model at the current
	// residency scales decode on both horizons.
	c2 := newCore(t)
	steadyLoad(t, c2, 0, 60, 20, 500, 100, 0, 0)
	// a heavier mix in the short window: the learned estimate is not
	// calibrated to the measured TPOT (calibrateOutputs), which would
	// hide the correction behind the measurement
	steadyLoad(t, c2, 50, 60, 1, 500, 400, 0, 0)
	must(t, c2.UpdateEngine("e2", at(60), controller.Resident{DecodeSeqs: 2, KVTokens: 1000}, 66144, true))
	must(t, c2.UpdateEngine("e3", at(60), controller.Resident{DecodeSeqs: 2, KVTokens: 1000}, 66144, true))
	ref := c2.Controller().Snapshot(at(60), c2.inputs(at(60)))
	p := &ref.Profiles[ref.Engines[2].Profile]
	model := p.Decode.StepSeconds(2, 1000)
	for i := range 20 {
		a := at(50 + float64(i)*0.5)
		must(t, c2.Completed(a+int64(model*1.5*1e9)*10, a, a, 11, 11))
	}
	snap := c2.Controller().Snapshot(at(60), c2.inputs(at(60)))
	if math.Abs(snap.DecodeCorrection-1.5) > 1e-3 || snap.OutputScale != 0 {
		t.Fatalf("decode correction %v; want 1.5", snap.DecodeCorrection)
	}
	// the same snapshot without the correction, for comparison, under
	// either scoring
	for _, scoring := range []string{controller.ScoringClosedForm, controller.ScoringRollout} {
		snapC := *snap
		snapC.Config.Scoring = scoring
		snap1 := snapC
		snap1.DecodeCorrection = 1
		withC, without := snapC.Split(0), snap1.Split(0)
		for _, r := range []float64{withC.ShortDecode / without.ShortDecode, withC.LongDecode / without.LongDecode} {
			if math.Abs(r-1.5) > 0.01 {
				t.Fatalf("%s: decode pressure short %v/%v long %v/%v; want both horizons scaled by 1.5", scoring, withC.ShortDecode, without.ShortDecode, withC.LongDecode, without.LongDecode)
			}
		}
	}
}

// ---- Prefill recovery ratio and decision basis ----

func TestSpecRecoveryPrefillRatioAndIncompleteDecisionsExposeIt(t *testing.T) {
	c := newCore(t)
	for i := range 20 {
		a := at(50 + float64(i)*0.1)
		must(t, c.FirstToken(a+int64(0.3*0.25e9), a)) // observed 0.3
	}
	c.OfferStarted(at(59)) // incomplete demand
	must(t, c.UpdateEngine("e0", at(59), controller.Resident{QueuedPrefillS: 0.4, RunningPrefillS: 0.1}, 66144, true))
	must(t, c.UpdateEngine("e1", at(59), controller.Resident{QueuedPrefillS: 0.2, RunningPrefillS: 0.05}, 66144, true))
	d := c.Step(at(60))
	want := (0.15 + 0.6) / (2 * 0.25) // 1.5 > observed 0.3
	if d.Basis != controller.BasisRecovery || math.Abs(d.RecoveryPrefillRatio-want) > 1e-6 || math.Abs(d.QueuedPrefillS-0.6) > 1e-9 {
		t.Fatalf("basis %s ratio %v queued %v; want recovery %v, 0.6", d.Basis, d.RecoveryPrefillRatio, d.QueuedPrefillS, want)
	}
	if math.Abs(d.ObservedPrefillRatio-0.3) > 1e-4 || d.ObservedDecodeRatio != 0 {
		t.Fatalf("observed ratios %v %v", d.ObservedPrefillRatio, d.ObservedDecodeRatio)
	}
	b, _ := json.Marshal(d)
	for _, k := range []string{`"recovery_prefill_ratio":1.5`, `"queued_prefill_s":0.6`, `"observed_prefill_ratio":`, `"observed_decode_ratio":`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("decision JSON lacks %s: %s", k, b)
		}
	}
	// no queue: the observed pressure, basis observed_pressure
	must(t, c.UpdateEngine("e0", at(60), controller.Resident{}, 66144, true))
	must(t, c.UpdateEngine("e1", at(60), controller.Resident{}, 66144, true))
	d = c.Step(at(61))
	if d.Basis != controller.BasisObservedPressure || math.Abs(d.RecoveryPrefillRatio-0.3) > 1e-4 {
		t.Fatalf("basis %s ratio %v; want observed_pressure 0.3", d.Basis, d.RecoveryPrefillRatio)
	}
}

func TestSpecDecisionBasisIsOneOfTheClosedSet(t *testing.T) {
	c, err := New(DefaultConfig())
	must(t, err)
	if d := c.Step(at(1)); d.Basis != controller.BasisNoEngines {
		t.Fatalf("no engines: %s", d.Basis)
	}
	c = newCore(t)
	if d := c.Step(at(1)); d.Basis != controller.BasisOfferedDemand {
		t.Fatalf("complete demand: %s", d.Basis)
	}
	for _, d := range c.Decisions(0, 0) {
		found := false
		for _, b := range controller.Bases {
			found = found || b == d.Basis
		}
		if !found {
			t.Fatalf("basis %q outside the closed set", d.Basis)
		}
	}
}

// TestSpecJournalRoundsWhatTheGatesJudgedAtFullPrecision: every float of
// the journal record is rounded to 6 decimals, the feasible moments
// included.
func TestSpecJournalRoundsWhatTheGatesJudgedAtFullPrecision(t *testing.T) {
	c := newCore(t)
	steadyLoad(t, c, 0, 60, 7, 1333, 77, 0.0123457, 0.0234567)
	steadyLoad(t, c, 0.05, 60, 3.1, 777, 33, 0, 0)
	d := c.Step(at(60))
	b, err := json.Marshal(d)
	must(t, err)
	var v any
	must(t, json.Unmarshal(b, &v))
	var walk func(path string, x any)
	n := 0
	walk = func(path string, x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, y := range x {
				walk(path+"."+k, y)
			}
		case []any:
			for i, y := range x {
				walk(path+"["+string(rune('0'+i%10))+"]", y)
			}
		case float64:
			n++
			if math.Abs(x*1e6-math.Round(x*1e6)) > 1e-3*math.Max(1, math.Abs(x)) {
				t.Errorf("%s = %v is not rounded to 6 decimals", path, x)
			}
		}
	}
	walk("decision", v)
	if n < 50 || d.Snapshot.Long.FeasibleShare == 0 {
		t.Fatalf("BUG: only %d numbers in the record", n)
	}
	snap := c.Controller().Snapshot(at(60), c.inputs(at(60)))
	for _, v := range [][2]float64{
		{d.Snapshot.Long.FeasibleMeanInputSq, snap.Long.FeasibleMeanInputSq}, {d.Snapshot.Long.FeasibleMeanInput, snap.Long.FeasibleMeanInput},
		{d.Snapshot.Long.FeasibleShare, snap.Long.FeasibleShare}, {d.Snapshot.Short.MeanInputSq, snap.Short.MeanInputSq},
		{d.ObservedPrefillRatio, snap.ObservedPrefill.Mean}, {d.Snapshot.Long.RatePerS, snap.Long.RatePerS},
	} {
		if v[0] != roundTo6(v[1]) {
			t.Fatalf("journal %v; want %v rounded", v[0], v[1])
		}
	}
	if snap.ObservedPrefill.Mean == roundTo6(snap.ObservedPrefill.Mean) || snap.Long.FeasibleMeanInputSq == roundTo6(snap.Long.FeasibleMeanInputSq) {
		t.Fatal("BUG: the full-precision snapshot looks rounded")
	}
}

// ---- Moves: every constraint ----

// prefillHeavy: 8 req/s of 1500-token prompts with 8 output tokens for
// 60 s, which moves a decode engine to prefill.
func prefillHeavy(t *testing.T, c *Core) {
	steadyLoad(t, c, 0, 60, 8, 1500, 8, 0, 0)
}

// decodeHeavy: 8 req/s of 100-token prompts asking 1900 output tokens
// (within the profile's 2048-token context), which moves a prefill engine
// to decode.
func decodeHeavy(t *testing.T, c *Core) {
	steadyLoad(t, c, 0, 60, 8, 100, 1900, 0, 0)
}

// anyTime is a clock that admits every timestamp of these tests.
func anyTime() Option { return WithClock(func() int64 { return at(1e6) }) }

// proposal steps until a decision proposes a move (or makes one) and
// returns it.
func proposal(t *testing.T, c *Core, from float64) controller.Decision {
	t.Helper()
	var d controller.Decision
	for i := range 6 {
		d = c.Step(at(from + float64(i)*0.1))
		if d.Direction != "" && (d.Action == controller.ActionMove || d.Blocked != controller.GateConfirmation) {
			return d
		}
	}
	t.Fatalf("no move proposed: %s %q %s", d.Action, d.Blocked, d.Reason)
	return d
}

func gateOf(d controller.Decision, name string) controller.GateResult {
	for _, g := range d.Gates {
		if g.Gate == name {
			return g
		}
	}
	return controller.GateResult{Gate: "missing", Pass: true}
}

func TestSpecMovesRespectRoleFloorsOfTheSourceRole(t *testing.T) {
	// prefill -> decode is checked against the prefill floor
	cfg := DefaultConfig()
	cfg.Controller.MinDecodeEngines = 2
	c := newCoreCfg(t, cfg)
	decodeHeavy(t, c)
	if d := proposal(t, c, 60); d.Direction != "prefill_to_decode" || d.Action != controller.ActionMove {
		t.Fatalf("decode floor blocked a prefill->decode move: %s %q %+v", d.Action, d.Blocked, gateOf(d, controller.GateRoleFloors))
	}
	cfg = DefaultConfig()
	cfg.Controller.MinPrefillEngines = 2
	c = newCoreCfg(t, cfg)
	decodeHeavy(t, c)
	if d := proposal(t, c, 60); d.Direction != "prefill_to_decode" || d.Blocked != controller.GateRoleFloors {
		t.Fatalf("prefill floor 2 with 2 prefill engines: %s %q; want blocked by role_floors", d.Action, d.Blocked)
	}
	// decode -> prefill against the decode floor
	cfg = DefaultConfig()
	cfg.Controller.MinDecodeEngines = 2
	c = newCoreCfg(t, cfg)
	prefillHeavy(t, c)
	if d := proposal(t, c, 60); d.Direction != "decode_to_prefill" || d.Blocked != controller.GateRoleFloors {
		t.Fatalf("decode floor 2 with 2 decode engines: %s %q; want blocked by role_floors", d.Action, d.Blocked)
	}
}

// holdActuator starts moves and never finishes them.
type holdActuator struct{}

func (holdActuator) Start(controller.Move) error { return nil }

func TestSpecMovesNeedLiveAvailability(t *testing.T) {
	c := newCore(t, WithActuator(holdActuator{}), anyTime())
	decodeHeavy(t, c)
	d := proposal(t, c, 60)
	if d.Action != controller.ActionMove {
		t.Fatalf("setup: %s %q", d.Action, d.Blocked)
	}
	must(t, c.UpdateEngine("e2", at(61), controller.Resident{}, 66144, false)) // not live either
	steadyLoad(t, c, 70, 140, 8, 1500, 8, 0, 0)                                // prefill-heavy now
	for i := range 5 {
		d = c.Step(at(140 + float64(i)))
		if d.Direction == "decode_to_prefill" {
			break
		}
	}
	if g := gateOf(d, controller.GateLiveAvailability); d.Direction == "" || g.Pass {
		t.Fatalf("with an engine switching: %s %q %s gates %+v; want live_availability failing", d.Action, d.Blocked, d.Reason, d.Gates)
	}
}

func TestSpecMovesRespectCooldownAndDwell(t *testing.T) {
	c := newCore(t, anyTime())
	prefillHeavy(t, c)
	d := proposal(t, c, 60)
	if d.Action != controller.ActionMove {
		t.Fatalf("setup: %s %q", d.Action, d.Blocked)
	}
	steadyLoad(t, c, 60.5, 65.5, 16, 100, 1900, 0, 0) // decode-heavy from now on
	d = proposal(t, c, 65.5)
	if d.Direction != "prefill_to_decode" || gateOf(d, controller.GateCooldown).Pass {
		t.Fatalf("5 s after a move: %s %q; want cooldown failing", d.Direction, d.Blocked)
	}
	// dwell: every engine moved 30 s ago (cooldown is global: none yet here)
	cfg := DefaultConfig()
	c = newCoreCfg(t, cfg)
	for _, e := range c.Engines() {
		e.LastMoveNs = at(30)
		must(t, c.UpsertEngine(e))
	}
	decodeHeavy(t, c)
	d = proposal(t, c, 60)
	if d.Blocked != controller.GateDwell || !gateOf(d, controller.GateCooldown).Pass {
		t.Fatalf("engines moved 30 s ago (dwell 60 s): %s %q; want blocked by dwell", d.Action, d.Blocked)
	}
}

func TestSpecMovesNeedProfileCoverageOfTheObservedShapes(t *testing.T) {
	ps := controller.BuiltinProfiles()
	i, ok := ps.Lookup("facebook/opt-13b", "A100-80GB")
	if !ok {
		t.Fatal("BUG: no builtin profile")
	}
	maxIn := ps.Profiles[i].Prefill.MaxInput
	c := newCore(t, WithProfiles(ps))
	steadyLoad(t, c, 0, 60, 8, 1500, 8, 0, 0)
	must(t, c.OfferSized(at(59.5), maxIn+1, 8)) // one prompt beyond the profile's range
	d := proposal(t, c, 60)
	if d.Direction != "decode_to_prefill" || d.Blocked != controller.GateProfileCoverage {
		t.Fatalf("a shape beyond the profile: %s %q; want blocked by profile_coverage (max input %d)", d.Action, d.Blocked, maxIn)
	}
	c = newCore(t, WithProfiles(ps))
	steadyLoad(t, c, 0, 60, 8, 1500, 8, 0, 0)
	must(t, c.OfferSized(at(59.5), maxIn, 8))
	if d := proposal(t, c, 60); d.Action != controller.ActionMove {
		t.Fatalf("shapes within the profile: %s %q", d.Action, d.Blocked)
	}
}

func TestSpecMovesRespectPhysicalKVLimits(t *testing.T) {
	c, err := New(DefaultConfig())
	must(t, err)
	for i, r := range []controller.Role{controller.RolePrefill, controller.RoleDecode, controller.RoleDecode, controller.RoleDecode} {
		must(t, c.UpsertEngine(controller.Engine{ID: "e" + string(rune('0'+i)), Model: "facebook/opt-13b", GPU: "A100-80GB", Role: r, Live: true, KVCapacityTokens: 66144}))
	}
	prefillHeavy(t, c)
	for _, id := range []string{"e1", "e2", "e3"} { // decode KV nearly full
		must(t, c.UpdateEngine(id, at(60), controller.Resident{DecodeSeqs: 5, KVTokens: 60000}, 66144, true))
	}
	d := proposal(t, c, 60)
	if d.Direction != "decode_to_prefill" || gateOf(d, controller.GateKVLimit).Pass {
		t.Fatalf("decode KV 150000 of 198432: %s %q %+v; want kv_limit failing", d.Action, d.Blocked, gateOf(d, controller.GateKVLimit))
	}
}

// ---- Consolidation evidence ----

func TestSpecDemandEvidenceIsCapturedForEveryDecodeToPrefillGate(t *testing.T) {
	c := newCore(t)
	prefillHeavy(t, c)
	var blocked, moved bool
	for i := range 6 {
		d := c.Step(at(60 + float64(i)*0.1))
		if d.Direction != "decode_to_prefill" {
			continue
		}
		if d.DemandEvidence == nil {
			t.Fatalf("decision %d (%s %q) without demand_evidence", d.Seq, d.Action, d.Blocked)
		}
		blocked = blocked || d.Action != controller.ActionMove
		moved = moved || d.Action == controller.ActionMove
		b, _ := json.Marshal(d.DemandEvidence)
		for _, k := range []string{"span_s", "arrivals", "required_span_s", "required_arrivals", "max_span_s", "closed", "risk_kind", "risk_age_s",
			"risk_events", "short_decode_engines", "long_decode_engines", "trend_ratio", "envelope_decode_engines", "blocked_gate"} {
			if !strings.Contains(string(b), `"`+k+`":`) {
				t.Fatalf("demand_evidence lacks %s: %s", k, b)
			}
		}
		if d.Action != controller.ActionMove && d.DemandEvidence.BlockedGate != d.Blocked {
			t.Fatalf("blocked by %q, evidence says %q", d.Blocked, d.DemandEvidence.BlockedGate)
		}
	}
	if !blocked || !moved {
		t.Fatalf("want blocked (confirmation) and moving decode->prefill decisions; blocked %v moved %v", blocked, moved)
	}
	if ev, seq, ok := c.Controller().LatestEvidence(); !ok || seq == 0 || ev.Arrivals == 0 {
		t.Fatalf("latest evidence %+v %d %v", ev, seq, ok)
	}
}

func TestSpecConsolidationEvidenceCountsOnlyObservationsKnownAfterTheCutoff(t *testing.T) {
	c := newCore(t)
	prefillHeavy(t, c)
	// decode risk: observed TPOT past the SLO 20 s ago sets the cutoff
	for i := range 15 {
		a := at(40 + float64(i)*0.01)
		must(t, c.Completed(a+int64(0.3e9)*10, a, a, 11, 11)) // TPOT 0.3 s
	}
	c.Step(at(43.5))
	d := proposal(t, c, 60)
	ev := d.DemandEvidence
	if ev == nil || ev.RiskKind == "" {
		t.Fatalf("evidence %+v; want a risk", ev)
	}
	cut := at(60) - int64(ev.RiskAgeS*1e9)
	want := c.Demand().Arrivals.Evidence(cut, d.AtNs)
	if ev.Arrivals != want.Observations || float64(want.SpanNs)/1e9 != ev.SpanS {
		t.Fatalf("evidence %+v; want arrivals %d span %v (buckets wholly after the cutoff)", ev, want.Observations, float64(want.SpanNs)/1e9)
	}
	_, all := c.Demand().Arrivals.Window(cut, d.AtNs, nil)
	if ev.Arrivals >= all.Count() {
		t.Fatalf("evidence %d counts the bucket straddling the cutoff (window %d)", ev.Arrivals, all.Count())
	}
}

// refusedCount is the refused outcomes in st's attainment.
func refusedCount(_ *Core, st State) int64 { return st.Attainment.ByOutcome["refused"].Total }
