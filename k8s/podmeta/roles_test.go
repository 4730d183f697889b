package podmeta

import (
	"errors"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

func TestRolesReadThePresetLabel(t *testing.T) {
	r, err := Roles{Preset: "llm-d"}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Selector(); got != "llm-d.ai/role in (prefill,decode)" {
		t.Fatalf("Selector() = %q", got)
	}
	e, err := EngineFromPodWith(r, pod("p", map[string]string{"llm-d.ai/role": "decode", LabelRole: "prefill"}, nil, true))
	if err != nil || e.Role != controller.RoleDecode {
		t.Fatalf("llm-d pod: %+v, %v; want decode from llm-d.ai/role", e, err)
	}
	if _, err := EngineFromPodWith(r, pod("q", map[string]string{LabelRole: "prefill"}, nil, true)); !errors.Is(err, ErrNoRole) {
		t.Fatalf("pod without llm-d.ai/role: %v; want ErrNoRole", err)
	}
	if _, err := EngineFromPodWith(r, pod("b", map[string]string{"llm-d.ai/role": "both"}, nil, true)); !errors.Is(err, ErrNoRole) {
		t.Fatalf("llm-d role both: %v; want ErrNoRole (not an engine Narwhal moves)", err)
	}
	if r.Value(controller.RolePrefill) != "prefill" || r.Value(controller.RoleNone) != "" {
		t.Fatal("Value")
	}
}
