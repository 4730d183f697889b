//go:build narwhal_hooks

package buckets

import (
	"math"
	"testing"

	"github.com/narwhal-io/narwhal/core/ring"
)

// TestFastPathLeavesTheZeroWordToTheGeneralPath stops a Record on its
// fast path after it has found the shape's cell in a bucket of tag 0 and
// before it reads the cell's count, and expires that bucket there (the
// drain another goroutine's Prune can run at that moment). The drained
// word is 0, which in a bucket of tag 0 also reads as a live count of 0:
// the fast path must leave it to the general path, which writes the
// observation and, finding its bucket expired, counts it as expired. A
// compare-and-swap on the zero word would count it in a drained bucket,
// where neither the retained windows nor Expired ever see it.
// Run with: go test -tags narwhal_hooks ./core/buckets/
func TestFastPathLeavesTheZeroWordToTheGeneralPath(t *testing.T) {
	const width = int64(1e6)
	h := mustHistory(t, width, 8*width)
	e := int64(1) << ring.TagBits * 3 // an epoch whose tag is 0
	if ring.TagOf(e) != 0 {
		t.Fatalf("BUG: epoch %d has tag %d", e, ring.TagOf(e))
	}
	ts := e * width
	s := Shape{Input: 100, Output: 10}
	if !h.Record(ts, s) { // the general path claims the bucket and the cell
		t.Fatal("first record refused")
	}
	fired := 0
	onFastPath = func() {
		fired++
		onFastPath = nil
		h.Advance(ts + 100*width) // bucket e expires and is drained
	}
	defer func() { onFastPath = nil }()
	if !h.Record(ts, s) {
		t.Fatal("second record refused: the fast path had admitted it")
	}
	if fired != 1 {
		t.Fatalf("the second record did not take the fast path (hook ran %d times)", fired)
	}
	_, w := h.Window(0, math.MaxInt64, nil)
	expired, _ := h.Expired()
	if w.Count() != 0 || expired != 2 {
		t.Fatalf("after the drain: retained %d, expired %d; want 0 and 2 (both records accounted once)", w.Count(), expired)
	}
}
