package fuzz

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/service"
)

// FuzzServiceConfig feeds arbitrary YAML (the --config file) and flags to
// narwhal-core's configuration loader: it must never panic, must fail
// only with service.ErrConfig (or flag.ErrHelp), and what it accepts must
// validate and load again to the same configuration.
func FuzzServiceConfig(f *testing.F) {
	f.Add([]byte("listen: 127.0.0.1:9090\ncore:\n  step_s: 2\n  ttft_slo_s: 1.5\n"), "--events.max_future_s=10")
	f.Add([]byte("auth:\n  token_file: /nonexistent\n"), "")
	f.Add([]byte("core: {step_s: -1}\n"), "--agents.required")
	f.Add([]byte("kubernetes:\n  enabled: true\n"), "--kubernetes.namespace\x00ns")
	f.Add([]byte("{{{"), "--nope=1")
	f.Add([]byte("core:\n  controller:\n    cooldown_s: .inf\n"), "")
	f.Fuzz(func(t *testing.T, yaml []byte, flags string) {
		path := filepath.Join(t.TempDir(), "narwhal.yaml")
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config", path}
		if flags != "" {
			args = append(args, strings.Split(flags, "\x00")...)
		}
		noEnv := func(string) (string, bool) { return "", false }
		cfg, err := service.Load(args, noEnv)
		if err != nil {
			if !errors.Is(err, service.ErrConfig) && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("error without ErrConfig: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded a configuration that does not validate: %v", err)
		}
		again, err := service.Load(args, noEnv)
		if err != nil || !reflect.DeepEqual(cfg, again) {
			t.Fatalf("loading twice differs: %v", err)
		}
	})
}
