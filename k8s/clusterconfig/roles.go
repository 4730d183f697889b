package clusterconfig

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/narwhal-io/narwhal/core/controller"
)

// ErrInvalidRoles: a role label configuration Narwhal refuses.
var ErrInvalidRoles = errors.New("invalid role labels")

// Roles names the pod label that carries an engine's role and the values
// that mean prefill and decode. Routers select engines by it, so it must
// be the label the router in use reads: narwhal.io/role for Narwhal's own
// role table, llm-d.ai/role for llm-d's router (its inference scheduler
// filters prefill and decode pods by that label).
type Roles struct {
	// Preset fills the fields left empty: "narwhal" (narwhal.io/role;
	// also when empty) or "llm-d" (llm-d.ai/role); values prefill and
	// decode in both.
	Preset string `json:"preset" yaml:"preset"`
	// Key is the pod label that carries the role (narwhal.io/role,
	// llm-d.ai/role); empty: the preset's.
	Key string `json:"key" yaml:"key"`
	// Prefill is the label's value for the prefill role; empty: the
	// preset's.
	Prefill string `json:"prefill" yaml:"prefill"`
	// Decode is the label's value for the decode role; empty: the
	// preset's.
	Decode string `json:"decode" yaml:"decode"`
}

// LabelRole is Narwhal's own role label (the narwhal preset's key).
const LabelRole = "narwhal.io/role"

// Presets are the role labels of the routers Narwhal knows.
var Presets = map[string]Roles{
	"narwhal": {Preset: "narwhal", Key: LabelRole, Prefill: "prefill", Decode: "decode"},
	"llm-d":   {Preset: "llm-d", Key: "llm-d.ai/role", Prefill: "prefill", Decode: "decode"},
}

// DefaultRoles is the narwhal preset.
func DefaultRoles() Roles { return Presets["narwhal"] }

// Resolve fills empty fields from the preset (default "narwhal") and
// validates the result.
func (r Roles) Resolve() (Roles, error) {
	name := r.Preset
	if name == "" {
		name = "narwhal"
	}
	p, ok := Presets[name]
	if !ok {
		return Roles{}, fmt.Errorf("%w: preset %q (want narwhal or llm-d)", ErrInvalidRoles, r.Preset)
	}
	if r.Key == "" {
		r.Key = p.Key
	}
	if r.Prefill == "" {
		r.Prefill = p.Prefill
	}
	if r.Decode == "" {
		r.Decode = p.Decode
	}
	r.Preset = name
	return r, r.Validate()
}

// Validate checks the key is a qualified label name and the values are
// distinct label values.
func (r Roles) Validate() error {
	if errs := validation.IsQualifiedName(r.Key); len(errs) > 0 {
		return fmt.Errorf("%w: key %q: %s", ErrInvalidRoles, r.Key, strings.Join(errs, "; "))
	}
	for _, v := range []string{r.Prefill, r.Decode} {
		if v == "" {
			return fmt.Errorf("%w: prefill and decode values must be set", ErrInvalidRoles)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("%w: value %q: %s", ErrInvalidRoles, v, strings.Join(errs, "; "))
		}
	}
	if r.Prefill == r.Decode {
		return fmt.Errorf("%w: prefill and decode values are both %q", ErrInvalidRoles, r.Prefill)
	}
	return nil
}

// Selector is the label selector of every engine pod: key in (p, d).
func (r Roles) Selector() string {
	return fmt.Sprintf("%s in (%s,%s)", r.Key, r.Prefill, r.Decode)
}

// Value is the label value of role (empty for RoleNone).
func (r Roles) Value(role controller.Role) string {
	switch role {
	case controller.RolePrefill:
		return r.Prefill
	case controller.RoleDecode:
		return r.Decode
	}
	return ""
}

// Parse maps a label value to a role.
func (r Roles) Parse(v string) (controller.Role, bool) {
	switch v {
	case r.Prefill:
		return controller.RolePrefill, true
	case r.Decode:
		return controller.RoleDecode, true
	}
	return controller.RoleNone, false
}
