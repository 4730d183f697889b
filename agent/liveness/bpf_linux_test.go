//go:build linux

package liveness

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	os.Exit(m.Run())
}

// TestBPFExitAndPortClose is acceptance 4: a child listening on a loopback
// port is registered and killed; the exit and the port close arrive within
// 200 ms.
func TestBPFExitAndPortClose(t *testing.T) {
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
	defer w.Close()

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
	if err := w.WatchPort(uint16(port)); err != nil {
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
			case ev.Kind == PortClosed && ev.Port == uint16(port):
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
