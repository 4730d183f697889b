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
	next := func() int64 { i++; ts += 7 * ms; return ts }
	assertNoAllocs(t, "arrival record", func() { d.OfferSized(next(), Shape{100 + i%300, 50}) })
	assertNoAllocs(t, "output record", func() { d.Outputs.Record(next(), Shape{200, i % 200}) })
	assertNoAllocs(t, "residency record", func() { d.Residency.Record(next(), Shape{100 + i%50, 30}) })
	assertNoAllocs(t, "reprice", func() {
		now := next()
		d.Arrivals.Record(now, Shape{400, 8})
		d.Arrivals.Reprice(now, Shape{400, 8}, Shape{380 + i%20, 8})
	})
	assertNoAllocs(t, "unsized start/end", func() { d.OfferStarted(); d.OfferUnsizedEnd(next()) })
	assertNoAllocs(t, "attainment record", func() { a.Record(next(), OutcomeCompleted, true, i%2 == 0) })
	assertNoAllocs(t, "pressure record", func() { p.Record(next(), 0.8) })
	assertNoAllocs(t, "prune", func() { d.Prune(); a.Prune(); p.Prune() })
	assertNoAllocs(t, "advance", func() { d.Advance(next()) })
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
