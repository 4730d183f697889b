package refdocs

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-io/narwhal/service"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Acceptance 3: the generated references are current. A setting, metric
// or journal field added without rerunning `go run ./cmd/narwhal-docs`
// fails here.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	r := root(t)
	for _, p := range Pages {
		want, err := p.Render(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(r, p.Path))
		if err != nil {
			t.Fatalf("%s: %v (run go run ./cmd/narwhal-docs)", p.Path, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go run ./cmd/narwhal-docs and commit the result", p.Path)
		}
	}
}

// The pages cover what they claim: every setting with its flag and
// variable, the request counters, every journal field.
func TestGeneratedDocsCoverTheCode(t *testing.T) {
	r := root(t)
	cfg, err := Configuration(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `core.ttft_slo_s` | float64 | `0.25` | `NARWHAL_CORE_TTFT_SLO_S` |",
		"| `auth.allow_unauthenticated` | bool | `false` |", "| `kubernetes.lease_name` |"} {
		if !bytes.Contains(cfg, []byte(want)) {
			t.Errorf("configuration.md lacks %q", want)
		}
	}
	// Every setting says what it does: no empty description, and none
	// borrowed from its section's type doc (rendered in parentheses),
	// which told an operator nothing about the one setting.
	for _, line := range strings.Split(string(cfg), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) != 7 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		if d := strings.TrimSpace(cols[5]); d == "" || strings.HasPrefix(d, "(") {
			t.Errorf("setting %s has no description of its own: %q (document the field)", strings.TrimSpace(cols[1]), d)
		}
	}
	ag, err := AgentConfiguration(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `scrape_interval_s` | float64 | `1` |", "| `queue_size` | int | `256` |",
		"| `kubernetes.metrics_port_name` | string | `http` |", "| `kubernetes.roles.key` | string | `narwhal.io/role` |",
		"## `engines` (list of object (EngineConfig))", "| `geometry.kv_heads` | int64 |"} {
		if !bytes.Contains(ag, []byte(want)) {
			t.Errorf("agent-configuration.md lacks %q", want)
		}
	}
	for _, line := range strings.Split(string(ag), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		if d := strings.TrimSpace(cols[len(cols)-2]); d == "" || strings.HasPrefix(d, "(") {
			t.Errorf("agent setting %s has no description of its own: %q (document the field)", strings.TrimSpace(cols[1]), d)
		}
	}
	met, err := MetricsPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `narwhal_requests_finished_total` | counter | outcome |", "| `narwhal_build_info` | gauge |",
		"| `narwhal_http_request_duration_seconds` | histogram | handler |", "| `narwhal_leader_is_leader` | gauge | lease |",
		"| `narwhal_agent_scrapes_total` | counter | engine, result |",
		// Registered only with a data_dir, and by the agent's discovery:
		// metrics.md used to leave them out.
		"| `narwhal_journal_write_errors_total` | counter |  |", "| `narwhal_state_save_errors_total` | counter |  |",
		"| `narwhal_agent_discovered_engines` | gauge |  |", "| `narwhal_agent_gpu_mapping_disagreements_total` | counter |  |"} {
		if !bytes.Contains(met, []byte(want)) {
			t.Errorf("metrics.md lacks %q", want)
		}
	}
	j, err := Journal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `decision_basis` |", "| `blocked_gate` |", "## DemandEvidence", "| `envelope_decode_engines` |", "## GateResult"} {
		if !bytes.Contains(j, []byte(want)) {
			t.Errorf("journal.md lacks %q", want)
		}
	}
	if bytes.Contains(j, []byte("|  |\n")) {
		t.Errorf("journal.md has a field without a description:\n%s", j)
	}
	for _, line := range strings.Split(string(j), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		if d := strings.TrimSpace(cols[len(cols)-2]); strings.HasPrefix(d, "(") {
			t.Errorf("journal field %s has only its type's description: %q (document the field)", strings.TrimSpace(cols[1]), d)
		}
	}
}

// metricNames are the series names the processes export: each family,
// and a histogram's _bucket, _sum and _count.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	ms, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range ms {
		names[m.Name] = true
		if m.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m.Name+s] = true
			}
		}
	}
	return names
}

