package buckets

import (
	"errors"
	"math"
	"testing"
)

func TestInvalidInputIsRefusedAndChangesNothing(t *testing.T) {
	h := mustHistory(t, sec, 10*sec)
	record(t, h, at(5), 10, 10)
	before, beforeW := h.Window(0, math.MaxInt64, nil)
	f := func(name string, ok bool) {
		t.Helper()
		if ok {
			t.Errorf("%s accepted", name)
		}
	}
	f("negative timestamp", h.Record(-1, Shape{1, 1}))
	f("negative input", h.Record(at(5), Shape{-1, 1}))
	f("negative output", h.Record(at(5), Shape{1, -1}))
	f("input above MaxTokens", h.Record(at(5), Shape{MaxTokens + 1, 1}))
	f("output above MaxTokens", h.Record(at(5), Shape{1, MaxTokens + 1}))
	f("expired bucket", h.Record(at(-6), Shape{1, 1}))
	f("unsized negative", h.RecordUnsized(-5))
	f("reprice missing shape", h.Reprice(at(5), Shape{99, 99}, Shape{1, 1}))
	f("reprice future bucket", h.Reprice(at(6), Shape{10, 10}, Shape{1, 1}))
	f("reprice invalid target", h.Reprice(at(5), Shape{10, 10}, Shape{-3, 1}))
	f("far future", h.Record(at(5)+25*3600*sec, Shape{1, 1}))
	after, afterW := h.Window(0, math.MaxInt64, nil)
	if len(after) != len(before) || after[0] != before[0] || afterW != beforeW {
		t.Fatalf("refused input changed the history: %+v -> %+v", beforeW, afterW)
	}
	p, _ := NewPressure(sec, 10*sec)
	for _, r := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.5} {
		f("pressure ratio", p.Record(at(1), r))
	}
	if w := p.Window(0, math.MaxInt64); w.Count != 0 {
		t.Fatalf("pressure changed: %+v", w)
	}
	for _, bad := range [][2]int64{{0, sec}, {-1, sec}, {sec, sec / 2}, {1, 1 << 40}} {
		if _, err := NewHistory(bad[0], bad[1]); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewHistory(%d, %d): err %v, want ErrInvalidConfig", bad[0], bad[1], err)
		}
	}
	if _, err := NewDemand(DemandConfig{BucketWidthNs: sec}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewDemand without window: %v", err)
	}
}

func TestStrayFarFutureTimestampDoesNotWipeHistory(t *testing.T) {
	h := mustHistory(t, sec, 60*sec)
	record(t, h, at(10), 100, 10)
	if h.Record(at(10)+48*3600*sec, Shape{1, 1}) {
		t.Fatal("a record two days ahead was accepted")
	}
	record(t, h, at(11), 100, 10) // traffic goes on
	if _, w := h.Window(0, math.MaxInt64, nil); w.Count() != 2 {
		t.Fatalf("history after a stray timestamp: %d observations, want 2", w.Count())
	}
	// A gap shorter than a day is an idle period: accepted, old buckets expire.
	record(t, h, at(11)+3600*sec, 5, 5)
	if _, w := h.Window(0, math.MaxInt64, nil); w.Count() != 1 {
		t.Fatalf("after an idle hour: %d, want 1", w.Count())
	}
	// Two consistent far records (an idle gap longer than a day, then
	// traffic) move the history.
	later := at(11) + 3600*sec + 30*3600*sec
	if h.Record(later, Shape{1, 1}) {
		t.Fatal("first far record accepted")
	}
	if !h.Record(later+5*sec, Shape{2, 2}) {
		t.Fatal("second, consistent far record refused")
	}
	if _, w := h.Window(0, math.MaxInt64, nil); w.Count() != 1 {
		t.Fatalf("after the confirmed jump: %d, want 1", w.Count())
	}
	if ns, _ := h.NewestNs(); ns != later+5*sec {
		t.Fatalf("newest %d, want %d", ns, later+5*sec)
	}
	if old, far, jumps := h.Refusals(); old != 0 || far != 2 || jumps != 2 {
		t.Fatalf("refusals: too old %d, too far %d, jumps %d; want 0, 2, 2 (the idle hour and the confirmed jump)", old, far, jumps)
	}
}

