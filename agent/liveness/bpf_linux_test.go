//go:build linux

package liveness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "NARWHAL_LIVENESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// child: listen on a loopback port, print it, wait to be killed
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		select {}
	}
	if p := os.Getenv(netnsChildEnv); p != "" {
		// child in its own network namespace: listen on the port, print
		// the namespace, close the listener when stdin closes
		ns, err := NetNSOf("/proc/self/ns/net")
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		l, err := plainTCP().Listen(context.Background(), "tcp4", "0.0.0.0:"+p)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println(ns)
		_, _ = io.Copy(io.Discard, os.Stdin)
		if err := l.Close(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const netnsChildEnv = "NARWHAL_LIVENESS_TEST_NETNS_PORT"

// loadBPF loads the watcher for a test, closed at its end; it skips the
// test when not root or when the kernel refuses the program.
func loadBPF(t *testing.T) *BPF {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("eBPF liveness test needs root (CI runs it as root)")
	}
	w, err := NewBPF(nil)
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			t.Skipf("kernel refused the eBPF liveness program: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// TestBPFExitAndPortClose is acceptance 4: a child listening on a loopback
// port is registered and killed; the exit and the port close arrive within
// 200 ms.
func TestBPFExitAndPortClose(t *testing.T) {
	w := loadBPF(t)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || port <= 0 || port > 65535 {
		t.Fatalf("child said %q", line)
	}
	pid := int32(cmd.Process.Pid)
	if err := w.WatchPID(pid); err != nil {
		t.Fatal(err)
	}
	// the child shares the test's network namespace: watch the port there
	ns, err := NetNSOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WatchPort(Socket{NetNS: ns, Port: uint16(port)}); err != nil {
		t.Fatal(err)
	}
	// an accepted connection on the same port must not count as a close
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	killedNs := time.Now().UnixNano()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(200 * time.Millisecond)
	var gotExit, gotClose bool
	for !gotExit || !gotClose {
		select {
		case ev := <-w.Events():
			switch {
			case ev.Kind == Exited && ev.PID == pid:
				gotExit = true
			case ev.Kind == PortClosed && ev.Port == uint16(port) && ev.NetNS == ns:
				gotClose = true
			default:
				t.Fatalf("unexpected event %+v", ev)
			}
			if ev.AtNs < killedNs-int64(time.Second) || ev.AtNs > time.Now().UnixNano()+int64(time.Second) {
				t.Fatalf("event time %d far from the kill at %d", ev.AtNs, killedNs)
			}
		case <-deadline:
			t.Fatalf("within 200 ms: exit %v, port close %v; want both", gotExit, gotClose)
		}
	}
	t.Logf("exit and port close reported %.1f ms after the kill", float64(time.Now().UnixNano()-killedNs)/1e6)
	if w.Source() != "ebpf" {
		t.Fatalf("unexpected source %q", w.Source())
	}
}

// plainTCP listens without MPTCP, as engines do (Go's listeners default to
// MPTCP where the kernel has it: two sockets, each reporting).
func plainTCP() *net.ListenConfig {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return &lc
}

// listenInNewNetNS runs a child process in a fresh network namespace (a
// pod's, on a node) that opens and closes a listener on port, and returns
// that namespace's inode.
func listenInNewNetNS(t *testing.T, port int) uint32 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), netnsChildEnv+"="+strconv.Itoa(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("cannot make a network namespace here: %v", err)
		}
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	in.Close() // the child closes its listener and exits
	if werr := cmd.Wait(); err != nil || werr != nil {
		t.Fatalf("namespace child: said %q (%v), exit %v", line, err, werr)
	}
	ns, err := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if err != nil {
		t.Fatalf("namespace child said %q", line)
	}
	return uint32(ns)
}

// Pods on one node listen on the same port in their own network
// namespaces: a watch of the port in one namespace must not report another
// namespace's listener, and a watch of every namespace reports each with
// its own namespace.
func TestBPFPortEventsKeepNamespacesApart(t *testing.T) {
	w := loadBPF(t)
	hostNS, err := NetNSOf("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // before the watch: not reported

	if err := w.WatchPort(Socket{NetNS: hostNS, Port: uint16(port)}); err != nil {
		t.Fatal(err)
	}
	podNS := listenInNewNetNS(t, port)
	if podNS == hostNS || podNS == 0 {
		t.Fatalf("new namespace %d; host %d", podNS, hostNS)
	}
	// Then the same port in the host namespace. Ring buffer events arrive
	// in order: had the pod's listener been reported, it would come first.
	hl, err := plainTCP().Listen(context.Background(), "tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	hl.Close()
	expect := func(want ...Event) {
		t.Helper()
		deadline := time.After(500 * time.Millisecond)
		for _, we := range want {
			select {
			case ev := <-w.Events():
				ev.AtNs = 0
				if ev != we {
					t.Fatalf("unexpected event %+v; want %+v", ev, we)
				}
			case <-deadline:
				t.Fatalf("no event within 500 ms; want %+v", we)
			}
		}
	}
	expect(Event{Kind: PortOpened, Port: uint16(port), NetNS: hostNS}, Event{Kind: PortClosed, Port: uint16(port), NetNS: hostNS})

	// A watch of every namespace sees the next pod's listener, with its
	// namespace; the host watch still takes the host's events.
	if err := w.WatchPort(Socket{Port: uint16(port)}); err != nil {
		t.Fatal(err)
	}
	pod2 := listenInNewNetNS(t, port)
	expect(Event{Kind: PortOpened, Port: uint16(port), NetNS: pod2}, Event{Kind: PortClosed, Port: uint16(port), NetNS: pod2})
	if err := w.UnwatchPort(Socket{Port: uint16(port)}); err != nil {
		t.Fatal(err)
	}
	if err := w.UnwatchPort(Socket{NetNS: hostNS, Port: uint16(port)}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event after the last listener %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}
