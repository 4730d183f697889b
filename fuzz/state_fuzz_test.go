package fuzz

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// FuzzStateFile feeds arbitrary bytes to the core as its saved state (a
// state.json after a crash, a full disk or a hand edit): the core must
// either start or fail with ErrStateTorn or ErrInvalidState, never panic,
// and once started keep every engine in exactly one role through steps,
// with decision sequences past the saved one.
func FuzzStateFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"seq":7,"last_move_ns":1795000000000000000,"last_move_dir":1,"confirm":{"dir":1,"count":2,"seq":7},"engines":[{"id":"e0","role":"prefill","last_move_ns":1795000000000000000},{"id":"e3","role":"decode"}],"risks":[{"at_ns":1795000000000000000,"kind":"decode_pressure"}]}`))
	f.Add([]byte(`{"version":1,"seq":3,"engines":[{"id":"e1","role":"sideways"}]}`))
	f.Add([]byte(`{"version":1,"seq":`))
	f.Add([]byte(``))
	f.Add([]byte(`{"version":1,"seq":18446744073709551615,"last_move_ns":9223372036854775807}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		now := fuzzBase
		c, err := core.New(core.DefaultConfig(), core.WithStateFile(path), core.WithClock(func() int64 { return now }),
			core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			if !errors.Is(err, controller.ErrStateTorn) && !errors.Is(err, controller.ErrInvalidState) {
				t.Fatalf("start refused with an unexpected error: %v", err)
			}
			return
		}
		defer c.Close()
		saved, _ := controller.LoadState(path)
		for i := range 4 {
			role := controller.RolePrefill
			if i%2 == 1 {
				role = controller.RoleDecode
			}
			if err := c.UpsertEngine(controller.Engine{ID: "e" + string(rune('0'+i)), Node: "n", Model: "facebook/opt-13b", GPU: "A100-80GB",
				Role: role, Live: true, KVCapacityTokens: 66144}); err != nil {
				t.Fatal(err)
			}
		}
		for s := range 5 {
			now = fuzzBase + int64(s)*1e9
			for k := range 20 {
				_ = c.OfferSized(now-int64(k)*1e7, 2048, 256)
			}
			d := c.Step(now)
			if d.Seq <= saved.Seq {
				t.Fatalf("step %d: decision seq %d not past the saved %d", s, d.Seq, saved.Seq)
			}
			rt := c.Roles()
			seen := map[string]int{}
			for _, id := range rt.Prefill {
				seen[id]++
			}
			for _, id := range rt.Decode {
				seen[id]++
			}
			for _, e := range c.Engines() {
				if seen[e.ID] > 1 || (seen[e.ID] == 0 && e.State == controller.StateServing) {
					t.Fatalf("step %d: engine %s in %d roles (state %s)", s, e.ID, seen[e.ID], e.State)
				}
				if e.LastMoveNs > now {
					t.Fatalf("step %d: engine %s last move %d ns after the step", s, e.ID, e.LastMoveNs-now)
				}
			}
		}
	})
}
