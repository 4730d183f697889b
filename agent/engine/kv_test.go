package engine

import (
	"errors"
	"strings"
	"testing"
)

var llama3_8B = Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 1}

func TestBytesPerToken(t *testing.T) {
	f := func(g Geometry, want int64) {
		t.Helper()
		got, err := g.BytesPerToken()
		if err != nil || got != want {
			t.Fatalf("unexpected bytes per token for %+v; got %d, %v; want %d", g, got, err, want)
		}
	}
	f(llama3_8B, 131072) // 2 × 32 × 8 × 128 × 2
	g := llama3_8B
	g.TP = 0 // treated as 1
	f(g, 131072)
	// Llama-3-70B TP=4: 2 × 80 × (8/4) × 128 × 2 = 81,920 B = 80 KiB per rank
	f(Geometry{Layers: 80, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 4}, 81920)
	// TP 16 > 8 KV heads: one head per rank (replicated)
	f(Geometry{Layers: 80, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 16}, 40960)
	if _, err := (Geometry{Layers: 32}).BytesPerToken(); !errors.Is(err, ErrGeometry) {
		t.Fatalf("unexpected error; got %v; want ErrGeometry", err)
	}
}

func TestCrossCheck(t *testing.T) {
	const a100_40G = 40 << 30
	// vllm#12330: 5,691 blocks × 16 = 91,056 tokens on an A100-40GB at 0.9
	l := CrossCheck(5691*16, a100_40G, llama3_8B, 0.9)
	// bound: floor(42,949,672,960 × 0.9 / 131,072) = 294,912
	if l.Tokens != 91056 || l.Source != KVSourceEngine || l.BoundTokens != 294912 || l.BytesPerToken != 131072 || l.Disagreement != "" {
		t.Fatalf("unexpected limit; got %+v", l)
	}
	// an engine claiming more than the memory can hold: reported, not hidden
	l = CrossCheck(1_000_000, 80<<30, llama3_8B, 0)
	if l.Tokens != 1_000_000 || l.BoundTokens != 655360 || !strings.Contains(l.Disagreement, "holds at most 655360") {
		t.Fatalf("unexpected limit; got %+v", l)
	}
	// no engine number: the bound, flagged
	l = CrossCheck(0, 80<<30, llama3_8B, 0.9)
	if l.Tokens != 589824 || l.Source != KVSourceBound || !strings.Contains(l.Disagreement, "overestimate") {
		t.Fatalf("unexpected limit; got %+v", l)
	}
	// no NVML: engine number kept, the missing check reported
	l = CrossCheck(91056, 0, llama3_8B, 0.9)
	if l.Tokens != 91056 || l.BoundTokens != 0 || !strings.Contains(l.Disagreement, "NVML memory unknown") {
		t.Fatalf("unexpected limit; got %+v", l)
	}
	l = CrossCheck(0, 0, Geometry{}, 0)
	if l.Tokens != 0 || !strings.Contains(l.Disagreement, "no model geometry") {
		t.Fatalf("unexpected limit; got %+v", l)
	}
}
