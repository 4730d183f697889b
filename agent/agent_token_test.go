package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// During a rotation the token file lists the new token and the old one;
// the agent sends the first, and a file with no token is an error, not
// an empty Authorization header.
func TestTokenFileFirstLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "token")
	a := &Agent{cfg: Config{TokenFile: p}}
	for _, tc := range []struct{ content, want, err string }{
		{content: "s3cret\n", want: "s3cret"},
		{content: "\n  new-token \nold-token\n", want: "new-token"},
		{content: " \n\n", err: "holds no token"},
	} {
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := a.token()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: got %q, %v; want error %q", tc.content, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Fatalf("%q: got %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
}