type rulesFile struct {
	Groups []struct {
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) rulesFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "charts/narwhal/files/prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf rulesFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

var seriesName = regexp.MustCompile(`\b(narwhal[a-z0-9_:]*)`)

// Acceptance 2: the shipped rules pass `promtool check rules` and
// `promtool test rules`, and every alert has a test case that fires it.
// promtool is Debian's prometheus package; in CI (CI=true) its absence
// fails the test.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not on PATH; CI needs it (Debian package prometheus, installed by .ci/run)")
		}
		t.Skip("promtool not on PATH (apt-get install prometheus); skipping the rules check")
	}
	dir := filepath.Join(root(t), "charts/narwhal/files")
	for _, args := range [][]string{{"check", "rules", "prometheus-rules.yaml"}, {"test", "rules", "prometheus-rules.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rf := readRules(t)
	b, err := os.ReadFile(filepath.Join(dir, "prometheus-rules.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				if !fired[r.Alert] {
					t.Errorf("alert %s has no test case that fires it", r.Alert)
				}
			}
		}
	}
	for _, want := range []string{"NarwhalSLOBudgetBurnFast", "NarwhalNoLeader", "NarwhalEngineStuckMoving", "NarwhalAgentsSilent", "NarwhalJournalWriteErrors", "NarwhalClockBehindHistory"} {
		if !fired[want] {
			t.Errorf("no alert %s tested (alerts: %v)", want, alerts)
		}
	}
}

// Every series the rules read is registered by narwhal-core or the
// agent; a recording rule's output counts as registered for the rules
// after it.
func TestPrometheusRulesReadRegisteredMetrics(t *testing.T) {
	names := metricNames(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			for _, m := range seriesName.FindAllString(r.Expr, -1) {
				if !names[m] {
					t.Errorf("rule %s%s reads %s, which nothing registers", r.Record, r.Alert, m)
				}
			}
			if r.Record != "" {
				names[r.Record] = true
			}
		}
	}
}

