package podmeta

import (
	"errors"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

func TestRolesPresetsAndOverrides(t *testing.T) {
	f := func(in Roles, want Roles) {
		t.Helper()
		got, err := in.Resolve()
		if err != nil || got != want {
			t.Fatalf("Resolve(%+v) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	f(Roles{}, Roles{Preset: "narwhal", Key: "narwhal.io/role", Prefill: "prefill", Decode: "decode"})
	f(Roles{Preset: "llm-d"}, Roles{Preset: "llm-d", Key: "llm-d.ai/role", Prefill: "prefill", Decode: "decode"})
	f(Roles{Preset: "llm-d", Decode: "generate"}, Roles{Preset: "llm-d", Key: "llm-d.ai/role", Prefill: "prefill", Decode: "generate"})
	f(Roles{Key: "example.com/phase", Prefill: "p", Decode: "d"}, Roles{Preset: "narwhal", Key: "example.com/phase", Prefill: "p", Decode: "d"})

	for _, bad := range []Roles{{Preset: "vllm"}, {Key: "not a key"}, {Prefill: "x", Decode: "x"}, {Decode: "bad value!"}} {
		if _, err := bad.Resolve(); !errors.Is(err, ErrInvalidRoles) {
			t.Fatalf("Resolve(%+v): got %v; want ErrInvalidRoles", bad, err)
		}
	}
}

func TestRolesReadThePresetLabel(t *testing.T) {
	r, err := Roles{Preset: "llm-d"}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Selector(); got != "llm-d.ai/role in (prefill,decode)" {
		t.Fatalf("Selector() = %q", got)
	}
	e, err := r.EngineFromPod(pod("p", map[string]string{"llm-d.ai/role": "decode", LabelRole: "prefill"}, nil, true))
	if err != nil || e.Role != controller.RoleDecode {
		t.Fatalf("llm-d pod: %+v, %v; want decode from llm-d.ai/role", e, err)
	}
	if _, err := r.EngineFromPod(pod("q", map[string]string{LabelRole: "prefill"}, nil, true)); !errors.Is(err, ErrNoRole) {
		t.Fatalf("pod without llm-d.ai/role: %v; want ErrNoRole", err)
	}
	if _, err := r.EngineFromPod(pod("b", map[string]string{"llm-d.ai/role": "both"}, nil, true)); !errors.Is(err, ErrNoRole) {
		t.Fatalf("llm-d role both: %v; want ErrNoRole (not an engine Narwhal moves)", err)
	}
	if r.Value(controller.RolePrefill) != "prefill" || r.Value(controller.RoleNone) != "" {
		t.Fatal("Value")
	}
}
