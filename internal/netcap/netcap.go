// Package netcap caps the connections a listener holds open. Every HTTP
// server Narwhal runs (the core's API and admin listeners, the agent's
// /metrics and /healthz) accepts through one, so that idle keep-alive
// connections cannot exhaust the process's file descriptors.
//
// A connection accepted beyond the cap is answered with a plain
// "503 Service Unavailable" (Retry-After: 1, Connection: close, a JSON
// error naming the setting) and closed at once: a client sees a quick
// refusal, never a hang in the accept backlog. (golang.org/x/net's
// netutil.LimitListener blocks in Accept instead, which leaves clients
// waiting in the kernel's backlog until their own timeout.) Refusals are
// counted and logged at most once a second.
package netcap

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Listener is a net.Listener holding at most Max connections open.
type Listener struct {
	net.Listener
	max     int64
	setting string
	reply   []byte
	refused prometheus.Counter
	log     *slog.Logger
	open    atomic.Int64
	logged  atomic.Int64 // unix s of the last "cap reached" log
}

// New caps ln at limit open connections (at least 1). setting names the
// limit in the refusal and the log (e.g. "http.max_connections");
// refused, when not nil, counts refusals; log may be nil (slog.Default).
func New(ln net.Listener, limit int64, setting string, refused prometheus.Counter, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	body := fmt.Sprintf(`{"error":"connection limit reached (%s); retry shortly"}`, setting)
	reply := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return &Listener{Listener: ln, max: max(1, limit), setting: setting, reply: []byte(reply), refused: refused, log: log}
}

// Max is the cap.
func (l *Listener) Max() int64 { return l.max }

// Open is the number of accepted connections not yet closed.
func (l *Listener) Open() int64 { return l.open.Load() }

// Accept returns the next connection within the cap; those beyond it are
// answered 503 and closed without being returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			if l.refused != nil {
				l.refused.Inc()
			}
			if now := time.Now().Unix(); l.logged.Swap(now) != now {
				l.log.Warn("connection refused: "+l.setting+" reached", "max", l.max, "addr", l.Addr().String())
			}
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(l.reply)
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
