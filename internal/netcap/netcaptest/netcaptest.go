// Package netcaptest holds the test helpers for listeners: netcap's
// connection caps, and a free loopback address.
package netcaptest

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Refusals opens n connections to addr at once, waits up to wait for each
// to answer, closes them all, and returns how many were answered 503 (a
// connection within the cap sends nothing until it gets a request). The
// reads run concurrently: a deadline that has passed fails a read even
// with the refusal already buffered.
func Refusals(t testing.TB, addr string, n int, wait time.Duration) int {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		conns = append(conns, c)
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(wait))
			if line, _ := bufio.NewReader(c).ReadString('\n'); strings.HasPrefix(line, "HTTP/1.1 503") {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(refused.Load())
}

// FreeAddr is a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
