package refdocs

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/coreproc"
	"github.com/narwhal-io/narwhal/internal/netcap/netcaptest"
)

// TestLivePrometheus proves that the shipped rules and dashboard work on
// what narwhal-core really exports, which the promtool unit tests (on
// synthetic series) cannot: a real Prometheus server (Debian's
// /usr/bin/prometheus) scrapes the real narwhal-core binary every second
// while its demo replays the bundled trace through the real core on a
// simulated cluster, and evaluates the shipped rules file every second.
// Then, through Prometheus's HTTP API:
//
//   - the scrape target is up, and every rule group and rule of the file
//     is loaded with health "ok" (no evaluation error); no alert fires;
//   - every recording rule returns at least one series labelled with the
//     job, and the attainment ratios lie in [0, 1]; every series selector
//     the rules read (name and label matchers) finds series (except the
//     metrics listed in mayBeEmpty, with why);
//   - the dashboard's job variable (label_values(narwhal_build_info, job))
//     offers the job;
//   - every dashboard target, with $job replaced by the variable's All
//     value ".*" and by the job name, and Grafana's macros by the windows
//     Grafana would use at a 1 s scrape interval, parses and runs, returns
//     data (except the panels listed in mayBeEmpty, with why), and every
//     {{label}} of its legend is a label of each series it returns;
//   - a few values: the SLO targets are the demo's (1.5 s, 0.1 s), the
//     per-engine role panel shows each of the 16 engines once, and the
//     engine counts add up to 16.
//
// A label, suffix or recording-rule name that the rules or the dashboard
// read but the core does not export shows up here as an empty answer.
//
// Like the promtool test, it skips without prometheus on PATH, except in
// CI (CI=true), where it fails (.ci/run installs Debian's prometheus
// package, which has both). About 20 s: the build, then ~10 s of scrapes.
func TestLivePrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("prometheus not on PATH; CI needs it (Debian package prometheus, installed by .ci/run)")
		}
		t.Skip("prometheus not on PATH (apt-get install prometheus); skipping the live rules and dashboard check")
	}
	r := root(t)
	rulesPath := filepath.Join(r, "charts/narwhal/files/prometheus-rules.yaml")
	dash := readDashboard(t, r)
	const job = "narwhal-core"
	const engines = 16

	dir := t.TempDir()
	bin := filepath.Join(dir, "narwhal-core")
	if err := coreproc.Build(bin); err != nil {
		t.Fatal(err)
	}
	// At pace 20 the replay lasts about 45 s of wall time, well past the
	// ~10 s of scrapes the checks need; the test stops it when done.
	demo := coreproc.StartDemo(t, bin, "--listen", "127.0.0.1:0", "--pace", "20",
		"--engines", strconv.Itoa(engines))
	prom := startPrometheus(t, promBin, dir, rulesPath, job, strings.TrimPrefix(demo.Base, "http://"))

	// Enough scrapes for every rate window (the dashboard's 4 s ones
	// included), then one rule evaluation after them.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, errMsg := prom.query(`count_over_time(up{job="` + job + `"}[1m]) >= 8 and on() (up{job="` + job + `"} == 1)`)
		if errMsg != "" {
			t.Fatalf("waiting for scrapes: %s", errMsg)
		}
		if len(res) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 8 successful scrapes of the demo in 30 s; targets: %s\nprometheus:\n%s\ndemo:\n%s",
				prom.get("/api/v1/targets", nil), prom.log.String(), demo.Stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	scraped := time.Now()
	var groups []ruleGroup
	for {
		groups = prom.rules(t)
		if len(groups) > 0 && evaluatedAfter(groups, scraped) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rule groups were not evaluated within 30 s: %+v", groups)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// The target is healthy.
	var targets struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	// (polled: on a loaded machine one scrape may miss its 1 s timeout)
	for {
		prom.data(t, "/api/v1/targets", nil, &targets)
		if len(targets.ActiveTargets) == 1 && targets.ActiveTargets[0].Health == "up" && targets.ActiveTargets[0].Labels["job"] == job {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want one healthy target of job %s; got %+v", job, targets.ActiveTargets)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Every group and rule of the file is loaded and evaluates without
	// error; no alert fires on the demo.
	rf := readRules(t)
	loaded := map[string]bool{}
	for _, g := range groups {
		for _, rl := range g.Rules {
			loaded[rl.Name] = true
			if rl.Health != "ok" || rl.LastError != "" {
				t.Errorf("group %s rule %s: health %q, error %q", g.Name, rl.Name, rl.Health, rl.LastError)
			}
			if rl.Type == "alerting" && rl.State == "firing" {
				t.Errorf("alert %s fires on the demo: %s", rl.Name, rl.Alerts)
			}
			if rl.Type == "alerting" && rl.State == "pending" {
				// The demo misses its SLO on ~16 % of requests (more in its
				// first minutes), above the ticket alert's 15 %; every
				// burn-rate alert has a `for` longer than the test.
				t.Logf("alert %s pending (its `for` is longer than the test)", rl.Name)
			}
		}
	}
	var records []string
	nRules := 0
	for _, g := range rf.Groups {
		for _, rl := range g.Rules {
			nRules++
			name := rl.Record + rl.Alert
			if !loaded[name] {
				t.Errorf("rule %s of the file is not loaded by prometheus", name)
			}
			if rl.Record != "" {
				records = append(records, rl.Record)
			}
		}
	}
	if len(loaded) != nRules || len(groups) != len(rf.Groups) {
		t.Errorf("prometheus loaded %d groups, %d rules; the file has %d, %d", len(groups), len(loaded), len(rf.Groups), nRules)
	}

	// Every recording rule has a series of the job; the attainment ratios
	// are ratios.
	for _, rec := range records {
		res, errMsg := prom.query(rec + `{job="` + job + `"}`)
		switch {
		case errMsg != "":
			t.Errorf("recording rule %s: %s", rec, errMsg)
		case len(res) == 0:
			t.Errorf("recording rule %s returns no series for job %s", rec, job)
		}
		for _, s := range res {
			v := s.val(t)
			if strings.Contains(rec, "attainment") && !(v >= 0 && v <= 1) {
				t.Errorf("recording rule %s%v = %v; want a ratio in [0, 1]", rec, s.Metric, v)
			}
			if strings.HasSuffix(rec, ":rate5m") && !strings.Contains(rec, "attainment") && !(v > 0) {
				t.Errorf("recording rule %s%v = %v; want > 0 while the demo finishes requests", rec, s.Metric, v)
			}
		}
	}

	// Every series selector of the rules (metric name and label matchers)
	// finds series of the job, except the metrics the demo lacks.
	for _, g := range rf.Groups {
		for _, rl := range g.Rules {
			for _, m := range ruleSelector.FindAllStringSubmatch(rl.Expr, -1) {
				sel := m[1] + `{job="` + job + `"`
				if m[2] != "" {
					sel += "," + m[2]
				}
				sel += "}"
				res, errMsg := prom.query(sel)
				switch {
				case errMsg != "":
					t.Errorf("rule %s%s: %s: %s", rl.Record, rl.Alert, sel, errMsg)
				case len(res) == 0:
					if why, ok := emptyReason(sel); ok {
						t.Logf("rule %s%s: %s: no data (may be empty: %s)", rl.Record, rl.Alert, sel, why.why)
						continue
					}
					t.Errorf("rule %s%s reads %s, which the core does not export", rl.Record, rl.Alert, sel)
				}
			}
		}
	}

	// The job variable's query offers the job.
	var jobs []string
	prom.data(t, "/api/v1/label/job/values", url.Values{"match[]": {"narwhal_build_info"}}, &jobs)
	if !contains(jobs, job) {
		t.Errorf("label_values(narwhal_build_info, job) = %v; want %s among them", jobs, job)
	}

	// Every dashboard target runs and returns data where the demo makes it.
	checked := 0
	for _, jobValue := range []string{".*", job} {
		for _, p := range dash.Panels {
			for _, tg := range p.Targets {
				expr := grafanaExpr(tg.Expr, jobValue)
				where := fmt.Sprintf("panel %q target %s ($job=%q): %s", p.Title, tg.RefID, jobValue, expr)
				if strings.Contains(expr, "$") {
					t.Errorf("%s: a variable or macro the test does not substitute", where)
					continue
				}
				res, errMsg := prom.query(expr)
				if errMsg != "" {
					t.Errorf("%s: %s", where, errMsg)
					continue
				}
				checked++
				if len(res) == 0 {
					if why, ok := emptyReason(expr); ok {
						t.Logf("%s: no data (may be empty: %s)", where, why.why)
						continue
					}
					t.Errorf("%s: no data, although the demo exports what it reads", where)
					continue
				}
				for _, l := range legendLabels.FindAllStringSubmatch(tg.LegendFormat, -1) {
					for _, s := range res {
						if _, ok := s.Metric[l[1]]; !ok {
							t.Errorf("%s: legend %q names label %s, which series %v lacks", where, tg.LegendFormat, l[1], s.Metric)
						}
					}
				}
				if check := valueChecks[p.Title+"/"+tg.RefID]; check != nil {
					if err := check(t, res); err != nil {
						t.Errorf("%s: %v", where, err)
					}
				}
			}
		}
	}
	read := dashExprs(dash)
	for _, g := range rf.Groups {
		for _, rl := range g.Rules {
			read += rl.Expr + "\n"
		}
	}
	for _, e := range mayBeEmpty {
		if !strings.Contains(read, e.metric) {
			t.Errorf("mayBeEmpty lists %s, which neither a dashboard target nor a rule reads; drop it", e.metric)
		}
	}
	if checked == 0 {
		t.Fatal("no dashboard target checked")
	}

	// The engine counts by role and state add up to the cluster.
	res, errMsg := prom.query(`sum(narwhal_engines{job="` + job + `"})`)
	if errMsg != "" || len(res) != 1 || res[0].val(t) != engines {
		t.Errorf("sum(narwhal_engines) = %+v %s; want %d", res, errMsg, engines)
	}

	select {
	case err := <-demo.Done:
		t.Fatalf("the demo ended before the checks did (%v): the answers may be of stale series; lower --pace", err)
	default:
	}
	demo.Stop(t)
}

// mayBeEmpty are the metrics a dashboard target or a rule may find
// absent in the demo, and why. A target or rule selector that reads one
// of them and returns nothing passes; any other empty one fails.
var mayBeEmpty = []struct{ metric, why string }{
	{"narwhal_journal_write_errors_total", "the journal's metrics: the demo runs without a data directory, so without a journal"},
	{"narwhal_k8s_moves_total", "the Kubernetes actuator's pod moves: the demo's simulator actuates in process"},
	{"narwhal_fleet_reports_total", "agent reports: the demo's simulator is the engine table's source and agent reports are off"},
	{"narwhal_leader_is_leader", "leader election runs with kubernetes.enabled only; the demo has no Lease"},
	{"narwhal_auth_token_reloads_total", "token file reloads: the demo's token is fixed, not read from a file"},
	{"narwhal_tls_certificate_not_after_seconds", "the TLS listener's certificate: the demo serves plain HTTP"},
	{"narwhal_extproc_streams_total", "Envoy's ext_proc streams: the demo serves no extproc.listen"},
}

func emptyReason(expr string) (struct{ metric, why string }, bool) {
	for _, e := range mayBeEmpty {
		if strings.Contains(expr, e.metric) {
			return e, true
		}
	}
	return struct{ metric, why string }{}, false
}

// valueChecks are value assertions on some targets' answers, keyed by
// panel title and refId.
var valueChecks = map[string]func(t *testing.T, res []promSample) error{
	// The demo holds requests to the Azure rows' SLOs (cmd/narwhal-core's
	// demo.go): TTFT 1.5 s, TPOT 0.1 s.
	"SLO targets/A": wantValue(1.5),
	"SLO targets/B": wantValue(0.1),
	// One series per engine: its current role.
	"Engine roles (per engine)/A": func(t *testing.T, res []promSample) error {
		seen := map[string]bool{}
		for _, s := range res {
			if seen[s.Metric["engine"]] {
				return fmt.Errorf("engine %s has two roles", s.Metric["engine"])
			}
			seen[s.Metric["engine"]] = true
		}
		if len(seen) != 16 {
			return fmt.Errorf("%d engines; want 16", len(seen))
		}
		return nil
	},
	"SLO attainment (TTFT and TPOT met), 30 d/A": wantRatio,
	"SLO attainment, 1 h/A":                      wantRatio,
	"SLO attainment over time/A":                 wantRatio,
	"SLO attainment over time/B":                 wantRatio,
	"SLO attainment over time/C":                 wantRatio,
	"SLO attainment over time/D":                 wantRatio,
}

func wantValue(want float64) func(t *testing.T, res []promSample) error {
	return func(t *testing.T, res []promSample) error {
		if len(res) != 1 || res[0].val(t) != want {
			return fmt.Errorf("got %+v; want one series of value %v", res, want)
		}
		return nil
	}
}

func wantRatio(t *testing.T, res []promSample) error {
	for _, s := range res {
		if v := s.val(t); !(v >= 0 && v <= 1) {
			return fmt.Errorf("%v = %v; want a ratio in [0, 1]", s.Metric, v)
		}
	}
	return nil
}

// ruleSelector is a series selector of a rule expression: a metric name
// (recording rules' names, with colons, are checked apart) and its label
// matchers.
var ruleSelector = regexp.MustCompile(`\b(narwhal_[a-z0-9_]+)(?:\{([^}]*)\})?`)

var legendLabels = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// grafanaExpr is expr as Grafana sends it with the job variable at
// jobValue and a 1 s scrape interval: $__rate_interval is
// max($__interval + scrape interval, 4 × scrape interval) = 4 s.
func grafanaExpr(expr, jobValue string) string {
	return strings.NewReplacer(
		"${job}", jobValue, "$job", jobValue,
		"$__rate_interval", "4s", "${__rate_interval}", "4s",
		"$__interval", "1s", "${__interval}", "1s",
		"$__range", "1m", "${__range}", "1m",
	).Replace(expr)
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T, root string) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "charts/narwhal/files/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func dashExprs(d dashboard) string {
	var b strings.Builder
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			b.WriteString(tg.Expr + "\n")
		}
	}
	return b.String()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// promServer is a running Prometheus and its HTTP API.
