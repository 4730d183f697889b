package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

// Papercut: `narwhal-core --help` lists the demo's way to run and its
// flags (--demo, --pace, --listen) beside the service's settings, and
// `--demo --help` prints the same.
func TestHelpListsTheDemoAndItsFlags(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"--help"}, {"--demo", "--help"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		for _, want := range []string{"--demo", "--pace", "--listen", "--rate-scale", "--engines", "--core.step_s", "--auth.allow_unauthenticated"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%v does not list %s:\n%s", args, want, out)
			}
		}
	}
}

// Papercut: the demo with its port taken fails at once, before the
// replay, and says what to do.
func TestDemoWithItsPortTakenFailsAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var stdout, stderr syncbuf.Buffer
	start := time.Now()
	err = runDemo(context.Background(), []string{"--listen", taken.Addr().String()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "--listen 127.0.0.1:0") {
		t.Fatalf("got %v; want an address-in-use error suggesting --listen 127.0.0.1:0", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("failed after %v; want at once", d)
	}
	if strings.Contains(stdout.String(), "decision ") {
		t.Fatalf("replayed before failing: %s", stdout.String())
	}
}

// NARWHAL_CONFIG names the configuration file as --config does: with it
// and no arguments narwhal-core runs the service (it used to run the
// demo, ignoring the file and every NARWHAL_* setting); without it, or
// with --demo, the demo.
func TestNarwhalConfigAloneRunsTheService(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	for _, c := range []struct {
		args     []string
		env      map[string]string
		demo     bool
		wantArgs []string
	}{
		{nil, map[string]string{"NARWHAL_CONFIG": "/etc/narwhal/core.yaml"}, false, nil},
		{nil, nil, true, nil},
		{nil, map[string]string{"NARWHAL_CONFIG": ""}, true, nil},
		{[]string{"--demo", "--pace", "120"}, map[string]string{"NARWHAL_CONFIG": "x.yaml"}, true, []string{"--pace", "120"}},
		{[]string{"--config", "x.yaml"}, nil, false, []string{"--config", "x.yaml"}},
	} {
		demo, args := demoArgs(c.args, env(c.env))
		if demo != c.demo || strings.Join(args, " ") != strings.Join(c.wantArgs, " ") {
			t.Errorf("demoArgs(%q) with %v: got demo %v, args %q; want demo %v, args %q", c.args, c.env, demo, args, c.demo, c.wantArgs)
		}
	}
}

// The binary, run with NARWHAL_CONFIG and no argument, serves the file's
// configuration: its listen address and its static engine.
func TestNarwhalConfigAloneServesTheFile(t *testing.T) {
	bin := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "narwhal.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nagents: {required: false}\n"+
		"engines: [{id: from-the-file, node: n, model: facebook/opt-13b, gpu: A100-80GB, role: decode}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NARWHAL_CONFIG", cfg)
	p := startBinary(t, bin)
	var roles struct {
		Decode []string `json:"decode"`
	}
	p.GetJSON(t, "/v1/roles", &roles)
	if strings.Join(roles.Decode, ",") != "from-the-file" {
		t.Fatalf("decode engines %q; want the file's [from-the-file]", roles.Decode)
	}
	p.Stop(t)
}
