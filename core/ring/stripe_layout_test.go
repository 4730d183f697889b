package ring

import (
	"runtime"
	"testing"
)

func TestStripeLayoutMatchesStripes(t *testing.T) {
	for _, procs := range []int{1, 2, 3, 5, 8} {
		prev := runtime.GOMAXPROCS(procs)
		log, mask := StripeLayout()
		n := Stripes()
		runtime.GOMAXPROCS(prev)
		if 1<<log != n || mask != n-1 {
			t.Errorf("GOMAXPROCS %d: StripeLayout() = (%d, %d) with Stripes() = %d; want 1<<log == %d and mask == %d",
				procs, log, mask, n, n, n-1)
		}
		if n < procs && n < MaxStripes {
			t.Errorf("GOMAXPROCS %d: Stripes() = %d, want at least the number of Ps (or MaxStripes %d)", procs, n, MaxStripes)
		}
	}
}
