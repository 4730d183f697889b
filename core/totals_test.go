package core

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// TestRequestTotalsAreMonotonicCounters: the finish calls count requests
// by outcome and by TTFT/TPOT met in counters that keep counting after the
// attainment window has expired them, and a refused call counts nothing.
func TestRequestTotalsAreMonotonicCounters(t *testing.T) {
	c := newCore(t) // TTFT SLO 0.25 s, TPOT SLO 0.1 s
	now := t0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// completed: both met; TTFT missed; TPOT missed (10 gaps over 2.9 s)
	must(c.Completed(now+1e9, now, now+1e8, 0, 100))
	must(c.Completed(now+2e9, now, now+5e8, 0, 100))
	must(c.Completed(now+3e9, now, now+1e8, 0, 11))
	must(c.Failed(now+1e9, now, now+1e8)) // TTFT met, failed
	must(c.Expired(now+1e9, now, 0))
	must(c.Refused(now))
	// refused input: counts nothing
	if err := c.Completed(now, now+5, 0, 1, 1); err == nil {
		t.Fatal("bad completion accepted")
	}
	want := [buckets.NumOutcomes]buckets.TotalCounts{
		buckets.OutcomeCompleted: {Finished: 3, TTFTMet: 2, TPOTMet: 2, BothMet: 1},
		buckets.OutcomeFailed:    {Finished: 1, TTFTMet: 1},
		buckets.OutcomeExpired:   {Finished: 1},
		buckets.OutcomeRefused:   {Finished: 1},
	}
	if got := c.Attainment().Totals().Read(); got != want {
		t.Fatalf("unexpected totals; got %+v; want %+v", got, want)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Collectors()...)
	for name, v := range map[string]float64{
		"narwhal_requests_finished_total": 6, "narwhal_requests_ttft_met_total": 3,
		"narwhal_requests_tpot_met_total": 2, "narwhal_requests_slo_met_total": 1,
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		found := false
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			found = true
			if mf.GetType().String() != "COUNTER" {
				t.Fatalf("%s is a %v; want a counter", name, mf.GetType())
			}
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
		if !found || sum != v {
			t.Fatalf("unexpected %s; got %v (present %v); want %v", name, sum, found, v)
		}
	}

	// Far past the retention the window forgets; the counters do not.
	later := now + 3600*sec
	must(c.Completed(later+1e9, later, later+1e8, 0, 100))
	c.Step(later + 2e9)
	if w := c.State(later + 2e9).Attainment.ByOutcome["completed"]; w.Total != 1 {
		t.Fatalf("window after an hour: got %d completed; want 1", w.Total)
	}
	if got := c.Attainment().Totals().Read()[buckets.OutcomeCompleted]; got.Finished != 4 || got.BothMet != 2 {
		t.Fatalf("totals after an hour: got %+v; want finished 4, both met 2", got)
	}
}

// TestFinishPathDoesNotAllocate: the finish calls, counters included,
// are allocation-free.
func TestFinishPathDoesNotAllocate(t *testing.T) {
	c := newCore(t)
	now := t0
	n := testing.AllocsPerRun(1000, func() {
		now += 1e6
		_ = c.Completed(now+2e8, now, now+1e8, 128, 100)
		_ = c.Failed(now+1e8, now, 0)
		_ = c.Expired(now+1e8, now, 0)
		_ = c.Refused(now)
	})
	if n != 0 {
		t.Fatalf("finish path allocates %v times per run; want 0", n)
	}
}

// TestNewestDecisions: the newest N decisions, oldest first, whatever
// the ring holds.
func TestNewestDecisions(t *testing.T) {
	c := newCore(t)
	for i := int64(0); i < 12; i++ {
		c.Step(t0 + i*sec)
	}
	ds := c.NewestDecisions(5)
	if len(ds) != 5 || ds[0].Seq != 8 || ds[4].Seq != 12 {
		var seqs []uint64
		for _, d := range ds {
			seqs = append(seqs, d.Seq)
		}
		t.Fatalf("unexpected newest 5; got seqs %v; want 8..12", seqs)
	}
	if all := c.NewestDecisions(0); len(all) != 12 || all[0].Seq != 1 {
		t.Fatalf("unexpected newest(0); got %d decisions from seq %d; want 12 from 1", len(all), all[0].Seq)
	}
}
