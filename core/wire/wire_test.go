package wire

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

func TestValidate(t *testing.T) {
	f := func(r Report, wantIn string) {
		t.Helper()
		err := r.Validate()
		if wantIn == "" {
			if err != nil {
				t.Fatalf("unexpected error; got %v; want nil", err)
			}
			return
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), wantIn) {
			t.Fatalf("unexpected error; got %v; want ErrInvalid containing %q", err, wantIn)
		}
	}
	base := Report{Kind: KindHeartbeat, Node: "n", Epoch: 1, Seq: 1}
	f(base, "")
	r := base
	r.Node = ""
	f(r, "node")
	r = base
	r.Epoch = 0
	f(r, "epoch 0")
	r = base
	r.Kind = "bogus"
	f(r, "unknown kind")
	r = base
	r.Liveness = &Liveness{Engine: "e"}
	f(r, "heartbeat carries no payload")
	r = base
	r.Kind = KindLiveness
	f(r, "needs exactly the liveness payload")
	r.Liveness = &Liveness{Engine: "e"}
	f(r, "")
	r = base
	r.Kind = KindSnapshot
	r.Snapshot = &Snapshot{Engines: []EngineReport{{ID: "e", Resident: controller.Resident{QueuedPrefillS: math.NaN()}}}}
	f(r, "finite")
	r.Snapshot.Engines[0] = EngineReport{ID: "e", KVCapacityTokens: -1}
	f(r, "kv_capacity_tokens -1")
	// busy_s: absent or finite and >= 0
	for _, tc := range []struct {
		busy   float64
		wantIn string
	}{{0.5, ""}, {0, ""}, {-1, "busy_s -1"}, {math.Inf(1), "busy_s +Inf"}, {math.NaN(), "busy_s NaN"}} {
		b := tc.busy
		r.Snapshot.Engines[0] = EngineReport{ID: "e", Latency: &controller.LatencyInterval{IntervalS: 1, BusyS: &b}}
		f(r, tc.wantIn)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	in := Batch{Version: Version, Reports: []Report{{Kind: KindSnapshot, Node: "n", Epoch: 5, Seq: 2, SentNs: 9,
		Snapshot: &Snapshot{Engines: []EngineReport{{ID: "e1", Role: controller.RolePrefill, Live: true,
			Resident: controller.Resident{DecodeSeqs: 4, KVTokens: 1000}, KVCapacityTokens: 91056}}}}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"role":"prefill"`) || !strings.Contains(string(b), `"kv_capacity_tokens":91056`) {
		t.Fatalf("unexpected JSON; got %s", b)
	}
	var out Batch
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	e := out.Reports[0].Snapshot.Engines[0]
	if e.Role != controller.RolePrefill || e.Resident.KVTokens != 1000 || out.Reports[0].Epoch != 5 {
		t.Fatalf("unexpected round trip; got %+v", out)
	}
}
