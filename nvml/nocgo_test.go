//go:build !cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Built without cgo (the go command's default on a machine with no C
// compiler), the Manager runs in its degraded mode and says why: the
// agent still starts, reports engines from their metrics, and its health
// names the missing cgo instead of a missing driver.
func TestWithoutCgoTheManagerDegradesAndSaysWhy(t *testing.T) {
	m := NewManager(Library(), time.Second, nil)
	_, err := m.Devices(context.Background(), 0)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBuiltWithoutCgo) {
		t.Fatalf("unexpected error; got %v; want ErrUnavailable wrapping ErrBuiltWithoutCgo", err)
	}
	st := m.Status()
	if st.Available || !strings.Contains(st.Reason, "CGO_ENABLED=0") || st.Attempts != 1 || st.NextRetryNs != 1e9 {
		t.Fatalf("unexpected status; got %+v; want unavailable, reason naming CGO_ENABLED=0, one attempt, retry at 1 s", st)
	}
	if _, err := m.Devices(context.Background(), 5e8); !errors.Is(err, ErrUnavailable) || m.Status().Attempts != 1 {
		t.Fatalf("retried before the backoff; got %v, %+v", err, m.Status())
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
