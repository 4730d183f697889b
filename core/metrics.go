package core

import "github.com/prometheus/client_golang/prometheus"

var (
	descAheadRefused = prometheus.NewDesc("narwhal_core_evidence_ahead_refused_total",
		"Records refused because their timestamp lay more than future_tolerance_s after the core's clock.", nil, nil)
	descPendingExpired = prometheus.NewDesc("narwhal_core_pending_offers_expired_total",
		"Pending offers ended by pending_timeout_s and counted as unsized observations.", nil, nil)
)

// coreCollector exports the core's own counters at scrape time.
type coreCollector struct{ c *Core }

func (cc *coreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAheadRefused
	ch <- descPendingExpired
}

func (cc *coreCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descAheadRefused, prometheus.CounterValue, float64(cc.c.aheadRefused.Load()))
	ch <- prometheus.MustNewConstMetric(descPendingExpired, prometheus.CounterValue, float64(cc.c.pendingExpired.Load()))
}

// AheadRefused counts records refused with ErrAheadOfClock.
func (c *Core) AheadRefused() uint64 { return c.aheadRefused.Load() }

// PendingExpired counts pending offers ended by pending_timeout_s.
func (c *Core) PendingExpired() uint64 { return c.pendingExpired.Load() }
