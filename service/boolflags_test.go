package service

import (
	"errors"
	"strings"
	"testing"
)

// Papercut: `--auth.allow_unauthenticated true` works as the missing-token
// error suggests, like `=true` and the bare flag; other forms keep their
// meaning.
func TestBoolSettingTakesItsValueAsTheNextArgument(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	f := func(args []string, wantAllow, wantRequired bool) {
		t.Helper()
		cfg, err := Load(append([]string{"--listen", "127.0.0.1:0"}, args...), noEnv)
		if err != nil {
			t.Fatalf("Load(%q): %v", args, err)
		}
		if cfg.Auth.AllowUnauthenticated != wantAllow || cfg.Agents.Required != wantRequired {
			t.Fatalf("Load(%q): allow_unauthenticated %v, agents.required %v; want %v, %v", args,
				cfg.Auth.AllowUnauthenticated, cfg.Agents.Required, wantAllow, wantRequired)
		}
	}
	f([]string{"--auth.allow_unauthenticated", "true"}, true, true)
	f([]string{"--auth.allow_unauthenticated=true"}, true, true)
	f([]string{"--auth.allow_unauthenticated"}, true, true)
	f([]string{"--auth.allow_unauthenticated", "true", "--agents.required", "false"}, true, false)
	f([]string{"--agents.required", "--auth.allow_unauthenticated", "true"}, true, true)

	// Without a token the error names the form that now works.
	_, err := Load([]string{"--listen", "127.0.0.1:0"}, noEnv)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "auth.allow_unauthenticated=true") {
		t.Fatalf("missing token: got %v", err)
	}
	// A bool setting given a non-boolean next argument: that argument is
	// still a stray one.
	if _, err := Load([]string{"--auth.allow_unauthenticated", "yes"}, noEnv); err == nil || !strings.Contains(err.Error(), `unexpected argument "yes"`) {
		t.Fatalf("stray argument: got %v", err)
	}
}
