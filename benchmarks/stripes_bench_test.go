package benchmarks

import (
	"sync/atomic"
	"testing"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/narwhal-io/narwhal/core/ring"
)

// The ring keeps its own per-P stripes (core/ring/doc.go says why) rather
// than github.com/puzpuzpuz/xsync/v3's Counter. These benchmarks put the
// two side by side on one untagged counter: a striped add through
// ring.Stripe (the id of the P, as History.Record reads it) against
// xsync.Counter.Add (a P token from a sync.Pool, then an atomic add), and
// both against one shared atomic word.

type bkStripe struct {
	n atomic.Int64
	_ [120]byte
}

type bkStriped struct {
	s    [ring.MaxStripes]bkStripe
	mask int
}

func (c *bkStriped) add(d int64) { c.s[ring.Stripe(c.mask)].n.Add(d) }

func (c *bkStriped) value() (v int64) {
	for i := range c.s {
		v += c.s[i].n.Load()
	}
	return v
}

func newBkStriped() *bkStriped {
	_, mask := ring.StripeLayout()
	return &bkStriped{mask: mask}
}

var bkShared atomic.Int64

func BenchmarkCounterRingStripe(b *testing.B) {
	c := newBkStriped()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.add(1)
	}
	if c.value() != int64(b.N) {
		b.Fatal("lost counts")
	}
}

func BenchmarkCounterRingStripeParallel(b *testing.B) {
	c := newBkStriped()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.add(1)
		}
	})
}

func BenchmarkCounterXsync(b *testing.B) {
	c := xsync.NewCounter()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Add(1)
	}
	if c.Value() != int64(b.N) {
		b.Fatal("lost counts")
	}
}

func BenchmarkCounterXsyncParallel(b *testing.B) {
	c := xsync.NewCounter()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}

func BenchmarkCounterSharedAtomicParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bkShared.Add(1)
		}
	})
}
