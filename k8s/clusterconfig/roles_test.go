package clusterconfig

import (
	"errors"
	"testing"
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
