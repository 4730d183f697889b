package liveness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// listener on 127.0.0.1:8000 (0x1F40) and an established connection on 8001
const tcpListen8000 = tcpHeader +
	"   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n" +
	"   1: 0100007F:1F41 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 12346 1 0000000000000000 100 0 0 10 0\n"

func next(t *testing.T, w *Proc) (Event, bool) {
	t.Helper()
	select {
	case ev := <-w.Events():
		return ev, true
	default:
		return Event{}, false
	}
}

func TestProcFallback(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "123", "stat"), "123 (vllm (serve) x) S 1 123 123 0 -1 4194560 0\n")
	write(t, filepath.Join(root, "123", "net", "tcp"), tcpListen8000)
	write(t, filepath.Join(root, "self", "net", "tcp6"), tcpHeader)
	w := NewProc(root, 16)
	if err := w.WatchPID(123); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{8000, 8001} {
		if err := w.WatchPort(Socket{Port: port}); err != nil {
			t.Fatal(err)
		}
	}
	f := func(nowNs int64, want ...Event) {
		t.Helper()
		if !w.Poll(nowNs) {
			t.Fatal("Poll returned false on an open watcher")
		}
		for _, we := range want {
			got, ok := next(t, w)
			if !ok || got != we {
				t.Fatalf("at %d: unexpected event; got %+v (%v); want %+v", nowNs, got, ok, we)
			}
		}
		if got, ok := next(t, w); ok {
			t.Fatalf("at %d: unexpected extra event %+v", nowNs, got)
		}
	}
	f(1) // nothing changed; 8001 is not a listener
	write(t, filepath.Join(root, "123", "net", "tcp"), tcpHeader)
	f(2, Event{Kind: PortClosed, Port: 8000, AtNs: 2})
	write(t, filepath.Join(root, "123", "net", "tcp"), tcpListen8000)
	f(3, Event{Kind: PortOpened, Port: 8000, AtNs: 3})
	// zombie = exited; its net dir is no longer read, so the port closes too
	write(t, filepath.Join(root, "123", "stat"), "123 (vllm (serve) x) Z 1 123 123 0 -1 4194560 0\n")
	f(4, Event{Kind: Exited, PID: 123, AtNs: 4}, Event{Kind: PortClosed, Port: 8000, AtNs: 4})
	f(5)
	if err := w.WatchPID(-1); err == nil {
		t.Fatal("pid -1 accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Poll(6) {
		t.Fatal("Poll returned true after Close")
	}
}

func TestProcRealChild(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	w := NewProc("/proc", 4)
	if err := w.WatchPID(int32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	w.Poll(1)
	if _, ok := next(t, w); ok {
		t.Fatal("event for a live child")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	w.Poll(2)
	if ev, ok := next(t, w); !ok || ev.Kind != Exited || ev.PID != int32(cmd.Process.Pid) {
		t.Fatalf("unexpected event; got %+v (%v); want exit of %d", ev, ok, cmd.Process.Pid)
	}
}

// Two engines listen on 8000 in their own namespaces (pods); a watch of one
// namespace's 8000 sees only that namespace's listener. Namespace files are
// plain files here: NetNSOf reads their inode, and a hard link is the same
// namespace.
func TestProcPortsByNamespace(t *testing.T) {
	root := t.TempDir()
	for _, pid := range []string{"123", "456"} {
		write(t, filepath.Join(root, pid, "stat"), pid+" (vllm) S 1 1 1 0 -1 0 0\n")
		write(t, filepath.Join(root, pid, "net", "tcp"), tcpListen8000)
		write(t, filepath.Join(root, pid, "ns", "net"), "")
	}
	write(t, filepath.Join(root, "self", "net", "tcp"), tcpHeader)
	if err := os.MkdirAll(filepath.Join(root, "self", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	// the agent shares 456's namespace (a host-network engine)
	if err := os.Link(filepath.Join(root, "456", "ns", "net"), filepath.Join(root, "self", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	ns123, err := NetNSOf(filepath.Join(root, "123", "ns", "net"))
	if err != nil {
		t.Fatal(err)
	}
	ns456, err := NetNSOf(filepath.Join(root, "456", "ns", "net"))
	if err != nil {
		t.Fatal(err)
	}
	if ns123 == ns456 {
		t.Fatal("test setup: two files share an inode")
	}
	w := NewProc(root, 16)
	for _, pid := range []int32{123, 456} {
		if err := w.WatchPID(pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WatchPort(Socket{NetNS: ns123, Port: 8000}); err != nil {
		t.Fatal(err)
	}
	if err := w.WatchPort(Socket{Port: 8000}); err != nil { // every namespace
		t.Fatal(err)
	}
	w.Poll(1)
	if ev, ok := next(t, w); ok {
		t.Fatalf("unexpected event with every listener up: %+v", ev)
	}
	// 456's listener closes: the watch of 123's namespace stays quiet, the
	// watch of every namespace still sees 123's
	write(t, filepath.Join(root, "456", "net", "tcp"), tcpHeader)
	w.Poll(2)
	if ev, ok := next(t, w); ok {
		t.Fatalf("a close in another namespace was reported: %+v", ev)
	}
	// 123's closes: both watches report, each with its own namespace
	write(t, filepath.Join(root, "123", "net", "tcp"), tcpHeader)
	w.Poll(3)
	want := []Event{{Kind: PortClosed, Port: 8000, NetNS: 0, AtNs: 3}, {Kind: PortClosed, Port: 8000, NetNS: ns123, AtNs: 3}}
	for _, we := range want {
		if got, ok := next(t, w); !ok || got != we {
			t.Fatalf("unexpected event; got %+v (%v); want %+v", got, ok, we)
		}
	}
	if ev, ok := next(t, w); ok {
		t.Fatalf("unexpected extra event %+v", ev)
	}
}
