//go:build !cgo

package nvml

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Interface stands for go-nvml's library interface in a build without
// cgo, where go-nvml cannot be compiled: nothing outside this package
// implements it, and Library returns nil.
type Interface interface{ withoutCgo() }

// Library returns nil: a build without cgo has no NVML library to load.
func Library() Interface { return nil }

// Client, built without cgo, fails Init with ErrBuiltWithoutCgo, so a
// Manager over it stays in its degraded mode.
type Client struct {
	inited atomic.Bool
}

// NewClient returns a client that cannot reach NVML (built without cgo).
func NewClient(Interface, time.Duration, *slog.Logger) *Client { return &Client{} }

// Init always fails: this binary was built without cgo.
func (c *Client) Init(context.Context) error {
	return ErrBuiltWithoutCgo
}

// Shutdown does nothing.
func (c *Client) Shutdown(context.Context) error { return nil }

// Devices fails: NVML was never initialised.
func (c *Client) Devices(context.Context) ([]Device, error) { return nil, ErrNotInitialized }
