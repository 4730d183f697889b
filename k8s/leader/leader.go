package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrInvalidConfig is returned (wrapped) by New for a config it refuses.
var ErrInvalidConfig = errors.New("leader: invalid config")

// ErrRunning is returned by Run when the elector is already running.
var ErrRunning = errors.New("leader: elector already running")

// Config names the Lease and sets the election timing.
type Config struct {
	// Namespace and LeaseName locate the coordination.k8s.io/v1 Lease.
	Namespace string `json:"namespace" yaml:"namespace"`
	LeaseName string `json:"lease_name" yaml:"lease_name"`
	// Identity is this candidate's unique name, normally the pod name.
	Identity string `json:"identity" yaml:"identity"`
	// LeaseDuration is how long a follower waits, from the last renewal it
	// observed, before it takes the lease over.
	LeaseDuration time.Duration `json:"lease_duration" yaml:"lease_duration"`
	// RenewDeadline is how long the leader keeps retrying a renewal before
	// it gives the term up; it must be shorter than LeaseDuration.
	RenewDeadline time.Duration `json:"renew_deadline" yaml:"renew_deadline"`
	// RetryPeriod is the time between attempts; RenewDeadline must exceed
	// 1.2 × RetryPeriod.
	RetryPeriod time.Duration `json:"retry_period" yaml:"retry_period"`
	// ReleaseOnCancel releases the lease when Run's context ends.
	ReleaseOnCancel bool `json:"release_on_cancel" yaml:"release_on_cancel"`
}

// DefaultConfig returns the Kubernetes controllers' usual timing for a
// Lease named "narwhal-core-leader".
func DefaultConfig() Config {
	return Config{
		LeaseName:     "narwhal-core-leader",
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
	}
}

// Validate reports the first field that breaks a rule.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "":
		return fmt.Errorf("%w: namespace is empty", ErrInvalidConfig)
	case c.LeaseName == "":
		return fmt.Errorf("%w: lease_name is empty", ErrInvalidConfig)
	case c.Identity == "":
		return fmt.Errorf("%w: identity is empty", ErrInvalidConfig)
	case c.RetryPeriod <= 0:
		return fmt.Errorf("%w: retry_period %v must be > 0", ErrInvalidConfig, c.RetryPeriod)
	case c.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(c.RetryPeriod)):
		return fmt.Errorf("%w: renew_deadline %v must be > %.1f × retry_period %v",
			ErrInvalidConfig, c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("%w: lease_duration %v must be > renew_deadline %v",
			ErrInvalidConfig, c.LeaseDuration, c.RenewDeadline)
	}
	return nil
}

// Elector campaigns for the Lease on behalf of one replica.
type Elector struct {
	client  kubernetes.Interface
	cfg     Config
	logger  *slog.Logger
	leading atomic.Bool
	running atomic.Bool
	leader  atomic.Pointer[string]

	termsStarted prometheus.Counter
	isLeader     prometheus.GaugeFunc
}

// New checks cfg and returns an elector that has not started campaigning.
func New(client kubernetes.Interface, cfg Config, logger *slog.Logger) (*Elector, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	e := &Elector{client: client, cfg: cfg, logger: logger.With("component", "leader", "identity", cfg.Identity)}
	empty := ""
	e.leader.Store(&empty)
	e.termsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "narwhal_leader_terms_started_total",
		Help:        "Leadership terms this replica has started.",
		ConstLabels: prometheus.Labels{"lease": cfg.LeaseName},
	})
	e.isLeader = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "narwhal_leader_is_leader",
		Help:        "1 while this replica holds the controller lease, else 0.",
		ConstLabels: prometheus.Labels{"lease": cfg.LeaseName},
	}, func() float64 {
		if e.leading.Load() {
			return 1
		}
		return 0
	})
	return e, nil
}

// IsLeader reports whether this replica is inside a leadership term now.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Leader returns the identity of the last leader this replica observed
// ("" before it observed any). It is informational (logs, /v1/state):
// client-go reports other leaders asynchronously, so it can lag; decide
// with IsLeader.
func (e *Elector) Leader() string { return *e.leader.Load() }

// Identity returns this candidate's identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Collectors returns the elector's metrics.
func (e *Elector) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.termsStarted, e.isLeader}
}

// Run campaigns until ctx ends. Each time this replica wins the lease it
// calls onStartedLeading (in a new goroutine) with a context cancelled when
// the term ends; when the term ends it waits for that call to return and
// then calls onStoppedLeading. After a lost term it campaigns again. Run
// returns nil when ctx ends, or an error if the elector cannot be built.
func (e *Elector) Run(ctx context.Context, onStartedLeading func(context.Context), onStoppedLeading func()) error {
	if onStartedLeading == nil || onStoppedLeading == nil {
		return fmt.Errorf("%w: nil leadership callback", ErrInvalidConfig)
	}
	if !e.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer e.running.Store(false)
	for ctx.Err() == nil {
		if err := e.runTerm(ctx, onStartedLeading, onStoppedLeading); err != nil {
			return err
		}
	}
	return nil
}

// runTerm runs one client-go election until it stops holding the lease or
// ctx ends.
func (e *Elector) runTerm(ctx context.Context, onStarted func(context.Context), onStopped func()) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.LeaseName},
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}
	// client-go launches OnStartedLeading with `go` just before it starts
	// renewing, so the goroutine may first run after le.Run has returned.
	// A term exists only if the goroutine got in before Run's end closed
	// the gate; then and only then onStopped is owed.
	var (
		mu      sync.Mutex
		closed  bool
		running bool
		done    = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.cfg.LeaseName,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: e.cfg.ReleaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(termCtx context.Context) {
				mu.Lock()
				if closed {
					mu.Unlock()
					return
				}
				running = true
				e.leading.Store(true)
				id := e.cfg.Identity // OnNewLeader is reported asynchronously
				e.leader.Store(&id)
				mu.Unlock()
				defer close(done)
				e.termsStarted.Inc()
				e.logger.Info("started leading")
				onStarted(termCtx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				e.leader.Store(&id)
				e.logger.Info("observed leader", "leader", id)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader: build elector: %w", err)
	}
	le.Run(ctx)
	mu.Lock()
	closed = true
	termStarted := running
	e.leading.Store(false)
	mu.Unlock()
	if termStarted {
		<-done
		e.logger.Info("stopped leading")
		onStopped()
	}
	return nil
}
