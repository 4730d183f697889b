package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
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
	var stdout, stderr lockedBuffer
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
