package liveness

import (
	"context"
	"errors"
	"log/slog"
)

// EventKind is what happened.
type EventKind uint8

const (
	// Exited: a watched process exited.
	Exited EventKind = iota + 1
	// PortClosed: a watched port stopped listening.
	PortClosed
	// PortOpened: a watched port started listening.
	PortOpened
)

// String returns "exit", "port_closed" or "port_open".
func (k EventKind) String() string {
	switch k {
	case Exited:
		return "exit"
	case PortClosed:
		return "port_closed"
	case PortOpened:
		return "port_open"
	}
	return "unknown"
}

// Socket is a listening TCP port in one network namespace. NetNS is the
// namespace's inode number (what readlink /proc/<pid>/ns/net shows as
// net:[NetNS]; see NetNSOf); 0 matches the port in every namespace. Pods on
// one node listen on the same port in their own namespaces, so an engine's
// port is only its own together with its namespace.
type Socket struct {
	NetNS uint32
	Port  uint16
}

// Event is one observed transition.
type Event struct {
	Kind EventKind
	PID  int32
	Port uint16
	// NetNS is the namespace of a port event: the socket's own (eBPF) or
	// the watch's (Proc; 0 for a watch of every namespace).
	NetNS uint32
	// AtNs is when it happened (Unix ns).
	AtNs int64
}

// Watcher watches PIDs and ports.
type Watcher interface {
	WatchPID(pid int32) error
	UnwatchPID(pid int32) error
	WatchPort(s Socket) error
	UnwatchPort(s Socket) error
	// Events delivers transitions; closed by Close.
	Events() <-chan Event
	// Source is "ebpf" or "proc".
	Source() string
	// Dropped counts events lost because the consumer lagged.
	Dropped() uint64
	Close() error
}

// ErrUnsupported: the BPF watcher cannot run here (not root, no BTF, the
// kernel refused the program); wrapped with the cause.
var ErrUnsupported = errors.New("liveness: eBPF watcher unsupported here")

// New returns the BPF watcher when it loads, else a Proc watcher polling
// every pollNs, started on ctx. reason says why BPF was not used ("" when
// it was).
func New(ctx context.Context, pollNs int64, logger *slog.Logger) (w Watcher, reason string) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b, err := NewBPF(logger)
	if err == nil {
		return b, ""
	}
	logger.Warn("eBPF liveness unavailable; polling /proc instead", "err", err)
	p := NewProc("/proc", 256)
	go p.Run(ctx, pollNs)
	return p, err.Error()
}
