//go:build !linux

package liveness

import "log/slog"

// BPF is unavailable off Linux.
type BPF struct{ Watcher }

// NewBPF always fails off Linux.
func NewBPF(logger *slog.Logger) (*BPF, error) { return nil, ErrUnsupported }
