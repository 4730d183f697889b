package buckets

import "testing"

func assertNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(200, f); n != 0 {
		t.Errorf("%s: %v allocations per run, want 0", name, n)
	}
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	d := mustDemand(t, sec, 60*sec)
	a := mustAttainment(t, 10*sec, 240*sec)
	p, err := NewPressure(sec, 60*sec)
	if err != nil {
		t.Fatal(err)
	}
	ts := at(0)
	i := int64(0)
	// Each record moves 0.7 s on: the 201 runs of AllocsPerRun cross 140
	// buckets, so every measured loop expires buckets as it records (the
	// expired counts are checked to rise).
	next := func() int64 { i++; ts += 700 * ms; return ts }
	expiring := func(name string, expired func() int64, f func()) {
		t.Helper()
		before := expired()
		assertNoAllocs(t, name, f)
		if expired() <= before {
			t.Errorf("%s: nothing expired inside the measured loop", name)
		}
	}
	sized := func(h *History) func() int64 { return func() int64 { s, _ := h.Expired(); return s } }
	expiring("arrival record", sized(d.Arrivals), func() { d.OfferSized(next(), Shape{100 + i%300, 50}) })
	// outputs retain four windows: step 2 s per record there
	expiring("output record", sized(d.Outputs), func() { ts += 1300 * ms; d.Outputs.Record(next(), Shape{200, i % 200}) })
	expiring("residency record", sized(d.Residency), func() { d.Residency.Record(next(), Shape{100 + i%50, 30}) })
	expiring("reprice", sized(d.Arrivals), func() {
		now := next()
		d.Arrivals.Record(now, Shape{400, 8})
		d.Arrivals.Reprice(now, Shape{400, 8}, Shape{380 + i%20, 8})
	})
	expiring("unsized start/end", func() int64 { _, u := d.Arrivals.Expired(); return u }, func() { d.OfferStarted(); d.OfferUnsizedEnd(next()) })
	expiring("attainment record", a.Expired, func() { ts += 2300 * ms; a.Record(next(), OutcomeCompleted, true, i%2 == 0) })
	expiring("pressure record", p.Expired, func() { p.Record(next(), 0.8+float64(i%2)*0.5) }) // every other one a miss
	assertNoAllocs(t, "prune", func() { d.Prune(); a.Prune(); p.Prune() })
	assertNoAllocs(t, "advance", func() { d.Advance(next()) })
	d.OfferSized(ts, Shape{100, 50})
	buf := make([]Cell, 0, 61*ExactCells)
	assertNoAllocs(t, "window query into a caller buffer", func() {
		cells, w := d.Arrivals.Window(ts-60*sec, ts, buf[:0])
		if w.Exact == 0 || len(cells) == 0 {
			t.Fatal("BUG: empty window")
		}
	})
	assertNoAllocs(t, "has overflow", func() { d.Outputs.HasOverflow() })
	assertNoAllocs(t, "evidence", func() { d.Arrivals.Evidence(ts-30*sec, ts) })
	assertNoAllocs(t, "attainment window", func() { a.Window(ts-60*sec, ts) })
	assertNoAllocs(t, "pressure window", func() { p.Window(ts-60*sec, ts) })
}
