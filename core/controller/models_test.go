package controller

import (
	"strings"
	"testing"
)

// A fleet whose live engines serve two models moves nothing: the move
// that d2p makes on a one-model fleet is blocked by profile_coverage,
// naming both models. A spelling of the same model that the profiles
// alias (opt-13b for facebook/opt-13b), an engine with no model, and a
// dead engine of another model do not count; removing the other model's
// engine lets the move through.
func TestOneModelPerController(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra Engine
		block bool
	}{
		{"another model, live", Engine{ID: "x", Model: "meta-llama/Llama-2-70b-hf", GPU: "A100-80GB", Role: RoleDecode, Live: true, KVCapacityTokens: 66144}, true},
		{"the same model, another spelling", Engine{ID: "x", Model: "OPT-13B", GPU: "A100-80GB", Role: RoleDecode, Live: true, KVCapacityTokens: 66144}, false},
		{"another model, not live", Engine{ID: "x", Model: "meta-llama/Llama-2-70b-hf", GPU: "A100-80GB", Role: RoleDecode, KVCapacityTokens: 66144}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestController(t, closedFormConfig(), 4, 4)
			if err := c.UpsertEngine(tc.extra); err != nil {
				t.Fatal(err)
			}
			d := c.Step(t0, d2pInputs())
			if !tc.block {
				if d.Action != ActionMove {
					t.Fatalf("got %s blocked %q (%s); want a move", d.Action, d.Blocked, d.Reason)
				}
				return
			}
			if d.Action != ActionBlocked || d.Blocked != GateProfileCoverage {
				t.Fatalf("got %s blocked %q; want blocked by %s", d.Action, d.Blocked, GateProfileCoverage)
			}
			g := d.Gates[len(d.Gates)-2]
			if g.Gate != GateProfileCoverage || !strings.Contains(g.Detail, "more than one model") ||
				!strings.Contains(g.Detail, "Llama-2-70b-hf") || !strings.Contains(g.Detail, "facebook/opt-13b") {
				t.Fatalf("gate %+v; want the two models named", g)
			}
			if err := c.RemoveEngine("x"); err != nil {
				t.Fatal(err)
			}
			if d := c.Step(t0+sec, d2pInputs()); d.Action != ActionMove {
				t.Fatalf("after removing the other model: got %s blocked %q; want a move", d.Action, d.Blocked)
			}
		})
	}
}

// An engine with no model named is not counted as another model (it is
// unprofiled, so the decision itself holds on that basis).
func TestOneModelIgnoresUnnamed(t *testing.T) {
	c := newTestController(t, closedFormConfig(), 4, 4)
	if err := c.UpsertEngine(Engine{ID: "x", GPU: "A100-80GB", Role: RoleDecode, Live: true, KVCapacityTokens: 66144}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	got := c.liveModels()
	c.mu.Unlock()
	if got != "" {
		t.Fatalf("liveModels %q; want \"\" (one model and an unnamed engine)", got)
	}
	if err := c.UpsertEngine(Engine{ID: "y", Model: "Qwen/Qwen3-32B", GPU: "H100", Role: RoleDecode, Live: true}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	got = c.liveModels()
	c.mu.Unlock()
	if !strings.Contains(got, "Qwen/Qwen3-32B on y") {
		t.Fatalf("liveModels %q; want Qwen/Qwen3-32B on y named", got)
	}
}
