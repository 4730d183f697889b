package fuzz

import (
	"math"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/buckets/buckettest"
)

// FuzzAttainment applies a decoded operation sequence (record an outcome,
// time advancing, idle gaps, stray timestamps, advance, prune, query) to
// Attainment and to the reference model and checks: window answers and
// covered_s equal the model's; no negative count; TTFT/TPOT-met never above
// total; recorded = retained + expired; covered_s within [0, retention].
func FuzzAttainment(f *testing.F) {
	f.Add([]byte{1, 10, 0, 0, 3, 0, 1, 7, 2, 40, 0, 2, 5, 6, 1, 0, 0, 6})
	f.Add([]byte{0, 2, 0, 3, 9, 0, 4, 1, 2, 200, 3, 1, 4, 0, 0, 0, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{b: data}
		width := fuzzWidths[r.next()%byte(len(fuzzWidths))]
		retention := width*int64(1+r.next()%48) + int64(r.next())*width/256
		a, err := buckets.NewAttainment(width, retention)
		if err != nil {
			t.Fatalf("NewAttainment(%d, %d): %v", width, retention, err)
		}
		m := buckettest.NewAttainmentModel(width, retention)
		now := fuzzBase
		var recorded int64
		for ops := 0; r.more() && ops < 1500; ops++ {
			switch op := r.next() % 7; op {
			case 0, 1:
				ts := now - int64(r.next())*width/32
				b := r.next()
				o := buckets.Outcome(b % (byte(buckets.NumOutcomes) + 1))
				tt, tp := b&16 != 0, b&32 != 0
				got, want := a.Record(ts, o, tt, tp), m.Record(ts, o, tt, tp)
				if got != want {
					t.Fatalf("Record(%d, %v) = %v, model %v", ts, o, got, want)
				}
				if got {
					recorded++
				}
			case 2:
				now += int64(r.next()) * width / 8
			case 3:
				now += retention * int64(1+r.next()%4)
			case 4:
				ts := now + int64(2+r.next()%3)*24*3600*1e9
				got, want := a.Record(ts, buckets.OutcomeFailed, false, false), m.Record(ts, buckets.OutcomeFailed, false, false)
				if got != want {
					t.Fatalf("far Record = %v, model %v", got, want)
				}
				if got {
					recorded++
				}
			case 5:
				a.Advance(now)
				m.Advance(now)
				if n := a.Prune(); n != 0 {
					t.Fatalf("Prune expired %d that recording had not", n)
				}
			case 6:
				from := now - int64(r.next())*width/4
				to := from + int64(r.next())*width/4
				if got, want := a.Window(from, to), m.Window(from, to); got != want {
					t.Fatalf("Window(%d, %d) = %+v, model %+v", from, to, got, want)
				}
				if got, want := a.CoveredS(now), m.CoveredS(now); got != want || got < 0 || got > float64(retention)/1e9 {
					t.Fatalf("CoveredS = %v, model %v (retention %d ns)", got, want, retention)
				}
			}
		}
		w := a.Window(0, math.MaxInt64)
		if w != m.Window(0, math.MaxInt64) {
			t.Fatalf("final window %+v, model %+v", w, m.Window(0, math.MaxInt64))
		}
		var retained int64
		for o, c := range w.ByOutcome {
			if c.Total < 0 || c.TTFTMet < 0 || c.TPOTMet < 0 || c.TTFTMet > c.Total || c.TPOTMet > c.Total {
				t.Fatalf("outcome %d counts %+v", o, c)
			}
			retained += c.Total
		}
		if retained+a.Expired() != recorded {
			t.Fatalf("not conserved: retained %d + expired %d != recorded %d", retained, a.Expired(), recorded)
		}
	})
}
