//go:build linux

package liveness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Event kinds written by bpf/liveness.c.
const (
	bpfExit        = 1
	bpfListenClose = 2
	bpfListenOpen  = 3
)

// BPF is the eBPF watcher.
type BPF struct {
	log     *slog.Logger
	objs    livenessObjects
	links   []link.Link
	rd      *ringbuf.Reader
	events  chan Event
	dropped atomic.Uint64
	monoOff int64 // Unix ns − CLOCK_MONOTONIC ns
	done    chan struct{}
	once    sync.Once
}

// NewBPF loads and attaches the programs. Any failure returns an error
// wrapping ErrUnsupported and leaves nothing attached.
func NewBPF(logger *slog.Logger) (*BPF, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: memlock: %w", ErrUnsupported, err)
	}
	b := &BPF{log: logger, events: make(chan Event, 256), done: make(chan struct{})}
	if err := loadLivenessObjects(&b.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: verifier refused the program: %v", ErrUnsupported, ve)
		}
		return nil, fmt.Errorf("%w: load: %w", ErrUnsupported, err)
	}
	fail := func(what string, err error) (*BPF, error) {
		b.closeAll()
		return nil, fmt.Errorf("%w: %s: %w", ErrUnsupported, what, err)
	}
	// resolve PIDs in our own PID namespace
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err == nil {
		ns := livenessPidns{Dev: uint64(st.Dev), Ino: st.Ino}
		if err := b.objs.Cfg.Put(uint32(0), ns); err != nil {
			return fail("pid namespace config", err)
		}
	}
	for _, a := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_exit", b.objs.OnExit}, {"inet_sock_set_state", b.objs.OnSockState}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.name, Program: a.prog})
		if err != nil {
			return fail("attach raw tracepoint "+a.name, err)
		}
		b.links = append(b.links, l)
	}
	rd, err := ringbuf.NewReader(b.objs.Events)
	if err != nil {
		return fail("ring buffer", err)
	}
	b.rd = rd
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fail("clock", err)
	}
	b.monoOff = time.Now().UnixNano() - ts.Nano()
	go b.read()
	return b, nil
}

func (b *BPF) read() {
	defer close(b.events)
	var rec ringbuf.Record
	for {
		if err := b.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return
			}
			b.log.Warn("ring buffer read failed", "err", err)
			continue
		}
		var raw livenessEvent
		if len(rec.RawSample) < binary.Size(raw) {
			continue
		}
		raw.TsNs = binary.NativeEndian.Uint64(rec.RawSample[0:])
		raw.Kind = binary.NativeEndian.Uint32(rec.RawSample[8:])
		raw.Pid = binary.NativeEndian.Uint32(rec.RawSample[12:])
		raw.Port = binary.NativeEndian.Uint16(rec.RawSample[16:])
		raw.Netns = binary.NativeEndian.Uint32(rec.RawSample[28:])
		ev := Event{PID: int32(raw.Pid), Port: raw.Port, NetNS: raw.Netns, AtNs: int64(raw.TsNs) + b.monoOff}
		switch raw.Kind {
		case bpfExit:
			ev.Kind = Exited
		case bpfListenClose:
			ev.Kind = PortClosed
		case bpfListenOpen:
			ev.Kind = PortOpened
		default:
			continue
		}
		select {
		case b.events <- ev:
		default:
			b.dropped.Add(1)
		}
	}
}

// WatchPID starts reporting pid's exit.
func (b *BPF) WatchPID(pid int32) error {
	if pid <= 0 {
		return fmt.Errorf("liveness: pid %d: must be > 0", pid)
	}
	return b.objs.WatchedPids.Put(uint32(pid), uint8(1))
}

// UnwatchPID stops reporting pid.
func (b *BPF) UnwatchPID(pid int32) error {
	err := b.objs.WatchedPids.Delete(uint32(pid))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// WatchPort starts reporting the listener transitions of s (of its port
// in every namespace when s.NetNS is 0).
func (b *BPF) WatchPort(s Socket) error {
	if s.Port == 0 {
		return errors.New("liveness: port 0: must be > 0")
	}
	return b.objs.WatchedPorts.Put(livenessPortKey{Netns: s.NetNS, Port: s.Port}, uint8(1))
}

// UnwatchPort stops reporting s.
func (b *BPF) UnwatchPort(s Socket) error {
	err := b.objs.WatchedPorts.Delete(livenessPortKey{Netns: s.NetNS, Port: s.Port})
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Events delivers transitions.
func (b *BPF) Events() <-chan Event { return b.events }

// Source returns "ebpf".
func (b *BPF) Source() string { return "ebpf" }

// Dropped counts events lost to a lagging consumer.
func (b *BPF) Dropped() uint64 { return b.dropped.Load() }

// Close detaches the programs and closes Events.
func (b *BPF) Close() error {
	b.once.Do(b.closeAll)
	return nil
}

func (b *BPF) closeAll() {
	if b.rd != nil {
		_ = b.rd.Close()
	}
	for _, l := range b.links {
		_ = l.Close()
	}
	_ = b.objs.Close()
}
