package core

import (
	"errors"
	"testing"
)

// A clock that steps back past the retained demand history: every record
// is refused (the ring only moves forward, and nothing may expire the
// other records' history), and the core says so: ClockBehindNs, Stuck,
// narwhal_core_clock_behind_history_seconds. Once the clock has caught up
// it records again. A step back within the window is not stuck.
func TestClockSteppedBackPastTheHistoryIsReportedAsStuck(t *testing.T) {
	now := at(4000)
	c := newCore(t, WithClock(func() int64 { return now })) // demand window 60 s
	for i := range 100 {
		now = at(3950 + float64(i)*0.5)
		must(t, c.OfferSized(now, 100, 10))
		c.Step(now)
	}
	if c.Stuck() || c.ClockBehindNs() != 0 {
		t.Fatalf("before the step back: stuck %v, behind %d; want neither", c.Stuck(), c.ClockBehindNs())
	}
	newest := now

	// Back 30 s, inside the window: behind, not stuck, records kept.
	now -= 30 * sec
	c.Step(now)
	if c.Stuck() || c.ClockBehindNs() <= 0 || c.ClockBehindNs() > 30*sec {
		t.Fatalf("30 s back: stuck %v, behind %d s; want not stuck, 0-30 s", c.Stuck(), c.ClockBehindNs()/sec)
	}
	must(t, c.OfferSized(now, 100, 10))

	// Back an hour: stuck, every record refused.
	now = newest - 3600*sec
	c.Step(now)
	if !c.Stuck() {
		t.Fatalf("an hour back: not stuck (behind %d s)", c.ClockBehindNs()/sec)
	}
	if got := c.ClockBehindNs(); got < 3599*sec || got > 3600*sec {
		t.Fatalf("an hour back: behind %d s; want 3599-3600", got/sec)
	}
	if err := c.OfferSized(now, 100, 10); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("a record an hour behind the history: %v; want refused", err)
	}
	m := metricValues(t, c)
	if got, ok := m["narwhal_core_clock_behind_history_seconds"]; !ok || got < 3599 || got > 3600 {
		t.Fatalf("gauge %v; want 3599-3600", got)
	}
	if got, ok := m["narwhal_core_clock_stuck"]; !ok || got != 1 {
		t.Fatalf("narwhal_core_clock_stuck %v (present %v); want 1", got, ok)
	}

	// Caught up: records again, not stuck.
	now = newest + sec
	must(t, c.OfferSized(now, 100, 10))
	c.Step(now)
	if c.Stuck() || c.ClockBehindNs() != 0 {
		t.Fatalf("caught up: stuck %v, behind %d; want neither", c.Stuck(), c.ClockBehindNs())
	}
	if got := metricValues(t, c)["narwhal_core_clock_stuck"]; got != 0 {
		t.Fatalf("caught up: narwhal_core_clock_stuck %v; want 0", got)
	}
}