func TestAdvanceFollowsTrustedClock(t *testing.T) {
	h := mustHistory(t, sec, 10*sec)
	record(t, h, at(0), 1, 1)
	record(t, h, at(1), 1, 1)
	if n := h.Advance(at(10)); n != 0 {
		t.Fatalf("advance within retention expired %d", n)
	}
	if n := h.Advance(at(11)); n != 1 {
		t.Fatalf("advance past bucket 0 expired %d, want 1", n)
	}
	if n := h.Advance(at(3)); n != 0 { // never backwards
		t.Fatalf("backwards advance expired %d", n)
	}
	if n := h.Advance(at(11) + 100*24*3600*sec); n != 1 {
		t.Fatalf("trusted far advance expired %d, want 1", n)
	}
}

func TestPressureWindowCountMeanMax(t *testing.T) {
	p, err := NewPressure(sec, 10*sec)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []float64{0.5, 1.5, 1.0} {
		if !p.Record(at(2), r) {
			t.Fatalf("Record(%v) refused", r)
		}
	}
	p.Record(at(3.5), 4)
	p.Record(at(3.5), 2e9) // clamped
	w := p.Window(at(2), at(2.5))
	// over: 1.5 only (a ratio of exactly 1 meets the SLO)
	if w.Count != 3 || w.Over != 1 || w.Mean != 1 || w.Max != 1.5 || w.Buckets != 1 {
		t.Fatalf("bucket 2: %+v; want count 3, over 1, mean 1, max 1.5", w)
	}
	w = p.Window(at(0), at(4))
	if w.Count != 5 || w.Over != 3 || w.Max != MaxPressureRatio {
		t.Fatalf("window: %+v; want count 5, over 3, max clamped to %v", w, MaxPressureRatio)
	}
	if got := w.MissShare(); got != 0.6 {
		t.Fatalf("miss share %v, want 3/5", got)
	}
	p.Record(at(14), 1) // buckets 2 and 3 expire (older than 14-10)
	if w := p.Window(0, at(20)); w.Count != 1 || w.Over != 0 || w.Mean != 1 {
		t.Fatalf("after expiry: %+v; want count 1, over 0 (the misses drained)", w)
	}
	if got := (PressureWindow{}).MissShare(); got != 0 {
		t.Fatalf("empty window miss share %v, want 0", got)
	}
}

// A slot reused for a newer bucket starts its miss count from zero: the
// misses of the bucket it held expire with it (Expired counts them once,
// as observations), and a refused ratio counts nowhere.
func TestPressureOverDrainsWithItsBucket(t *testing.T) {
	p, err := NewPressure(sec, 4*sec)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []float64{2, 3, 0.9} {
		p.Record(at(1), r)
	}
	if p.Record(at(1), math.NaN()) || p.Record(at(1), -2) {
		t.Fatal("bad ratio accepted")
	}
	if w := p.Window(at(1), at(1)); w.Count != 3 || w.Over != 2 {
		t.Fatalf("bucket 1: %+v; want count 3, over 2", w)
	}
	// Slots() buckets later the same slot holds a newer bucket.
	later := at(1 + float64(p.r.Slots()))
	p.Record(later, 1.25)
	p.Record(later, 0.5)
	if w := p.Window(at(1), at(1)); w.Count != 0 || w.Over != 0 {
		t.Fatalf("expired bucket still read: %+v", w)
	}
	if w := p.Window(later, later); w.Count != 2 || w.Over != 1 {
		t.Fatalf("reused slot: %+v; want count 2, over 1 (none carried over)", w)
	}
	if p.Expired() != 3 {
		t.Fatalf("expired %d, want 3", p.Expired())
	}
}
