package service

import (
	"fmt"
	"strings"
	"testing"
)

// The per-line path (split, decode, validate, apply to the real core)
// allocates nothing: a 1000-line batch allocates exactly what a 10-line
// batch does (the reply and its accepted range).
func TestIngestPerLineAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random; allocation counts are measured without -race")
	}
	rc := newRealCore(t, "e1", "e2")
	in := NewIngest(rc, DefaultLimits(), 8<<20, 4096, func() int64 { return testNow })
	batch := func(requests int) []byte {
		var b strings.Builder
		for r := 0; r < requests; r++ {
			a := ts(-5) + int64(r)*1e6
			fmt.Fprintf(&b, "{\"type\":\"offer_started\",\"ts_ns\":%d}\n", a)
			fmt.Fprintf(&b, "{\"type\":\"sized\",\"ts_ns\":%d,\"est_input_tokens\":%d,\"requested_output_tokens\":64}\n", a, 100+r%40)
			fmt.Fprintf(&b, "{\"type\":\"admitted\",\"ts_ns\":%d,\"engine\":\"e%d\",\"input_tokens\":100,\"requested_output_tokens\":64}\n", a+1e6, 1+r%2)
			fmt.Fprintf(&b, "{\"type\":\"first_token\",\"ts_ns\":%d,\"arrival_ns\":%d}\n", a+2e8, a)
			fmt.Fprintf(&b, "{\"type\":\"completed\",\"ts_ns\":%d,\"arrival_ns\":%d,\"first_token_ns\":%d,\"requested_output_tokens\":64,\"output_tokens\":60}\n", a+2e9, a, a+2e8)
		}
		return []byte(b.String())
	}
	small, large := batch(2), batch(200)
	for _, b := range [][]byte{small, large} {
		if r := in.Apply(b); r.Refused != 0 {
			t.Fatalf("warm-up batch refused lines: %+v", r.Errors)
		}
	}
	aSmall := testing.AllocsPerRun(20, func() { in.Apply(small) })
	aLarge := testing.AllocsPerRun(20, func() { in.Apply(large) })
	if aLarge != aSmall {
		t.Fatalf("allocations grow with lines: 10 lines %v, 1000 lines %v; want equal (0 per line)", aSmall, aLarge)
	}
}