// The Grafana dashboard is valid JSON and every query reads a registered
// metric or a recording rule of the shipped rules.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root(t), "charts/narwhal/files/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks title, uid or panels: %q %q %d", d.Title, d.UID, len(d.Panels))
	}
	names := metricNames(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				names[r.Record] = true
			}
		}
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			if len(seriesName.FindAllString(tg.Expr, -1)) == 0 {
				t.Errorf("panel %q: query %q reads no narwhal metric", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	var missing []string
	for _, e := range exprs {
		for _, m := range seriesName.FindAllString(e, -1) {
			if !names[m] {
				missing = append(missing, m)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("the dashboard reads metrics nothing registers: %v", missing)
	}
	// What the issue asks the dashboard to show.
	all := strings.Join(exprs, "\n")
	for _, want := range []string{"narwhal_engines", "attainment", "narwhal_controller_moves_total", "narwhal_controller_blocked_total", "narwhal_controller_decisions_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("the dashboard shows nothing of %s", want)
		}
	}
}

// A family registered outside the server's collector list still reaches
// the catalog through /metrics.
func TestExposedFamiliesAreAdded(t *testing.T) {
	text := "# HELP narwhal_x_total Things.\n# TYPE narwhal_x_total counter\nnarwhal_x_total{kind=\"a\",node=\"n\"} 3\n" +
		"# HELP narwhal_known Known.\n# TYPE narwhal_known gauge\nnarwhal_known 1\n" +
		"# HELP narwhal_h_seconds H.\n# TYPE narwhal_h_seconds histogram\nnarwhal_h_seconds_bucket{op=\"w\",le=\"1\"} 1\n"
	ms := addExposed([]Metric{{Name: "narwhal_known"}}, "narwhal-core", text)
	if len(ms) != 3 {
		t.Fatalf("got %d families; want 3: %+v", len(ms), ms)
	}
	x, h := ms[1], ms[2]
	if x.Name != "narwhal_x_total" || x.Type != "counter" || x.Help != "Things." || strings.Join(x.Labels, ",") != "kind,node" {
		t.Fatalf("unexpected family %+v", x)
	}
	if h.Name != "narwhal_h_seconds" || h.Type != "histogram" || strings.Join(h.Labels, ",") != "op" {
		t.Fatalf("unexpected histogram %+v", h)
	}
}

// operatorDocs are the hand-written pages an operator acts on.
var operatorDocs = []string{"README.md", "docs/operator.md", "docs/llm-d.md", "charts/narwhal/README.md", "k8s/README.md"}

var (
	docMetric   = regexp.MustCompile(`\bnarwhal_[a-z0-9_]+`)
	docEnv      = regexp.MustCompile(`\bNARWHAL_[A-Z0-9_]+`)
	docSelector = regexp.MustCompile(`\b(narwhal_[a-z0-9_]+)\{([^}]*)\}`)
	docDotPath  = regexp.MustCompile(`^[a-z][a-zA-Z0-9_]*(\.[a-zA-Z0-9_]+)+$`)
	docFileExt  = regexp.MustCompile(`\.(json|jsonl|yaml|md|csv|go|png|svg|sh|txt|crt|key|pem)$`)
)

// The hand-written pages name only metrics (and their labels), settings,
// Helm values and variables that exist: a name renamed or removed in the code fails here
// instead of rotting in the page (llm-d.md named two agent metrics that
// metrics.md did not list). A name ending in "_" (narwhal_requests_*,
// NARWHAL_*) must be the prefix of one.
func TestOperatorDocsNameWhatExists(t *testing.T) {
	r := root(t)
	metrics := metricNames(t)
	catalog, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{}
	for _, m := range catalog {
		labels[m.Name] = map[string]bool{}
		for _, l := range m.Labels {
			labels[m.Name][l] = true
		}
	}
	envs := map[string]bool{"NARWHAL_CONFIG": true, "NARWHAL_AGENT_TOKEN": true}
	paths := map[string]bool{} // core settings, lists and their sections
	addPath := func(p string) {
		for {
			paths[p] = true
			i := strings.LastIndex(p, ".")
			if i < 0 {
				return
			}
			p = p[:i]
		}
	}
	for _, s := range service.SettingDocs() {
		addPath(s.Path)
		envs[s.Env] = true
	}
	var lists []fileOnly
	walkFileOnly(reflect.TypeOf(service.Config{}), "", &lists)
	for _, l := range lists {
		addPath(l.path)
	}
	b, err := os.ReadFile(filepath.Join(r, "charts/narwhal/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			addPath(prefix + k)
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
			}
		}
	}
	walk("", values)
	known := func(set map[string]bool, name string) bool {
		if !strings.HasSuffix(name, "_") {
			return set[name]
		}
		for n := range set {
			if strings.HasPrefix(n, name) {
				return true
			}
		}
		return false
	}
	for _, page := range operatorDocs {
		b, err := os.ReadFile(filepath.Join(r, page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range docMetric.FindAllString(text, -1) {
			if !known(metrics, m) {
				t.Errorf("%s names metric %s, which nothing registers (docs/metrics.md lists what does)", page, m)
			}
		}
		// A selector's labels: metric{label}, {label="v"}, {a,b}.
		for _, sel := range docSelector.FindAllStringSubmatch(text, -1) {
			for _, part := range strings.Split(sel[2], ",") {
				l, _, _ := strings.Cut(part, "=")
				if l = strings.TrimSpace(l); labels[sel[1]] != nil && !labels[sel[1]][l] {
					t.Errorf("%s names label %q of %s, which has labels %v", page, l, sel[1], labels[sel[1]])
				}
			}
		}
		for _, e := range docEnv.FindAllString(text, -1) {
			if !known(envs, e) {
				t.Errorf("%s names variable %s, which nothing reads", page, e)
			}
		}
		// Dotted paths in code spans and code blocks (a setting, a Helm
		// value, or `agents.required: false`) whose first part is a
		// section of the core's configuration or of the chart's values.
		// Go identifiers (core.New) and file names are not paths.
		for _, span := range regexp.MustCompile("`+[^`]+`+").FindAllString(text, -1) {
			for _, f := range strings.FieldsFunc(strings.Trim(span, "`"), func(c rune) bool {
				return c == ' ' || c == '\n' || c == ',' || c == '\t'
			}) {
				f = strings.TrimLeft(f, "-")
				if i := strings.IndexAny(f, ":="); i >= 0 {
					f = f[:i]
				}
				if !docDotPath.MatchString(f) || docFileExt.MatchString(f) {
					continue
				}
				parts := strings.Split(f, ".")
				if !paths[parts[0]] || strings.ContainsAny(parts[1][:1], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
					continue
				}
				if !paths[f] {
					t.Errorf("%s names %s, neither a narwhal-core setting (docs/configuration.md) nor a Helm value (charts/narwhal/values.yaml)", page, f)
				}
			}
		}
	}
}