type promServer struct {
	base string
	log  *coreproc.Log
	hc   *http.Client
}

// startPrometheus runs prometheus with a config that scrapes target
// (job name job) every second and evaluates rulesPath every second, its
// storage under dir, and waits until it is ready.
func startPrometheus(t *testing.T, bin, dir, rulesPath, job, target string) *promServer {
	t.Helper()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: %q
    static_configs:
      - targets: [%q]
`, rulesPath, job, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastLog string
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken in between
		addr := netcaptest.FreeAddr(t)
		logs := &coreproc.Log{}
		cmd := exec.Command(bin, "--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("tsdb%d", attempt)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				cmd.Process.Kill()
				<-done
			}
		})
		p := &promServer{base: "http://" + addr, log: logs, hc: &http.Client{Timeout: 5 * time.Second}}
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-done:
				lastLog = fmt.Sprintf("prometheus exited: %v\n%s", err, logs.String())
				deadline = time.Time{}
				continue
			default:
			}
			if resp, err := p.hc.Get(p.base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !deadline.IsZero() {
			t.Fatalf("prometheus not ready in 20 s:\n%s", logs.String())
		}
		if !strings.Contains(lastLog, "address already in use") {
			break
		}
	}
	t.Fatal(lastLog)
	return nil
}

// get returns the body of GET path?q (or the error, for messages).
func (p *promServer) get(path string, q url.Values) string {
	u := p.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	resp, err := p.hc.Get(u)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// apiResponse is the envelope of every /api/v1 answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

// data decodes the data of a successful GET path?q into v.
func (p *promServer) data(t *testing.T, path string, q url.Values, v any) {
	t.Helper()
	body := p.get(path, q)
	var r apiResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		t.Fatalf("GET %s %v: %v %s", path, q, err, body)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("GET %s: data: %v: %s", path, err, r.Data)
	}
}

// promSample is one series of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) val(t *testing.T) float64 {
	t.Helper()
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		t.Fatalf("sample %v: value %v: %v", s.Metric, s.Value, err)
	}
	return v
}

// query runs an instant query now; errMsg is Prometheus's error (a parse
// or evaluation error), or a result that is not a vector.
func (p *promServer) query(expr string) (res []promSample, errMsg string) {
	resp, err := p.hc.PostForm(p.base+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r apiResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Sprintf("%d %v: %s", resp.StatusCode, err, b)
	}
	if r.Status != "success" {
		return nil, fmt.Sprintf("%s: %s", r.ErrorType, r.Error)
	}
	if len(r.Warnings) > 0 {
		return nil, fmt.Sprintf("warnings: %v", r.Warnings)
	}
	var d struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return nil, fmt.Sprintf("data: %v: %s", err, r.Data)
	}
	if d.ResultType != "vector" {
		return nil, fmt.Sprintf("result type %s; want vector", d.ResultType)
	}
	sort.Slice(d.Result, func(i, j int) bool { return fmt.Sprint(d.Result[i].Metric) < fmt.Sprint(d.Result[j].Metric) })
	return d.Result, ""
}

type ruleGroup struct {
	Name           string    `json:"name"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		Name      string          `json:"name"`
		Type      string          `json:"type"`
		Health    string          `json:"health"`
		LastError string          `json:"lastError"`
		State     string          `json:"state"`
		Alerts    json.RawMessage `json:"alerts"`
	} `json:"rules"`
}

func (p *promServer) rules(t *testing.T) []ruleGroup {
	t.Helper()
	var d struct {
		Groups []ruleGroup `json:"groups"`
	}
	p.data(t, "/api/v1/rules", nil, &d)
	return d.Groups
}

func evaluatedAfter(groups []ruleGroup, at time.Time) bool {
	for _, g := range groups {
		if !g.LastEvaluation.After(at) {
			return false
		}
	}
	return true
}
