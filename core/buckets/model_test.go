package buckets_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/buckets/buckettest"
)

const baseNs = int64(1_795_000_000) * 1e9

// shapeGen draws shapes from a pool large enough to overflow buckets, with
// zero outputs, repeats and the occasional invalid shape.
func shapeGen(r *rand.Rand) buckets.Shape {
	switch r.IntN(20) {
	case 0:
		return buckets.Shape{Input: -1, Output: 5}
	case 1:
		return buckets.Shape{Input: 10, Output: buckets.MaxTokens + 1}
	case 2, 3:
		return buckets.Shape{Input: int64(r.IntN(300)), Output: 0}
	}
	return buckets.Shape{Input: int64(r.IntN(400)), Output: int64(r.IntN(3) * 100)}
}

func TestHistoryMatchesReferenceModel(t *testing.T) {
	var overflowSeen int64
	var invalidSeen int
	defer func() {
		t.Logf("overflow observations seen %d, invalid buckets seen %d", overflowSeen, invalidSeen)
		if !t.Failed() && (overflowSeen == 0 || invalidSeen == 0) {
			t.Errorf("BUG: the random sequences never overflowed (%d) or invalidated (%d)", overflowSeen, invalidSeen)
		}
	}()
	widths := []int64{1e6, 7e6, 250e6, 1e9}
	for seed := uint64(1); seed <= 24; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		width := widths[r.IntN(len(widths))]
		retention := width*int64(2+r.IntN(40)) + r.Int64N(width)
		h, err := buckets.NewHistory(width, retention)
		if err != nil {
			t.Fatal(err)
		}
		m := buckettest.NewHistoryModel(width, retention)
		now := baseNs
		var recent []int64 // arrival times recorded, for reprices
		var recentShapes []buckets.Shape
		buf := make([]buckets.Cell, 0, 4096)
		dense := seed%2 == 0 // many records per bucket: overflow and invalidation
		for step := 0; step < 3000; step++ {
			op := r.IntN(100)
			if dense && op >= 75 && op < 97 && r.IntN(30) > 0 {
				op = r.IntN(75)
			}
			switch {
			case op < 55: // record near now (sometimes late)
				ts := now - r.Int64N(retention+2*width)
				if r.IntN(4) > 0 {
					ts = now
				}
				s := shapeGen(r)
				got, want := h.Record(ts, s), m.Record(ts, s)
				if got != want {
					t.Fatalf("seed %d step %d: Record(%d,%v) = %v, model %v", seed, step, ts, s, got, want)
				}
				if got {
					recent = append(recent, ts)
					recentShapes = append(recentShapes, s)
				}
			case op < 62:
				ts := now - r.Int64N(2*width)
				if got, want := h.RecordUnsized(ts), m.RecordUnsized(ts); got != want {
					t.Fatalf("seed %d step %d: RecordUnsized = %v, model %v", seed, step, got, want)
				}
			case op < 75: // reprice a recorded arrival (or a stale one)
				if len(recent) == 0 {
					continue
				}
				i := r.IntN(len(recent))
				ts, from := recent[i], recentShapes[i]
				if r.IntN(5) == 0 {
					from = shapeGen(r)
				}
				to := shapeGen(r)
				got, want := h.Reprice(ts, from, to), m.Reprice(ts, from, to)
				if got != want {
					t.Fatalf("seed %d step %d: Reprice(%d,%v,%v) = %v, model %v", seed, step, ts, from, to, got, want)
				}
				if got {
					recentShapes[i] = to
				}
			case op < 88: // time advances a little
				now += r.Int64N(width * 2)
			case op < 91: // an idle gap longer than the retention
				now += retention + r.Int64N(3*retention)
			case op < 93: // a stray far-future timestamp (then traffic resumes at now)
				ts := now + 2*24*3600*1e9 + r.Int64N(1e12)
				if got, want := h.Record(ts, buckets.Shape{1, 1}), m.Record(ts, buckets.Shape{1, 1}); got != want {
					t.Fatalf("seed %d step %d: far Record = %v, model %v", seed, step, got, want)
				}
			case op < 95:
				if got, want := h.Advance(now), m.Advance(now); got != want {
					t.Fatalf("seed %d step %d: Advance expired %d, model %d", seed, step, got, want)
				}
			case op < 97:
				if n := h.Prune(); n != 0 {
					t.Fatalf("seed %d step %d: Prune found %d observations recording had not expired", seed, step, n)
				}
			default: // query
				from := now - r.Int64N(retention+3*width)
				to := now - r.Int64N(width+1)
				compareWindow(t, h, m, from, to, buf)
			}
			if step%50 == 0 {
				_, w := compareWindow(t, h, m, 0, now+retention, buf)
				overflowSeen += w.Overflow.Count
				invalidSeen += w.InvalidBuckets
				gs, gu := h.Expired()
				ws, wu := m.Expired()
				if gs != ws || gu != wu {
					t.Fatalf("seed %d step %d: expired %d/%d, model %d/%d", seed, step, gs, gu, ws, wu)
				}
				if got, want := h.Stats(), m.Stats(); got != want {
					t.Fatalf("seed %d step %d: stats %+v, model %+v %s", seed, step, got, want, m.Dump())
				}
				cut := now - r.Int64N(retention)
				if got, want := h.Evidence(cut, now), m.Evidence(cut, now); got != want {
					t.Fatalf("seed %d step %d: evidence %+v, model %+v", seed, step, got, want)
				}
			}
		}
	}
}

