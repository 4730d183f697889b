package sim

import (
	"context"
	"testing"
)

// BenchmarkBundledTrace simulates the embedded hour of Azure code at 16
// engines, once per iteration.
func BenchmarkBundledTrace(b *testing.B) {
	reqs, err := BundledTrace()
	if err != nil {
		b.Fatal(err)
	}
	for _, pol := range []string{"static:8", "narwhal"} {
		b.Run(pol, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Policy = pol
			cfg.TTFTSLOS = 1.5
			b.ReportAllocs()
			var events uint64
			for i := 0; i < b.N; i++ {
				res, err := Run(context.Background(), cfg, reqs)
				if err != nil {
					b.Fatal(err)
				}
				events = res.Events
			}
			b.ReportMetric(float64(events), "events/op")
		})
	}
}
