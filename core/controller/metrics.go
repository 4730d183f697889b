package controller

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

type collector struct {
	c                                  *Controller
	decisions, moves, blocked, engines *prometheus.Desc
	pressure, memoryHolds              *prometheus.Desc
}

// Collector returns a Prometheus collector read at scrape time:
// narwhal_controller_decisions_total{basis},
// narwhal_controller_moves_total, narwhal_controller_blocked_total{gate},
// narwhal_controller_move_memory_holds_total, narwhal_engines{role,state} (state "down" for engines not live) and
// narwhal_controller_pressure{phase} (current split, last step).
func (c *Controller) Collector() prometheus.Collector {
	return &collector{c: c,
		decisions: prometheus.NewDesc("narwhal_controller_decisions_total", "Controller decisions by decision basis.", []string{"basis"}, nil),
		moves:     prometheus.NewDesc("narwhal_controller_moves_total", "Engine role moves started by the controller.", nil, nil),
		blocked:   prometheus.NewDesc("narwhal_controller_blocked_total", "Decisions whose proposed move a gate blocked, by gate.", []string{"gate"}, nil),
		engines:   prometheus.NewDesc("narwhal_engines", "Engines by role and state.", []string{"role", "state"}, nil),
		pressure:  prometheus.NewDesc("narwhal_controller_pressure", "Predicted pressure (latency / SLO) of the current split at the last step.", []string{"phase"}, nil),
		memoryHolds: prometheus.NewDesc("narwhal_controller_move_memory_holds_total",
			"Decisions held because the same move starved its source under the same demand (move memory).", nil, nil),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.decisions
	ch <- m.moves
	ch <- m.blocked
	ch <- m.engines
	ch <- m.pressure
	ch <- m.memoryHolds
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	for i, b := range Bases {
		ch <- prometheus.MustNewConstMetric(m.decisions, prometheus.CounterValue, float64(c.decisions[i].Load()), b)
	}
	ch <- prometheus.MustNewConstMetric(m.moves, prometheus.CounterValue, float64(c.moves.Load()))
	ch <- prometheus.MustNewConstMetric(m.memoryHolds, prometheus.CounterValue, float64(c.memoryHolds.Load()))
	for i, g := range Gates {
		ch <- prometheus.MustNewConstMetric(m.blocked, prometheus.CounterValue, float64(c.blocked[i].Load()), g)
	}
	var counts [3][4]int // role × (serving, draining, switching, down)
	c.mu.Lock()
	for i := range c.engines {
		e := &c.engines[i]
		st := int(e.State)
		if !e.Live {
			st = 3
		}
		counts[e.Role][st]++
	}
	c.mu.Unlock()
	states := [4]string{"serving", "draining", "switching", "down"}
	for r := RolePrefill; r <= RoleDecode; r++ {
		for s, name := range states {
			ch <- prometheus.MustNewConstMetric(m.engines, prometheus.GaugeValue, float64(counts[r][s]), r.String(), name)
		}
	}
	for _, p := range []struct {
		phase string
		v     float64
	}{{"prefill", math.Float64frombits(c.lastPref.Load())}, {"decode", math.Float64frombits(c.lastDec.Load())}} {
		ch <- prometheus.MustNewConstMetric(m.pressure, prometheus.GaugeValue, p.v, p.phase) // +Inf when saturated
	}
}
