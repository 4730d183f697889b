package core

import "github.com/prometheus/client_golang/prometheus"

var (
	descAheadRefused = prometheus.NewDesc("narwhal_core_evidence_ahead_refused_total",
		"Records refused because their timestamp lay more than future_tolerance_s after the core's clock.", nil, nil)
	descPendingExpired = prometheus.NewDesc("narwhal_core_pending_offers_expired_total",
		"Pending offers ended by pending_timeout_s and counted as unsized observations.", nil, nil)
	descClockBehind = prometheus.NewDesc("narwhal_core_clock_behind_history_seconds",
		"How far the newest recorded demand bucket lies after the latest step (0 normally); past the demand window every record is refused until the clock catches up.", nil, nil)
	descClockStuck = prometheus.NewDesc("narwhal_core_clock_stuck",
		"1 while the clock is behind the recorded demand history by more than the demand window (Stuck: every record refused, /healthz failing), else 0.", nil, nil)
)

// coreCollector exports the core's own counters at scrape time.
type coreCollector struct{ c *Core }

func (cc *coreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAheadRefused
	ch <- descPendingExpired
	ch <- descClockBehind
	ch <- descClockStuck
}

func (cc *coreCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descAheadRefused, prometheus.CounterValue, float64(cc.c.aheadRefused.Load()))
	ch <- prometheus.MustNewConstMetric(descPendingExpired, prometheus.CounterValue, float64(cc.c.pendingExpired.Load()))
	behind := cc.c.behindNs.Load()
	ch <- prometheus.MustNewConstMetric(descClockBehind, prometheus.GaugeValue, float64(behind)/1e9)
	stuck := 0.0
	if cc.c.stuck(behind) {
		stuck = 1
	}
	ch <- prometheus.MustNewConstMetric(descClockStuck, prometheus.GaugeValue, stuck)
}

// AheadRefused counts records refused with ErrAheadOfClock.
func (c *Core) AheadRefused() uint64 { return c.aheadRefused.Load() }

// ClockBehindNs is how far the newest recorded arrivals bucket lay after
// the latest step's time (0 when it did not): see the package
// documentation, Time.
func (c *Core) ClockBehindNs() int64 { return c.behindNs.Load() }

// Stuck reports whether the clock is behind the recorded demand history
// by more than the demand window: every record is then refused as older
// than the history's retention until the clock catches up (a clock that
// stepped back), and only a fresh core (a restart) records again.
func (c *Core) Stuck() bool { return c.stuck(c.behindNs.Load()) }

func (c *Core) stuck(behindNs int64) bool { return behindNs > c.windowNs }

// PendingExpired counts pending offers ended by pending_timeout_s.
func (c *Core) PendingExpired() uint64 { return c.pendingExpired.Load() }
