package servicetest

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes content to name in a fresh temporary directory of t
// (mode 0600, as token files are) and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// EnvOf is a lookupEnv over m, for service.Load.
func EnvOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
