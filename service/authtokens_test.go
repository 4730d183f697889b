package service

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "abc\n", want: []string{"abc"}},
		{in: "  new \n\n old\r\n", want: []string{"new", "old"}},
		{in: "a\na\nb", want: []string{"a", "b"}},
		{in: " \n\t\n", err: "holds no token"},
		{in: "", err: "holds no token"},
		{in: "1\n2\n3\n4\n5\n6\n7\n8\n9\n", err: "holds 9 tokens, at most 8"},
	} {
		got, err := parseTokens([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%q: got %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Fatalf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// secretDir lays out files as the kubelet does for a Secret volume:
// dir/name -> ..data/name, ..data -> a timestamped directory, and an
// update swaps ..data atomically (the rename of a new symlink).
type secretDir struct {
	t   *testing.T
	dir string
	gen int
}

// newSecretDir holds one file, token, with content.
func newSecretDir(t *testing.T, content string) *secretDir {
	return newSecretFiles(t, map[string]string{"token": content})
}

func newSecretFiles(t *testing.T, files map[string]string) *secretDir {
	d := &secretDir{t: t, dir: t.TempDir()}
	d.updateFiles(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(d.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d *secretDir) path() string { return d.file("token") }

func (d *secretDir) file(name string) string { return filepath.Join(d.dir, name) }

func (d *secretDir) update(content string) { d.updateFiles(map[string]string{"token": content}) }

func (d *secretDir) updateFiles(files map[string]string) {
	d.t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_12_03_%d", d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o755); err != nil {
		d.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d.dir, ts, name), []byte(content), 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

// A Secret rotated in place reaches the running service without a
// restart: the file lists the new token and the old one (both accepted),
// then the new one only (the old refused). A reload that is not valid
// (empty, or listing the agents' token) keeps the tokens accepted before
// and is counted; the agents' token file rotates the same way.
func TestTokenFilesRotateWithoutRestart(t *testing.T) {
	routers := newSecretDir(t, "old-router\n")
	agents := newSecretDir(t, "old-agent\n")
	cfg := testConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token, cfg.Auth.TokenFile = "", routers.path()
	cfg.Auth.AgentToken, cfg.Auth.AgentTokenFile = "", agents.path()
	cfg.Auth.TokenReloadS = 0.01
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.Token != "old-router" || cfg.Auth.AgentToken != "old-agent" {
		t.Fatalf("Validate read %q, %q; want old-router, old-agent", cfg.Auth.Token, cfg.Auth.AgentToken)
	}
	s, err := New(cfg, newRealCore(t, "e1"), nil, WithClock(func() int64 { return testNow }), WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	serving(t, s)
	client := &http.Client{Timeout: 10 * time.Second}
	postAs := func(path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr().String()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	event := fmt.Sprintf(`{"type":"offer_started","ts_ns":%d}`, ts(-1))
	// An empty report batch is refused for its content (400), not for its
	// token (401): enough to tell which tokens the agents' endpoint takes.
	routerOK := func(tok string) bool { return postAs("/v1/events", tok, event) == http.StatusOK }
	agentOK := func(tok string) bool { return postAs("/v1/agent/reports", tok, "{}") != http.StatusUnauthorized }
	reloads := func(token, result string) float64 {
		return testutil.ToFloat64(s.tokens.reloads.WithLabelValues(token, result))
	}

	if !routerOK("old-router") || routerOK("new-router") || !agentOK("old-agent") || agentOK("old-router") {
		t.Fatal("at start: want old-router on events and old-agent on reports only")
	}
	routers.update("new-router\nold-router\n")
	eventually(t, "the new router token accepted", func() bool { return routerOK("new-router") })
	if !routerOK("old-router") {
		t.Fatal("during the rotation the old router token was refused")
	}
	if s.tokens.router.current() != "new-router" {
		t.Fatalf("current %q, want new-router (the first line)", s.tokens.router.current())
	}
	routers.update("new-router\n")
	eventually(t, "the old router token refused", func() bool { return !routerOK("old-router") })
	if !routerOK("new-router") || reloads("token", "ok") != 2 {
		t.Fatalf("after the rotation: new-router refused or %v ok reloads (want 2)", reloads("token", "ok"))
	}

	// Bad reloads change nothing and are counted.
	routers.update("\n \n")
	eventually(t, "an empty token file counted", func() bool { return reloads("token", "error") >= 1 })
	agents.update("new-agent\nnew-router\n")
	eventually(t, "an agent file listing the routers' token counted", func() bool { return reloads("agent_token", "error") >= 1 })
	if !routerOK("new-router") || !agentOK("old-agent") || agentOK("new-agent") || agentOK("new-router") {
		t.Fatal("a bad reload changed the accepted tokens")
	}
	agents.update("new-agent\n")
	eventually(t, "the new agent token accepted", func() bool { return agentOK("new-agent") })
	if agentOK("old-agent") || routerOK("new-agent") {
		t.Fatal("after the agents' rotation: old-agent still accepted, or new-agent accepted on events")
	}
}

// A token file that lists the agents' token is refused at start, as a
// fixed token equal to it is.
func TestTokenFilesSharingATokenRefused(t *testing.T) {
	p := writeFile(t, "tok", "r1\nshared\n")
	_, err := Load([]string{"--auth.token_file", p}, envOf(map[string]string{"NARWHAL_AUTH_AGENT_TOKEN": "shared"}))
	if err == nil || !strings.Contains(err.Error(), "auth.agent_token must differ from auth.token") {
		t.Fatalf("got %v; want the shared token refused", err)
	}
	for _, setting := range []string{"auth.token_reload_s", "tls.reload_s"} {
		for _, v := range []string{"-1", "NaN", "1e9"} {
			_, err := Load([]string{"--" + setting + "=" + v}, envOf(map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_AUTH_AGENT_TOKEN": "a"}))
			if err == nil || !strings.Contains(err.Error(), setting+" must be") {
				t.Fatalf("%s %s: got %v; want refused", setting, v, err)
			}
		}
	}
}

// A replica ships demand deltas with the first token of the current file.
func TestFollowedTokenReloads(t *testing.T) {
	d := newSecretDir(t, "a\n")
	now := int64(0)
	tok := followedToken(newTokenSource("token", "a", d.path(), slog.New(slog.DiscardHandler), nil), 10e9, func() int64 { return now })
	if got := tok(); got != "a" {
		t.Fatalf("got %q, want a", got)
	}
	d.update("b\na\n")
	now = 9e9
	if got := tok(); got != "a" {
		t.Fatalf("before the reload period: got %q, want a", got)
	}
	now = 10e9
	if got := tok(); got != "b" {
		t.Fatalf("after the reload period: got %q, want b", got)
	}
	d.update("")
	now = 30e9
	if got := tok(); got != "b" {
		t.Fatalf("after an empty file: got %q, want b kept", got)
	}
}
