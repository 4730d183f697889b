package fuzz

import (
	"math"
	"reflect"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/buckets/buckettest"
)

const fuzzBase = int64(1_795_000_000) * 1e9

var fuzzWidths = [...]int64{1e6, 7e6, 250e6, 1e9}

// byteReader hands out the fuzz input a byte at a time (0 once exhausted).
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) more() bool { return r.i < len(r.b) }

func (r *byteReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

// shape decodes a shape from a small space (so that shapes repeat and
// buckets overflow), with the occasional invalid one.
func (r *byteReader) shape() buckets.Shape {
	a, b := r.next(), r.next()
	switch a {
	case 255:
		return buckets.Shape{Input: -1, Output: int64(b)}
	case 254:
		return buckets.Shape{Input: buckets.MaxTokens + int64(b), Output: 1}
	}
	return buckets.Shape{Input: int64(a)<<4 | int64(b&15), Output: int64(b>>4) * 50}
}

type arrival struct {
	ts int64
	s  buckets.Shape
}

// FuzzDemandHistory applies a decoded operation sequence (record, unsized,
// reprice, time advancing, idle gaps, stray far-future records, advance,
// prune, bursts, queries) to a History and to the reference model and
// checks: window and evidence answers equal the model's; at most 128 exact
// cells per bucket; no negative count; recorded = retained + expired;
// overflow maxima >= every overflowed shape; retained span <= retention.
func FuzzDemandHistory(f *testing.F) {
	f.Add([]byte{0, 3, 0, 10, 20, 0, 10, 20, 2, 0, 7, 1, 3, 40, 7, 0, 0})
	f.Add([]byte{3, 9, 9, 200, 9, 200, 2, 1, 5, 4, 0, 0, 1, 2, 7, 1, 2})
	f.Add([]byte{1, 5, 9, 255, 0, 0, 0, 0, 254, 1, 2, 0, 3, 2, 4, 3, 9, 50, 7, 0, 0, 6})
	f.Fuzz(demandOps)
}

func demandOps(t *testing.T, data []byte) {
	{
		r := &byteReader{b: data}
		width := fuzzWidths[r.next()%byte(len(fuzzWidths))]
		retention := width*int64(1+r.next()%48) + int64(r.next())*width/256
		h, err := buckets.NewHistory(width, retention)
		if err != nil {
			t.Fatalf("NewHistory(%d, %d): %v", width, retention, err)
		}
		m := buckettest.NewHistoryModel(width, retention)
		now := fuzzBase
		var arrivals []arrival
		var sized, unsized int64
		buf := make([]buckets.Cell, 0, 1024)
		rec := func(ts int64, s buckets.Shape) {
			got, want := h.Record(ts, s), m.Record(ts, s)
			if got != want {
				t.Fatalf("Record(%d, %v) = %v, model %v", ts, s, got, want)
			}
			if got {
				sized++
				if len(arrivals) < 512 {
					arrivals = append(arrivals, arrival{ts, s})
				}
			}
		}
		for ops := 0; r.more() && ops < 1500; ops++ {
			switch op := r.next() % 11; op {
			case 0, 1: // record, possibly late
				ts := now - int64(r.next())*width/32
				rec(ts, r.shape())
			case 2: // unsized
				ts := now - int64(r.next())*width/32
				got, want := h.RecordUnsized(ts), m.RecordUnsized(ts)
				if got != want {
					t.Fatalf("RecordUnsized(%d) = %v, model %v", ts, got, want)
				}
				if got {
					unsized++
				}
			case 3: // reprice an earlier arrival to a new shape
				if len(arrivals) == 0 {
					continue
				}
				k := int(r.next()) % len(arrivals)
				a, to := arrivals[k], r.shape()
				got, want := h.Reprice(a.ts, a.s, to), m.Reprice(a.ts, a.s, to)
				if got != want {
					t.Fatalf("Reprice(%d, %v, %v) = %v, model %v", a.ts, a.s, to, got, want)
				}
				if got {
					arrivals[k].s = to
				}
			case 4:
				now += int64(r.next()) * width / 8
			case 5: // idle gap past the retention
				now += retention * int64(1+r.next()%4)
			case 6: // a stray timestamp days ahead
				rec(now+int64(2+r.next()%3)*24*3600*1e9, buckets.Shape{Input: 1, Output: 1})
			case 7:
				if got, want := h.Advance(now), m.Advance(now); got != want {
					t.Fatalf("Advance(%d) expired %d, model %d", now, got, want)
				}
			case 8:
				if n := h.Prune(); n != 0 {
					t.Fatalf("Prune expired %d that recording had not", n)
				}
			case 9: // burst of distinct shapes into one bucket
				n, seed := int(r.next()), int64(r.next())
				for i := 0; i < n; i++ {
					rec(now, buckets.Shape{Input: seed*131 + int64(i)*17, Output: int64(i%5) * 40})
				}
			case 10:
				from := now - int64(r.next())*width/4
				to := from + int64(r.next())*width/4
				checkWindow(t, h, m, from, to, buf)
				cut := now - int64(r.next())*width/4
				if got, want := h.Evidence(cut, now), m.Evidence(cut, now); got != want {
					t.Fatalf("Evidence(%d, %d) = %+v, model %+v", cut, now, got, want)
				}
			}
		}
		// invariants over the final state
		_, all := checkWindow(t, h, m, 0, math.MaxInt64, buf)
		es, eu := h.Expired()
		if all.Count()+es != sized || all.Unsized+eu != unsized {
			t.Fatalf("not conserved: sized %d retained + %d expired != %d recorded; unsized %d + %d != %d",
				all.Count(), es, sized, all.Unsized, eu, unsized)
		}
		if newest, ok := h.NewestNs(); ok && all.Buckets > 0 && newest-all.FromNs > retention {
			t.Fatalf("retained span %d ns > retention %d ns", newest-all.FromNs, retention)
		}
		if span := m.SpanNs(); span > retention {
			t.Fatalf("model span %d > retention %d", span, retention)
		}
		for _, e := range m.Buckets() {
			ts := e * width
			cells, w := h.Window(ts, ts, buf[:0])
			if len(cells) > buckets.ExactCells || m.BucketCells(ts) > buckets.ExactCells {
				t.Fatalf("bucket %d: %d exact cells", e, len(cells))
			}
			if in, out, ok := m.OverflowedMax(ts); ok && w.Overflow.Count > 0 && (w.Overflow.MaxInput < in || w.Overflow.MaxOutput < out) {
				t.Fatalf("bucket %d: overflow maxima %d/%d below an overflowed shape %d/%d", e, w.Overflow.MaxInput, w.Overflow.MaxOutput, in, out)
			}
		}
		if got, want := h.Stats(), m.Stats(); got != want {
			t.Fatalf("Stats = %+v, model %+v", got, want)
		}
	}
}

func checkWindow(t *testing.T, h *buckets.History, m *buckettest.HistoryModel, from, to int64, buf []buckets.Cell) ([]buckets.Cell, buckets.Window) {
	t.Helper()
	got, gw := h.Window(from, to, buf[:0])
	want, ww := m.Window(from, to)
	if gw != ww {
		t.Fatalf("Window(%d, %d) = %+v, model %+v", from, to, gw, ww)
	}
	if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("Window(%d, %d) cells %v, model %v", from, to, got, want)
	}
	for _, c := range got {
		if c.Count <= 0 {
			t.Fatalf("cell %+v with a non-positive count", c)
		}
	}
	if gw.Overflow.Count < 0 || gw.Unsized < 0 || gw.Exact < 0 {
		t.Fatalf("negative count in %+v", gw)
	}
	return got, gw
}
