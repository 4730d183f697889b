package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Namespace, c.Identity = "narwhal", "core-0"
	return c
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("default config with names: %v", err)
	}
	f := func(mut func(*Config)) {
		t.Helper()
		c := validConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("config %+v: got %v; want ErrInvalidConfig", c, err)
		}
		if _, err := New(fake.NewSimpleClientset(), c, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("New with config %+v: got %v; want ErrInvalidConfig", c, err)
		}
	}
	f(func(c *Config) { c.Namespace = "" })
	f(func(c *Config) { c.LeaseName = "" })
	f(func(c *Config) { c.Identity = "" })
	f(func(c *Config) { c.RetryPeriod = 0 })
	f(func(c *Config) { c.RenewDeadline = c.RetryPeriod })         // not > 1.2 × retry
	f(func(c *Config) { c.LeaseDuration = c.RenewDeadline })       // not > renew deadline
	f(func(c *Config) { c.LeaseDuration, c.RenewDeadline = 1, 2 }) // inverted
	f(func(c *Config) { c.RetryPeriod = -time.Second })            // negative
	if _, err := New(nil, validConfig(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil client): got %v", err)
	}
}

func TestRunRefusesNilCallbacksAndSecondRun(t *testing.T) {
	cfg := validConfig()
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = time.Second, 500*time.Millisecond, 100*time.Millisecond
	e, err := New(fake.NewSimpleClientset(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.IsLeader() || e.Leader() != "" {
		t.Fatalf("before Run: IsLeader=%v Leader=%q", e.IsLeader(), e.Leader())
	}
	if err := e.Run(context.Background(), nil, func() {}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil onStartedLeading: got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(context.Context) { close(started) }, func() { close(stopped) })
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("sole candidate did not lead")
	}
	if !e.IsLeader() || e.Leader() != "core-0" {
		t.Fatalf("leading: IsLeader=%v Leader=%q", e.IsLeader(), e.Leader())
	}
	if err := e.Run(ctx, func(context.Context) {}, func() {}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: got %v; want ErrRunning", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	<-stopped
	if e.IsLeader() {
		t.Fatal("IsLeader true after Run returned")
	}
}
