package service

import (
	"context"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/testwait"
)

// serving runs s.Serve until the test ends; the cleanup fails the test if
// Serve returns an error.
func serving(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// eventually waits up to 10 s for cond (internal/testwait).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}
