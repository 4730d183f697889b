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
