package liveness

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	pids   map[int32]bool  // pid -> alive at the last poll
	ports  map[Socket]bool // watched socket -> listening at the last poll
	closed bool
	once   sync.Once
}

// NewProc returns a watcher reading the proc filesystem at root, with an
// event buffer of size buf.
func NewProc(root string, buf int) *Proc {
	return &Proc{root: root, events: make(chan Event, max(buf, 1)), pids: map[int32]bool{}, ports: map[Socket]bool{}}
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

// WatchPort starts watching s. Proc reads the listening tables of its own
// namespace and of the watched live PIDs' namespaces, so a port in another
// namespace is seen once a PID living there is watched too (the agent
// watches the engine's PID, whose namespace the socket names).
func (p *Proc) WatchPort(s Socket) error {
	if s.Port == 0 {
		return errors.New("liveness: port 0: must be > 0")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ports[s] = listeningOn(p.listening(), s)
	return nil
}

// UnwatchPort stops watching s.
func (p *Proc) UnwatchPort(s Socket) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ports, s)
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
	for _, pid := range sortedKeys(p.pids, cmp.Compare[int32]) {
		was := p.pids[pid]
		now := p.alive(pid)
		if was && !now {
			p.emit(Event{Kind: Exited, PID: pid, AtNs: nowNs})
		}
		p.pids[pid] = now
	}
	if len(p.ports) > 0 {
		l := p.listening()
		for _, s := range sortedKeys(p.ports, func(a, b Socket) int {
			return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.NetNS, b.NetNS))
		}) {
			was, now := p.ports[s], listeningOn(l, s)
			switch {
			case was && !now:
				p.emit(Event{Kind: PortClosed, Port: s.Port, NetNS: s.NetNS, AtNs: nowNs})
			case !was && now:
				p.emit(Event{Kind: PortOpened, Port: s.Port, NetNS: s.NetNS, AtNs: nowNs})
			}
			p.ports[s] = now
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

// listening returns the sockets in TCP LISTEN state, read from the network
// namespaces of the agent itself and of the watched live PIDs; each table
// is read once per namespace. A namespace whose inode cannot be read is
// recorded as 0 (only a watch of every namespace matches it).
func (p *Proc) listening() map[Socket]bool {
	out := map[Socket]bool{}
	dirs := []string{"self"}
	for pid, alive := range p.pids {
		if alive {
			dirs = append(dirs, strconv.Itoa(int(pid)))
		}
	}
	seen := map[uint32]bool{}
	for _, d := range dirs {
		ns, err := NetNSOf(filepath.Join(p.root, d, "ns", "net"))
		if err != nil {
			ns = 0
		} else if seen[ns] {
			continue
		} else {
			seen[ns] = true
		}
		for _, f := range [...]string{"tcp", "tcp6"} {
			readListen(filepath.Join(p.root, d, "net", f), ns, out)
		}
	}
	return out
}

// listeningOn: s is listening in l (in any namespace when s.NetNS is 0).
func listeningOn(l map[Socket]bool, s Socket) bool {
	if s.NetNS != 0 {
		return l[s]
	}
	for k := range l {
		if k.Port == s.Port {
			return true
		}
	}
	return false
}

// readListen parses a /proc/net/tcp{,6} table: "sl local_address
// rem_address st ..." with local_address "HEXADDR:HEXPORT" and st 0A =
// LISTEN.
func readListen(path string, ns uint32, out map[Socket]bool) {
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
			out[Socket{NetNS: ns, Port: uint16(port)}] = true
		}
	}
}

// sortedKeys returns m's keys in the order of compare (polls emit events
// in a fixed order).
func sortedKeys[K comparable](m map[K]bool, compare func(a, b K) int) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, compare)
	return ks
}
