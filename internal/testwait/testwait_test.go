package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and
// panics, so that For stops there as it would at testing.T's Fatalf.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	For(t, 5*time.Second, "the third poll", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("cond ran %d times; want 3 (it stops polling once cond holds)", got)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("took %v for three polls", time.Since(start))
	}
}

func TestForFailsAfterTheLimitNamingWhat(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != rec {
				t.Fatalf("For did not fail t (recovered %v)", r)
			}
		}()
		For(rec, 50*time.Millisecond, "a condition that never holds", func() bool { return false })
	}()
	if took := time.Since(start); took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("failed after %v; want just past the 50 ms limit", took)
	}
	if !strings.Contains(rec.msg, "a condition that never holds") || !strings.Contains(rec.msg, "50ms") {
		t.Fatalf("failure %q; want it to name what was awaited and the limit", rec.msg)
	}
}
