package service

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/controller"
)

// The operator's series beside the core's: what is running
// (narwhal_build_info), each engine's role and state, the SLO targets the
// controller holds the fleet to, and the agents' reporting. Read at
// scrape time; cardinality is bounded by the engines and nodes known.

var (
	descBuildInfo = prometheus.NewDesc("narwhal_build_info",
		"Always 1; the labels say which build runs (module version, VCS revision, Go version).",
		[]string{"version", "revision", "goversion"}, nil)
	descEngineRole = prometheus.NewDesc("narwhal_engine_role",
		"1 for the role each engine holds (while it moves: the role it leaves), else 0; by engine, node and role.",
		[]string{"engine", "node", "role"}, nil)
	descEngineState = prometheus.NewDesc("narwhal_engine_state",
		"1 for each engine's state (serving, draining, switching; down when not live), else 0.",
		[]string{"engine", "state"}, nil)
	descTTFTTarget = prometheus.NewDesc("narwhal_slo_ttft_seconds",
		"The TTFT SLO the controller holds requests to (core.ttft_slo_s).", nil, nil)
	descTPOTTarget = prometheus.NewDesc("narwhal_slo_tpot_seconds",
		"The TPOT SLO the controller holds requests to (core.tpot_slo_s).", nil, nil)
	descFleetNodes = prometheus.NewDesc("narwhal_fleet_nodes",
		"Nodes whose agent has reported, by state: reporting, or silent (no report within agents.stale_after_s; its engines are marked down).",
		[]string{"state"}, nil)
	descAgentsRequired = prometheus.NewDesc("narwhal_agents_required",
		"1 when agents.required is set (readiness needs fresh agent data), else 0.", nil, nil)
)

type opsCollector struct {
	s                            *Server
	version, revision, goversion string
}

func newOpsCollector(s *Server) *opsCollector {
	c := &opsCollector{s: s, version: "unknown", revision: "unknown", goversion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		c.version, c.goversion = bi.Main.Version, bi.GoVersion
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" {
				c.revision = kv.Value
			}
		}
	}
	return c
}

func (c *opsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuildInfo, descEngineRole, descEngineState,
		descTTFTTarget, descTPOTTarget, descFleetNodes, descAgentsRequired} {
		ch <- d
	}
}

var engineStates = [...]string{"serving", "draining", "switching", "down"}

func (c *opsCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descBuildInfo, 1, c.version, c.revision, c.goversion)
	for _, e := range c.s.core.Engines() {
		for _, r := range []controller.Role{controller.RolePrefill, controller.RoleDecode} {
			gauge(descEngineRole, b2f(e.Role == r), e.ID, e.Node, r.String())
		}
		st := e.State.String()
		if !e.Live {
			st = "down"
		}
		for _, name := range engineStates {
			gauge(descEngineState, b2f(name == st), e.ID, name)
		}
	}
	cfg := c.s.cfg
	// The SLOs of the core itself: a core built apart from cfg.Core (the
	// demo's, built by the simulator with TTFT 1.5 s) holds requests to
	// its own, and /metrics showed the service's default 0.25 s.
	slo := cfg.Core
	if cc, ok := c.s.core.(interface{ Config() coreConfig }); ok {
		slo = cc.Config()
	}
	gauge(descTTFTTarget, slo.TTFTSLOS)
	gauge(descTPOTTarget, slo.TPOTSLOS)
	var reporting, silent int
	for _, n := range c.s.registry.Nodes() {
		if n.Stale {
			silent++
		} else {
			reporting++
		}
	}
	gauge(descFleetNodes, float64(reporting), "reporting")
	gauge(descFleetNodes, float64(silent), "silent")
	gauge(descAgentsRequired, b2f(cfg.Agents.Required))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collectors returns every collector the server registered on /metrics
// (for tools: the metrics reference is generated from their descriptors).
func (s *Server) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector(nil), s.collectors...)
}
