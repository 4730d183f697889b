package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
}

// Manager owns a Client and its degraded mode.
type Manager struct {
	c   *Client
	log *slog.Logger

	mu      sync.Mutex
	st      Status
	backoff int64
}

// NewManager returns a manager over lib (Library() for the real one).
func NewManager(lib Interface, timeout time.Duration, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{c: NewClient(lib, timeout, logger), log: logger, st: Status{Reason: "not initialized yet"}}
}

// Status returns the current health.
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
		m.st = Status{Available: true, Attempts: m.st.Attempts}
		m.backoff = 0
	}
	ds, err := m.c.Devices(ctx)
	if err != nil {
		// a hung or failing library: go degraded and re-init later
		m.degrade(nowNs, err)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m.st.LastReadNs = nowNs
	return ds, nil
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
