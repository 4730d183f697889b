package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Retry backoff of the degraded mode.
const (
	minRetryNs = int64(time.Second)
	maxRetryNs = int64(time.Minute)
)

// Status is the Manager's health.
type Status struct {
	Available bool `json:"available"`
	// Reason is why NVML is unavailable ("" when available).
	Reason      string `json:"reason,omitempty"`
	Attempts    int    `json:"attempts"`
	NextRetryNs int64  `json:"next_retry_ns,omitempty"`
	// LastReadNs is when devices were last read successfully.
	LastReadNs int64 `json:"last_read_ns,omitempty"`
	// Devices is how many GPUs and MIG instances that read listed, and
	// Problems those with a fault (Device.Problem), as of LastReadNs.
	Devices  int             `json:"devices"`
	Problems []DeviceProblem `json:"problems,omitempty"`
}

// DeviceProblem is one device's fault at the last read.
type DeviceProblem struct {
	Index int `json:"index"`
	// MIGIndex is set for a MIG instance of GPU Index.
	MIGIndex    *int     `json:"mig_index,omitempty"`
	UUID        string   `json:"uuid,omitempty"`
	MemoryKnown bool     `json:"memory_known"`
	Notes       []string `json:"notes"`
}

// Manager owns a Client and its degraded mode.
type Manager struct {
	c   *Client
	log *slog.Logger

	mu      sync.Mutex
	st      Status
	backoff int64
	// logged is each faulty device's notes as last logged, less their
	// figures, by position (GPU index, MIG index): a fault is logged when
	// it appears or changes (not when only its figures do, as implausible
	// memory's may at every read), and its end once. Rebuilt per read: at
	// most one entry per device listed.
	logged map[string]string
}

// NewManager returns a manager over lib (Library() for the real one).
func NewManager(lib Interface, timeout time.Duration, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{c: NewClient(lib, timeout, logger), log: logger, st: Status{Reason: "not initialized yet"}}
}

// Status returns the current health. Its Problems are shared with later
// calls: read them, do not modify them.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// Devices reads the devices at nowNs, first (re)trying Init when NVML is
// unavailable and the retry is due. While degraded it returns an error
// wrapping ErrUnavailable and the cause (e.g. ErrLibraryNotFound).
func (m *Manager) Devices(ctx context.Context, nowNs int64) ([]Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.st.Available {
		// Not due before NextRetryNs, unless the clock stepped back
		// behind the failure (NextRetryNs − backoff): then waiting for
		// NextRetryNs could keep NVML degraded for the length of the step.
		if nowNs < m.st.NextRetryNs && nowNs >= m.st.NextRetryNs-m.backoff {
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, m.st.Reason)
		}
		m.st.Attempts++
		if err := m.c.Init(ctx); err != nil {
			m.degrade(nowNs, err)
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		m.log.Info("NVML initialized", "attempts", m.st.Attempts)
		// the last read's time and problems stand until this one
		m.st.Available, m.st.Reason, m.st.NextRetryNs = true, "", 0
		m.backoff = 0
	}
	ds, err := m.c.Devices(ctx)
	if err != nil {
		// a hung or failing library: go degraded and re-init later
		m.degrade(nowNs, err)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m.st.LastReadNs = nowNs
	m.noteProblems(ds)
	return ds, nil
}

// noteProblems records the faulty devices of a read in the status and
// logs each change: a device's fault appearing or changing (warn), or
// ending (info).
func (m *Manager) noteProblems(ds []Device) {
	var ps []DeviceProblem
	now := make(map[string]string)
	for i := range ds {
		d := &ds[i]
		if !d.Problem {
			continue
		}
		p := DeviceProblem{Index: d.Index, UUID: d.UUID, MemoryKnown: d.Memory.Known, Notes: append([]string(nil), d.Notes...)}
		key := "gpu " + strconv.Itoa(d.Index)
		if d.Parent != "" {
			mi := d.MIGIndex
			p.MIGIndex = &mi
			key += " mig " + strconv.Itoa(d.MIGIndex)
		}
		ps = append(ps, p)
		notes := strings.Join(d.Notes, "; ")
		now[key] = withoutDigits(notes)
		if m.logged[key] != now[key] {
			m.log.Warn("NVML device problem", "device", key, "uuid", d.UUID, "memory_known", d.Memory.Known, "notes", notes)
		}
	}
	for key := range m.logged {
		if _, ok := now[key]; !ok {
			m.log.Info("NVML device problem cleared", "device", key)
		}
	}
	m.logged = now
	m.st.Devices, m.st.Problems = len(ds), ps
}

func withoutDigits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, s)
}

func (m *Manager) degrade(nowNs int64, err error) {
	if m.backoff == 0 {
		m.backoff = minRetryNs
	} else {
		m.backoff = min(2*m.backoff, maxRetryNs)
	}
	if m.st.Available || m.st.Reason != err.Error() {
		m.log.Warn("NVML unavailable: running degraded (no GPU memory cross-check)", "err", err,
			"retry_in", time.Duration(m.backoff))
	}
	m.st.Available = false
	m.st.Reason = err.Error()
	m.st.NextRetryNs = nowNs + m.backoff
	if !errors.Is(err, ErrTimeout) {
		_ = m.c.Shutdown(context.Background())
	}
	m.c.inited.Store(false)
}

// Close shuts NVML down.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c.Shutdown(ctx)
}
