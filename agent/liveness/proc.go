package liveness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Proc is the /proc polling watcher. Poll makes one pass at a given time
// (tests drive it directly); Run polls on the wall clock.
type Proc struct {
	root    string
	events  chan Event
	dropped atomic.Uint64

	mu     sync.Mutex
	pids   map[int32]bool // pid -> alive at the last poll
	ports  map[uint16]bool
	closed bool
	once   sync.Once
}

// NewProc returns a watcher reading the proc filesystem at root, with an
// event buffer of size buf.
func NewProc(root string, buf int) *Proc {
	return &Proc{root: root, events: make(chan Event, max(buf, 1)), pids: map[int32]bool{}, ports: map[uint16]bool{}}
}

// WatchPID starts watching pid; it is taken as alive if it is now.
func (p *Proc) WatchPID(pid int32) error {
	if pid <= 0 {
		return fmt.Errorf("liveness: pid %d: must be > 0", pid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pids[pid] = p.alive(pid)
	return nil
}

// UnwatchPID stops watching pid.
func (p *Proc) UnwatchPID(pid int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pids, pid)
	return nil
}

// WatchPort starts watching port.
func (p *Proc) WatchPort(port uint16) error {
	if port == 0 {
		return errors.New("liveness: port 0: must be > 0")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ports[port] = p.listening()[port]
	return nil
}

// UnwatchPort stops watching port.
func (p *Proc) UnwatchPort(port uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ports, port)
	return nil
}

// Events delivers transitions.
func (p *Proc) Events() <-chan Event { return p.events }

// Source returns "proc".
func (p *Proc) Source() string { return "proc" }

// Dropped counts events lost to a lagging consumer.
func (p *Proc) Dropped() uint64 { return p.dropped.Load() }

// Close stops delivery and closes Events.
func (p *Proc) Close() error {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.events)
		p.mu.Unlock()
	})
	return nil
}

// Run polls every pollNs (<= 0: 100 ms) until ctx ends or Close.
func (p *Proc) Run(ctx context.Context, pollNs int64) {
	if pollNs <= 0 {
		pollNs = int64(100 * time.Millisecond)
	}
	t := time.NewTicker(time.Duration(pollNs))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !p.Poll(now.UnixNano()) {
				return
			}
		}
	}
}

// Poll checks every watched PID and port once, emitting transitions
// stamped nowNs. It returns false once the watcher is closed.
func (p *Proc) Poll(nowNs int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, pid := range sortedKeys(p.pids) {
		was := p.pids[pid]
		now := p.alive(pid)
		if was && !now {
			p.emit(Event{Kind: Exited, PID: pid, AtNs: nowNs})
		}
		p.pids[pid] = now
	}
	if len(p.ports) > 0 {
		l := p.listening()
		for _, port := range sortedKeys(p.ports) {
			was, now := p.ports[port], l[port]
			switch {
			case was && !now:
				p.emit(Event{Kind: PortClosed, Port: port, AtNs: nowNs})
			case !was && now:
				p.emit(Event{Kind: PortOpened, Port: port, AtNs: nowNs})
			}
			p.ports[port] = now
		}
	}
	return true
}

func (p *Proc) emit(ev Event) {
	select {
	case p.events <- ev:
	default:
		p.dropped.Add(1)
	}
}

// alive: /proc/<pid>/stat exists and the state is not zombie or dead.
func (p *Proc) alive(pid int32) bool {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(int(pid)), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": comm may hold spaces and parens; the state
	// follows the last ')'
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// listening returns the local ports in TCP LISTEN state, read from the
// network namespaces of the watched live PIDs and of the agent itself.
func (p *Proc) listening() map[uint16]bool {
	out := map[uint16]bool{}
	dirs := []string{filepath.Join(p.root, "net")}
	for pid, alive := range p.pids {
		if alive {
			dirs = append(dirs, filepath.Join(p.root, strconv.Itoa(int(pid)), "net"))
		}
	}
	for _, d := range dirs {
		for _, f := range [...]string{"tcp", "tcp6"} {
			readListen(filepath.Join(d, f), out)
		}
	}
	return out
}

// readListen parses a /proc/net/tcp{,6} table: "sl local_address
// rem_address st ..." with local_address "HEXADDR:HEXPORT" and st 0A =
// LISTEN.
func readListen(path string, out map[uint16]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	first := true
	for s.Scan() {
		if first {
			first = false
			continue
		}
		fs := bytes.Fields(s.Bytes())
		if len(fs) < 4 || !bytes.Equal(fs[3], []byte("0A")) {
			continue
		}
		i := bytes.LastIndexByte(fs[1], ':')
		if i < 0 {
			continue
		}
		port, err := strconv.ParseUint(string(fs[1][i+1:]), 16, 16)
		if err == nil {
			out[uint16(port)] = true
		}
	}
}

func sortedKeys[K int32 | uint16](m map[K]bool) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
