package demandmerge

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// fullDeltas returns, for each of routers, one delta holding 30 arrival
// buckets of 128 cells each (shapes overlapping across routers by half).
func fullDeltas(routers int) []Delta {
	ds := make([]Delta, routers)
	for r := range ds {
		d := Delta{Router: fmt.Sprint("router-", r), Epoch: 1, Seq: 1, WidthNs: widthNs}
		for b := range 30 {
			db := DemandBucket{Kind: buckets.KindArrivals, StartNs: t0 + int64(b)*widthNs}
			for i := range buckets.ExactCells {
				db.Cells = append(db.Cells, [3]int64{int64(r*64 + i), 100, int64(1 + i%5)})
			}
			d.Demand = append(d.Demand, db)
		}
		ds[r] = d
	}
	return ds
}

func TestWindowDoesNotAllocate(t *testing.T) {
	s := newStore(t)
	applyAll(t, s, fullDeltas(3))
	v := s.History(buckets.KindArrivals)
	dst := make([]buckets.Cell, 0, 64*buckets.ExactCells)
	if n := testing.AllocsPerRun(100, func() {
		_, _ = v.Window(t0, t0+30e9, dst[:0])
		_ = v.Evidence(t0, t0+30e9)
	}); n != 0 {
		t.Fatalf("Window+Evidence allocate %v times per run; want 0", n)
	}
}

// BenchmarkApply: the leader applying one router's delta of 30 full
// buckets into a store already holding two other routers' (the merge
// spills: 3 × 128 overlapping shapes per bucket).
func BenchmarkApply(b *testing.B) {
	b.ReportAllocs()
	ds := fullDeltas(3)
	s, err := New(Config{Demand: demandCfg})
	if err != nil {
		b.Fatal(err)
	}
	for i := range ds[:2] {
		if err := s.Apply(&ds[i]); err != nil {
			b.Fatal(err)
		}
	}
	d := ds[2]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Seq = uint64(i + 1)
		if err := s.Apply(&d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/30, "ns/bucket")
}

// BenchmarkExporterNext: a router scanning its 30 s arrivals history (30
// buckets of up to 128 shapes) plus the other kinds for changed buckets.
func BenchmarkExporterNext(b *testing.B) {
	b.ReportAllocs()
	d, err := buckets.NewDemand(demandCfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 30_000 {
		d.Arrivals.Record(t0+int64(i)*1e6, buckets.Shape{Input: rng.Int64N(100) * 64, Output: 128})
	}
	x, err := NewExporter("r", 1, d, nil, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := x.Next(t0 + 31e9); !ok {
			b.Fatal("nothing to export")
		}
	}
}
