package refdocs

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/kubediscover"
	"github.com/narwhal-io/narwhal/internal/testcert"
	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/service/extproc"
	"github.com/narwhal-io/narwhal/service/kube"
)

// Metric is one registered metric family.
type Metric struct {
	Name, Type, Help string
	Labels           []string
	// Process is narwhal-core or narwhal-agent.
	Process string
}

// Catalog lists every narwhal_* metric the two processes register: a
// narwhal-core built as a Kubernetes replica with a data_dir and TLS (which
// registers everything the single-replica service does, plus the leader,
// cluster and demand merge metrics, and the journal's) and a
// narwhal-agent with one engine, a core URL and Kubernetes discovery.
// Families come from the collectors' descriptors; types from a gather
// after one request to each read endpoint, else from the collector's Go
// type, else from the name (_total: counter).
func Catalog() ([]Metric, error) {
	quiet := slog.New(slog.DiscardHandler)
	dataDir, err := os.MkdirTemp("", "narwhal-refdocs-")
	if err != nil {
		return nil, fmt.Errorf("refdocs: %w", err)
	}
	defer os.RemoveAll(dataDir)
	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.ExtProc.Listen = "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.Auth.Token = "catalog"
	cfg.Agents.Required = false
	cfg.Kubernetes.Enabled = true
	cfg.Kubernetes.Namespace, cfg.Kubernetes.PodName = "narwhal", "narwhal-core-0"
	if cfg.TLS.CertFile, cfg.TLS.KeyFile, err = writeKeyPair(dataDir); err != nil {
		return nil, err
	}
	srv, _, err := kube.NewServer(cfg, fake.NewClientset(), quiet, extproc.ServiceOption(cfg))
	if err != nil {
		return nil, fmt.Errorf("refdocs: building a core: %w", err)
	}
	defer srv.Close()
	for _, p := range []string{"/v1/state", "/v1/roles", "/metrics"} {
		srv.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	core, err := families("narwhal-core", srv.Collectors())
	if err != nil {
		return nil, err
	}
	// Families registered some other way than through the server's
	// collectors still show on /metrics once they have a sample.
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	core = addExposed(core, "narwhal-core", rec.Body.String())
	a, err := agent.New(agent.Config{Node: "n", CoreURL: "http://127.0.0.1:1", Engines: []agent.EngineConfig{{
		ID: "e", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics"}}})
	if err != nil {
		return nil, fmt.Errorf("refdocs: building an agent: %w", err)
	}
	// The agent's discovery metrics (the DaemonSet's kubernetes.enabled).
	d, err := kubediscover.New(fake.NewClientset(), kubediscover.Config{Enabled: true}, "n", func([]agent.EngineConfig) {})
	if err != nil {
		return nil, fmt.Errorf("refdocs: building a discoverer: %w", err)
	}
	ag, err := families("narwhal-agent", append(a.Collectors(), d.Collectors()...))
	if err != nil {
		return nil, err
	}
	all := append(core, ag...)
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

func families(process string, cs []prometheus.Collector) ([]Metric, error) {
	reg := prometheus.NewRegistry()
	byName := map[string]*Metric{}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("refdocs: %s: %w", process, err)
		}
		goType := ""
		switch c.(type) {
		case *prometheus.CounterVec:
			goType = "counter"
		case *prometheus.GaugeVec:
			goType = "gauge"
		case *prometheus.HistogramVec:
			goType = "histogram"
		case *prometheus.SummaryVec:
			goType = "summary"
		}
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, ok := parseDesc(d.String())
			if !ok || !strings.HasPrefix(m.Name, "narwhal_") {
				continue
			}
			m.Process, m.Type = process, goType
			if old, ok := byName[m.Name]; ok { // the same family under other const labels
				old.Labels = union(old.Labels, m.Labels)
				continue
			}
			mm := m
			byName[m.Name] = &mm
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("refdocs: %s: gather: %w", process, err)
	}
	for _, mf := range mfs {
		if m, ok := byName[mf.GetName()]; ok {
			m.Type = strings.ToLower(mf.GetType().String())
		}
	}
	var out []Metric
	for _, m := range byName {
		if m.Type == "" {
			m.Type = "gauge"
			if strings.HasSuffix(m.Name, "_total") {
				m.Type = "counter"
			}
		}
		sort.Strings(m.Labels)
		out = append(out, *m)
	}
	return out, nil
}

// parseDesc reads a Desc's String():
// Desc{fqName: "n", help: "h", unit: "u", constLabels: {a="b"}, variableLabels: {c,d}}.
func parseDesc(s string) (Metric, bool) {
	var m Metric
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	if !ok {
		return m, false
	}
	next := func(prefix string) (string, bool) {
		r, ok := strings.CutPrefix(rest, prefix)
		if !ok {
			return "", false
		}
		q, err := strconv.QuotedPrefix(r)
		if err != nil {
			return "", false
		}
		rest = r[len(q):]
		v, err := strconv.Unquote(q)
		return v, err == nil
	}
	if m.Name, ok = next(""); !ok {
		return m, false
	}
	if m.Help, ok = next(", help: "); !ok {
		return m, false
	}
	if _, ok = next(", unit: "); !ok {
		return m, false
	}
	cl, vl, ok := strings.Cut(strings.TrimPrefix(rest, ", constLabels: {"), "}, variableLabels: {")
	if !ok {
		return m, false
	}
	for _, p := range strings.Split(cl, ",") {
		if name, _, ok := strings.Cut(p, "="); ok && name != "" {
			m.Labels = append(m.Labels, name)
		}
	}
	for _, p := range strings.Split(strings.TrimSuffix(vl, "}}"), ",") {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "c("), ")")
		if p != "" {
			m.Labels = append(m.Labels, p)
		}
	}
	return m, m.Name != ""
}

// addExposed adds the narwhal_* families of a text exposition that ms
// lacks, with their help, type and labels.
func addExposed(ms []Metric, process, text string) []Metric {
	have := map[string]bool{}
	for _, m := range ms {
		have[m.Name] = true
	}
	extra := map[string]*Metric{}
	var order []string
	get := func(name string) *Metric {
		if m, ok := extra[name]; ok {
			return m
		}
		m := &Metric{Name: name, Process: process}
		extra[name] = m
		order = append(order, name)
		return m
	}
	for _, line := range strings.Split(text, "\n") {
		f := strings.SplitN(line, " ", 4)
		switch {
		case len(f) >= 4 && f[0] == "#" && f[1] == "HELP" && strings.HasPrefix(f[2], "narwhal_") && !have[f[2]]:
			get(f[2]).Help = f[3]
		case len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "narwhal_") && !have[f[2]]:
			get(f[2]).Type = f[3]
		case strings.HasPrefix(line, "narwhal_"):
			name, labels, _ := strings.Cut(strings.Fields(line)[0], "{")
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if m, ok := extra[strings.TrimSuffix(name, suffix)]; ok && m.Type == "histogram" {
					name = m.Name
				}
			}
			m, ok := extra[name]
			if !ok {
				continue
			}
			for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				if k, _, ok := strings.Cut(kv, "="); ok && k != "le" {
					m.Labels = union(m.Labels, []string{k})
				}
			}
		}
	}
	for _, name := range order {
		m := extra[name]
		sort.Strings(m.Labels)
		ms = append(ms, *m)
	}
	return ms
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range append(append([]string(nil), a...), b...) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// MetricsPage renders docs/metrics.md.
func MetricsPage() ([]byte, error) {
	ms, err := Catalog()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(generatedHeader)
	b.WriteString(`# Metrics reference

Every ` + "`narwhal_*`" + ` metric narwhal-core (` + "`GET /metrics`" + ` on its API
listener) and narwhal-agent (` + "`GET /metrics`" + ` on ` + "`-listen`" + `, default :9400)
register, with their labels. Both also export the standard ` + "`go_*`" + ` and
` + "`process_*`" + ` collectors. Metrics of the Kubernetes side (` + "`narwhal_leader_*`" + `,
` + "`narwhal_k8s_*`" + `, ` + "`narwhal_demand_merge_*`" + `) appear only with
` + "`kubernetes.enabled`" + `, the journal's (` + "`narwhal_journal_*`" + `,
` + "`narwhal_state_save_errors_total`" + `) only with a ` + "`data_dir`" + `, and the agent's
` + "`narwhal_agent_discovered_engines`" + ` and
` + "`narwhal_agent_gpu_mapping_disagreements_total`" + ` only with the agent's
` + "`kubernetes.enabled`" + `. The Prometheus rules and the Grafana dashboard shipped
in ` + "`charts/narwhal/files/`" + ` build on these (docs/operator.md).

For SLO practice use the monotonic ` + "`narwhal_requests_*_total`" + ` counters
(rates over any window); ` + "`narwhal_attainment_*`" + ` are gauges over the core's
retained window (four demand windows) and reset as it slides.

`)
	for _, proc := range []string{"narwhal-core", "narwhal-agent"} {
		fmt.Fprintf(&b, "## %s\n\n| metric | type | labels | description |\n|---|---|---|---|\n", proc)
		for _, m := range ms {
			if m.Process != proc {
				continue
			}
			labels := strings.Join(m.Labels, ", ")
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, oneLine(m.Help))
		}
		b.WriteString("\n")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// writeKeyPair writes a self-signed certificate and its key into dir
// (the TLS listener's metrics register only with TLS on).
func writeKeyPair(dir string) (certFile, keyFile string, err error) {
	cert, key, err := testcert.Server(nil, 1, time.Now().Add(time.Hour))
	if err != nil {
		return "", "", fmt.Errorf("refdocs: %w", err)
	}
	certFile, keyFile = dir+"/tls.crt", dir+"/tls.key"
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return "", "", fmt.Errorf("refdocs: %w", err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", fmt.Errorf("refdocs: %w", err)
	}
	return certFile, keyFile, nil
}
