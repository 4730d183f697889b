package buckets

import (
	"sync/atomic"
	"testing"

	"github.com/narwhal-io/narwhal/core/ring"
)

func TestPressureSumSaturatesInsteadOfCorruptingTheTag(t *testing.T) {
	var w atomic.Uint64
	tag := ring.TagOf(12345)
	addSaturating(&w, tag, ring.ValueMask-5)
	addSaturating(&w, tag, 100)
	if ring.WordTag(w.Load()) != tag || ring.WordValue(w.Load()) != ring.ValueMask {
		t.Fatalf("unexpected word %x; want tag %d and a saturated value", w.Load(), tag)
	}
}

// TestMissShareClampsToItsCount: the share that both PressureWindow and
// the controller's PhaseObservation report is over / count, 0 without
// observations, and never outside [0, 1] whatever the caller's figures.
func TestMissShareClampsToItsCount(t *testing.T) {
	for _, c := range []struct {
		over, count int64
		want        float64
	}{
		{3, 10, 0.3},
		{10, 10, 1},
		{12, 10, 1},
		{-1, 10, 0},
		{5, 0, 0},
		{0, -4, 0},
	} {
		if got := MissShare(c.over, c.count); got != c.want {
			t.Errorf("MissShare(%d, %d) = %v, want %v", c.over, c.count, got, c.want)
		}
	}
	if got := (PressureWindow{Count: 8, Over: 2}).MissShare(); got != 0.25 {
		t.Errorf("PressureWindow{Count: 8, Over: 2}.MissShare() = %v, want 0.25", got)
	}
}
