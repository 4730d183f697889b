package service

import (
	"fmt"
	"reflect"
)

// SettingDoc describes one configuration setting for the generated
// reference (docs/configuration.md; cmd/narwhal-docs).
type SettingDoc struct {
	// Path is the YAML path (core.step_s), Flag the flag (--core.step_s),
	// Env the environment variable (NARWHAL_CORE_STEP_S).
	Path, Flag, Env string
	// Type is the value's kind (string, bool, int64, float64, ...).
	Type string
	// Default is DefaultConfig's value, as the flag would take it.
	Default string
	// Owner is the struct type that declares the setting and Field the
	// Go field name, so that a generator can read the field's doc comment.
	Owner reflect.Type
	Field string
}

// SettingDocs lists every scalar setting of Config (the ones settable by
// file, environment and flag), sorted by path, with its default.
func SettingDocs() []SettingDoc {
	cfg := DefaultConfig()
	var out []SettingDoc
	for _, s := range settings(&cfg) {
		out = append(out, SettingDoc{Path: s.path, Flag: "--" + s.path, Env: s.env(),
			Type: s.v.Type().String(), Default: fmt.Sprint(s.v.Interface()), Owner: s.owner, Field: s.field.Name})
	}
	return out
}