func compareWindow(t *testing.T, h *buckets.History, m *buckettest.HistoryModel, from, to int64, buf []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	t.Helper()
	got, gw := h.Window(from, to, buf[:0])
	want, ww := m.Window(from, to)
	if gw != ww {
		t.Fatalf("Window(%d,%d) = %+v, model %+v", from, to, gw, ww)
	}
	if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("Window(%d,%d) cells differ: %d vs model %d\n%v\n%v", from, to, len(got), len(want), got, want)
	}
	return got, gw
}

func TestAttainmentMatchesReferenceModel(t *testing.T) {
	for seed := uint64(1); seed <= 16; seed++ {
		r := rand.New(rand.NewPCG(seed, 17))
		width := []int64{1e6, 5e8, 10e9}[r.IntN(3)]
		retention := width*int64(1+r.IntN(30)) + r.Int64N(width)
		a, err := buckets.NewAttainment(width, retention)
		if err != nil {
			t.Fatal(err)
		}
		m := buckettest.NewAttainmentModel(width, retention)
		now := baseNs
		for step := 0; step < 2000; step++ {
			switch op := r.IntN(100); {
			case op < 60:
				ts := now - r.Int64N(retention+2*width)
				o := buckets.Outcome(r.IntN(int(buckets.NumOutcomes) + 1))
				tt, tp := r.IntN(2) == 0, r.IntN(3) == 0
				if got, want := a.Record(ts, o, tt, tp), m.Record(ts, o, tt, tp); got != want {
					t.Fatalf("seed %d step %d: Record = %v, model %v", seed, step, got, want)
				}
			case op < 85:
				now += r.Int64N(2 * width)
			case op < 88:
				now += retention + r.Int64N(2*retention)
			case op < 90:
				a.Advance(now)
				m.Advance(now)
			case op < 92:
				a.Prune()
			default:
				from, to := now-r.Int64N(retention+2*width), now
				if got, want := a.Window(from, to), m.Window(from, to); got != want {
					t.Fatalf("seed %d step %d: Window = %+v, model %+v", seed, step, got, want)
				}
				if got, want := a.CoveredS(now), m.CoveredS(now); got != want {
					t.Fatalf("seed %d step %d: CoveredS = %v, model %v", seed, step, got, want)
				}
				if a.Expired() != m.Expired() {
					t.Fatalf("seed %d step %d: expired %d, model %d", seed, step, a.Expired(), m.Expired())
				}
			}
		}
	}
}
