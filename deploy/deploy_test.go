package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/kubediscover"
	"github.com/narwhal-io/narwhal/core/profile"
	"github.com/narwhal-io/narwhal/service"
)

// RenderArgs are the helm template arguments of narwhal.yaml.
var RenderArgs = []string{"template", "narwhal", "../charts/narwhal", "-n", "narwhal", "--set", "auth.existingSecret=narwhal-token"}

var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// monitoringKinds are the Prometheus Operator kinds the chart may render
// (not in client-go's scheme; checked as YAML).
var monitoringKinds = map[string]bool{"ServiceMonitor": true, "PodMonitor": true, "PrometheusRule": true}

// decodeAll decodes every document strictly (unknown or duplicate fields
// fail) into client-go's types.
func decodeAll(t *testing.T, name string, b []byte) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		if head.Kind == "" {
			continue // comments only
		}
		if monitoringKinds[head.Kind] {
			if head.APIVersion != "monitoring.coreos.com/v1" {
				t.Fatalf("%s document %d: %s apiVersion %q", name, i, head.Kind, head.APIVersion)
			}
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s document %d (%s): %v", name, i, head.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func find[T runtime.Object](objs []runtime.Object, match func(T) bool) T {
	var zero T
	for _, o := range objs {
		if v, ok := o.(T); ok && match(v) {
			return v
		}
	}
	return zero
}

// checkConfigs loads the rendered core.yaml with the service's strict
// loader and the agent.yaml with the agent's, as the binaries do.
func checkConfigs(t *testing.T, objs []runtime.Object, ns, roleKey string) {
	t.Helper()
	core := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["core.yaml"] != "" })
	ag := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["agent.yaml"] != "" })
	if core == nil || ag == nil {
		t.Fatal("core.yaml or agent.yaml ConfigMap missing")
	}
	write := tempWriter(t)
	// The chart's core.yaml names both token files; the test points them
	// at files of its own (as the Secret's mount would provide them).
	if body := core.Data["core.yaml"]; !strings.Contains(body, "token_file: /etc/narwhal/token/token") || !strings.Contains(body, "agent_token_file: /etc/narwhal/token/agent-token") {
		t.Fatalf("core.yaml must name the router and the agent token files:\n%s", body)
	}
	cfg, err := service.Load([]string{"--config", write("core.yaml", core.Data["core.yaml"])}, coreEnv(write, ns, core))
	if err != nil {
		t.Fatalf("core.yaml: %v", err)
	}
	if cfg.Auth.Token != "x" || cfg.Auth.AgentToken != "y" {
		t.Fatalf("tokens: router %q agent %q; want x and y", cfg.Auth.Token, cfg.Auth.AgentToken)
	}
	k := cfg.Kubernetes
	if !k.Enabled || k.Namespace != ns || !strings.HasPrefix(k.EngineSelector, roleKey+" in (") {
		t.Fatalf("core.yaml kubernetes section: %+v", k)
	}
	t.Setenv("NODE_NAME", "gpu-node-1")
	ac, err := agent.LoadConfig(write("agent.yaml", ag.Data["agent.yaml"]))
	if err != nil {
		t.Fatalf("agent.yaml: %v", err)
	}
	kc, err := kubediscover.LoadConfig(&ac.Kubernetes)
	if err != nil || !kc.Enabled {
		t.Fatalf("agent.yaml kubernetes section: %+v, %v", kc, err)
	}
	if r, err := kc.Roles.Resolve(); err != nil || r.Key != roleKey {
		t.Fatalf("agent roles %+v, %v; want key %s", r, err, roleKey)
	}
	if !strings.Contains(ac.CoreURL, "-core-leader.") {
		t.Fatalf("agent core_url %q: agents report to the leader Service", ac.CoreURL)
	}
}

// tempWriter returns a function that writes a file in a test's
// temporary directory and returns its path.
func tempWriter(t *testing.T) func(name, body string) string {
	t.Helper()
	dir := t.TempDir()
	return func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// coreEnv is the environment a core pod of namespace ns sees: the pod's
// name and namespace, and the files its mounts would provide (the
// Secret's tokens "x" and "y", profiles.json from the core's ConfigMap cm
// when the chart renders one).
func coreEnv(write func(name, body string) string, ns string, cm *corev1.ConfigMap) func(string) (string, bool) {
	env := map[string]string{"POD_NAMESPACE": ns, "POD_NAME": "narwhal-core-0",
		"NARWHAL_AUTH_TOKEN_FILE": write("token", "x"), "NARWHAL_AUTH_AGENT_TOKEN_FILE": write("agent-token", "y")}
	if p := cm.Data["profiles.json"]; p != "" {
		env["NARWHAL_PROFILES_FILE"] = write("profiles.json", p)
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestRenderedManifests: deploy/narwhal.yaml decodes strictly, its
// configurations load, and its DaemonSet asks for exactly the privileges
// the agent documents.
func TestRenderedManifests(t *testing.T) {
	b, err := os.ReadFile("narwhal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, "narwhal.yaml", b)
	seen := map[string]int{}
	for _, o := range objs {
		acc := o.(interface{ GetName() string })
		kind := fmt.Sprintf("%T", o)
		seen[kind+"/"+acc.GetName()]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Fatalf("%s defined %d times", k, n)
		}
	}
	checkConfigs(t, objs, "narwhal", "narwhal.io/role")
	ds := find(objs, func(*appsv1.DaemonSet) bool { return true })
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostPID || spec.HostNetwork || spec.ServiceAccountName != "narwhal-agent" {
		t.Fatalf("agent pod: hostPID %v hostNetwork %v sa %q", spec.HostPID, spec.HostNetwork, spec.ServiceAccountName)
	}
	sc := spec.Containers[0].SecurityContext
	if *sc.Privileged || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE"}) {
		t.Fatalf("agent capabilities %+v", sc.Capabilities)
	}
	mounted := false
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/var/lib/kubelet/pod-resources" {
			mounted = true
		}
	}
	if !mounted {
		t.Fatal("the kubelet's pod-resources directory is not mounted")
	}
	dep := find(objs, func(d *appsv1.Deployment) bool { return d.Name == "narwhal-core" })
	if dep == nil || *dep.Spec.Replicas != 3 || dep.Spec.Template.Spec.ServiceAccountName != "narwhal-core" ||
		!*dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Fatalf("core deployment %+v", dep)
	}
}

// helm returns the helm command: $HELM, else helm on PATH. Without it the
// test skips, except in CI.
func helm(t *testing.T) []string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return strings.Fields(h)
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return []string{p}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("helm not found (set HELM, e.g. HELM=\"go run helm.sh/helm/v3/cmd/helm@v3.22.0\")")
	}
	t.Skip("helm not found; set HELM to run the chart tests")
	return nil
}

func render(t *testing.T, h []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(h[0], append(h[1:], args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestChartRenders: narwhal.yaml is what the chart renders now, and the
// chart renders strictly decodable objects with the llm-d preset, with
// every namespace watched, and with monitoring on.
func TestChartRenders(t *testing.T) {
	h := helm(t)
	got := render(t, h, RenderArgs...)
	want, err := os.ReadFile("narwhal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/narwhal.yaml is not the chart's output; regenerate it:\n  helm %s > deploy/narwhal.yaml", strings.Join(RenderArgs, " "))
	}
	llmd := decodeAll(t, "llm-d preset", render(t, h, "template", "n", "../charts/narwhal", "-n", "llm-d",
		"-f", "../charts/narwhal/values-llm-d.yaml"))
	checkConfigs(t, llmd, "llm-d", "llm-d.ai/role")
	all := decodeAll(t, "all namespaces", render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "ops",
		"--set", "engines.allNamespaces=true,serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true"))
	checkConfigs(t, all, "ops", "narwhal.io/role")
	pools := decodeAll(t, "scale pool", render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "llm-d",
		"-f", "../charts/narwhal/values-llm-d.yaml", "--set-json",
		`engines.pools=[{"name":"qwen","selector":"app=qwen","method":"scale","prefill_workload":"Deployment/qwen-prefill","decode_workload":"Deployment/qwen-decode","ready_timeout_s":900}]`))
	checkConfigs(t, pools, "llm-d", "llm-d.ai/role")
}

// TestChartEmbedsRulesAndDashboard: with files/prometheus-rules.yaml and
// files/grafana-dashboard.json present (issue 21 adds them) and the values
// on, the chart renders a PrometheusRule holding the rule groups and a
// ConfigMap with the dashboard and the Grafana sidecar label; without the
// files it renders neither (checked on a copy of the chart).
func TestChartEmbedsRulesAndDashboard(t *testing.T) {
	h := helm(t)
	dir := filepath.Join(t.TempDir(), "narwhal")
	if err := os.CopyFS(dir, os.DirFS("../charts/narwhal")); err != nil {
		t.Fatal(err)
	}
	on := []string{"template", "narwhal", dir, "-n", "narwhal", "--set", "prometheusRule.enabled=true,dashboard.enabled=true"}
	_ = os.RemoveAll(filepath.Join(dir, "files"))
	if out := string(render(t, h, on...)); strings.Contains(out, "kind: PrometheusRule") || strings.Contains(out, "narwhal-dashboard") {
		t.Fatal("rule or dashboard rendered without the files")
	}
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	rules := "groups:\n  - name: narwhal.slo\n    rules:\n      - alert: NarwhalNoLeader\n        expr: sum(narwhal_leader_is_leader) < 1\n        for: 1m\n"
	dash := `{"title": "Narwhal", "panels": []}`
	if err := os.WriteFile(filepath.Join(dir, "files", "prometheus-rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "files", "grafana-dashboard.json"), []byte(dash), 0o644); err != nil {
		t.Fatal(err)
	}
	out := render(t, h, on...)
	decodeAll(t, "with files", out)
	var sawRule, sawDash bool
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Groups []struct {
					Name  string           `yaml:"name"`
					Rules []map[string]any `yaml:"rules"`
				} `yaml:"groups"`
			} `yaml:"spec"`
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		switch {
		case obj.Kind == "PrometheusRule":
			sawRule = len(obj.Spec.Groups) == 1 && obj.Spec.Groups[0].Name == "narwhal.slo" && obj.Spec.Groups[0].Rules[0]["alert"] == "NarwhalNoLeader"
		case obj.Kind == "ConfigMap" && obj.Data["narwhal.json"] != "":
			sawDash = obj.Data["narwhal.json"] == dash && obj.Metadata.Labels["grafana_dashboard"] == "1"
		}
	}
	if !sawRule || !sawDash {
		t.Fatalf("PrometheusRule ok %v, dashboard ConfigMap ok %v", sawRule, sawDash)
	}
}

// TestChartNotes: what helm prints after install names the core's
// address (its scheme with TLS), the token Secret (the chart's or the
// operator's), the role label of the preset, where engines are watched and
// the agent's DaemonSet, and warns while TLS is off. helm template does not
// render NOTES.txt, so a copy of the chart renders it through tpl into a
// ConfigMap, with the same values and release.
func TestChartNotes(t *testing.T) {
	h := helm(t)
	dir := filepath.Join(t.TempDir(), "narwhal")
	if err := os.CopyFS(dir, os.DirFS("../charts/narwhal")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes-under-test.txt")); err != nil {
		t.Fatal(err)
	}
	wrap := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: |\n{{ tpl (.Files.Get \"notes-under-test.txt\") . | indent 4 }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes.yaml"), []byte(wrap), 0o644); err != nil {
		t.Fatal(err)
	}
	notes := func(set string) string {
		args := []string{"template", "narwhal", dir, "-n", "llm", "--show-only", "templates/zz-notes.yaml"}
		if set != "" {
			args = append(args, "--set", set)
		}
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(render(t, h, args...), &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["notes"]
	}
	for _, c := range []struct {
		name, set string
		want, not []string
	}{
		{name: "defaults", want: []string{
			"POST http://narwhal-core.llm.svc:8080/v1/events",
			"Secret narwhal-token",
			"label narwhal.io/role=prefill|decode",
			"pods in namespace llm",
			"rollout status daemonset/narwhal-agent",
			"get secret narwhal-token -o jsonpath='{.data.token}'",
			"WARNING: TLS is off",
		}, not: []string{"Gateway:"}},
		{name: "tls, own secret, llm-d, no agent",
			set: "tls.existingSecret=core-tls,auth.existingSecret=my-tokens,roles.preset=llm-d,agent.enabled=false,engines.allNamespaces=true,core.listenPort=9000",
			want: []string{
				"POST https://narwhal-core.llm.svc:9000/v1/events",
				"Secret my-tokens",
				"label llm-d.ai/role=prefill|decode",
				"pods in every namespace",
				"Agents: off",
				"port-forward service/narwhal-core-leader 8080:9000",
			},
			not: []string{"WARNING", "was generated", "daemonset/", "Gateway:"}},
		{name: "ext_proc on", set: "core.extproc.enabled=true,core.extproc.port=9100",
			want: []string{"Gateway: Envoy's ext_proc filter, observability mode, to narwhal-core.llm.svc:9100 (gRPC;"}},
	} {
		got := notes(c.set)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: notes lack %q:\n%s", c.name, w, got)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: notes hold %q:\n%s", c.name, n, got)
			}
		}
	}
}

// TestChartSettings: an operator sets the SLOs, latency profiles and any
// other setting through the chart's values, and the binaries read them:
// core.ttftSLOS and core.tpotSLOS land in core.ttft_slo_s and
// core.tpot_slo_s; core.profiles becomes a profile file the core loads,
// mounted where profiles.file points; core.settings and agent.settings
// merge over the chart's configuration, a false replacing the chart's
// true; a misspelt setting is refused by the core's loader, naming the
// key.
func TestChartSettings(t *testing.T) {
	h := helm(t)
	example, err := os.ReadFile("../core/profile/testdata/example-profiles.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Profiles []any `json:"profiles"`
	}
	if err := json.Unmarshal(example, &file); err != nil || len(file.Profiles) == 0 {
		t.Fatalf("example profiles: %v", err)
	}
	profiles, err := json.Marshal(file.Profiles)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, "settings", render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "narwhal",
		"--set", "core.ttftSLOS=1.5,core.tpotSLOS=0.15",
		"--set-json", "core.profiles="+string(profiles),
		"--set-json", `core.settings={"core":{"controller":{"switch_s":60}},"agents":{"stale_after_s":30},"kubernetes":{"label_leader":false},"http":{"max_connections":2048}}`,
		"--set-json", `agent.settings={"scrape_interval_s":0.5,"queue_size":512,"stale_after_s":20}`))
	checkConfigs(t, objs, "narwhal", "narwhal.io/role")

	cm := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["core.yaml"] != "" })
	write := tempWriter(t)
	var rendered struct {
		Profiles struct {
			File string `yaml:"file"`
		} `yaml:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["core.yaml"]), &rendered); err != nil {
		t.Fatal(err)
	}
	dep := find(objs, func(d *appsv1.Deployment) bool { return d.Name == "narwhal-core" })
	mounted := false
	for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.SubPath == "profiles.json" && m.MountPath == rendered.Profiles.File)
	}
	if rendered.Profiles.File == "" || !mounted {
		t.Fatalf("profiles.file %q is not where profiles.json is mounted: %+v", rendered.Profiles.File, dep.Spec.Template.Spec.Containers[0].VolumeMounts)
	}
	getenv := coreEnv(write, "narwhal", cm)
	cfg, err := service.Load([]string{"--config", write("core.yaml", cm.Data["core.yaml"])}, getenv)
	if err != nil {
		t.Fatalf("core.yaml with settings: %v", err)
	}
	if cfg.Core.TTFTSLOS != 1.5 || cfg.Core.TPOTSLOS != 0.15 {
		t.Errorf("SLOs %v / %v, want 1.5 / 0.15", cfg.Core.TTFTSLOS, cfg.Core.TPOTSLOS)
	}
	if cfg.Core.Controller.SwitchS != 60 || cfg.Agents.StaleAfterS != 30 || cfg.HTTP.MaxConnections != 2048 {
		t.Errorf("core.settings not applied: switch_s %v, agents.stale_after_s %v, http.max_connections %v",
			cfg.Core.Controller.SwitchS, cfg.Agents.StaleAfterS, cfg.HTTP.MaxConnections)
	}
	if cfg.Kubernetes.LabelLeader || !cfg.Kubernetes.Enabled || cfg.Auth.Token != "x" {
		t.Errorf("merge: label_leader %v (want false, set over the chart's true), enabled %v, token %q",
			cfg.Kubernetes.LabelLeader, cfg.Kubernetes.Enabled, cfg.Auth.Token)
	}
	set, err := profile.Parse("profiles.json", []byte(cm.Data["profiles.json"]))
	if err != nil {
		t.Fatalf("rendered profiles.json: %v", err)
	}
	if _, ok := set.Lookup("meta-llama/Llama-3.1-8B-Instruct", "H100"); !ok {
		t.Errorf("rendered profiles.json lacks the example's Llama-3.1-8B on H100")
	}

	ag := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["agent.yaml"] != "" })
	t.Setenv("NODE_NAME", "gpu-node-1")
	ac, err := agent.LoadConfig(write("agent.yaml", ag.Data["agent.yaml"]))
	if err != nil {
		t.Fatalf("agent.yaml with settings: %v", err)
	}
	if ac.ScrapeIntervalS != 0.5 || ac.QueueSize != 512 || ac.StaleAfterS != 20 || ac.HeartbeatIntervalS != 2 {
		t.Errorf("agent.settings: scrape %v queue %v stale %v heartbeat %v; want 0.5 512 20 2",
			ac.ScrapeIntervalS, ac.QueueSize, ac.StaleAfterS, ac.HeartbeatIntervalS)
	}

	typo := decodeAll(t, "typo", render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "narwhal",
		"--set-json", `core.settings={"core":{"ttft_slo":1.5}}`))
	cm = find(typo, func(c *corev1.ConfigMap) bool { return c.Data["core.yaml"] != "" })
	if _, err := service.Load([]string{"--config", write("typo.yaml", cm.Data["core.yaml"])}, getenv); err == nil || !strings.Contains(err.Error(), "ttft_slo") {
		t.Errorf("a misspelt setting: %v, want an error naming ttft_slo", err)
	}
}

// TestChartValuesSchema: values.schema.json refuses at render time a
// value the chart does not know (Helm would otherwise ignore a misspelt
// key silently: core.ttftSlos would leave the SLO at its default) and one
// out of range, naming it; the shipped values files pass it (the other
// chart tests render them).
func TestChartValuesSchema(t *testing.T) {
	h := helm(t)
	for _, c := range []struct{ set, want string }{
		{"core.ttftSlos=1.5", "ttftSlos"},
		{"core.ttftSLOS=0", "ttftSLOS"},
		{"core.tpotSLOS=0.1s", "tpotSLOS"},
		{"agent.liveness=bpf", "liveness"},
		{"roles.preset=llmd", "preset"},
		{"engines.pools[0].name=a,engines.pools[0].method=move", "method"},
		{"serviceMonitor.enable=true", "enable"},
	} {
		cmd := exec.Command(h[0], append(h[1:], "template", "n", "../charts/narwhal", "--set", c.set)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "schema") || !strings.Contains(string(out), c.want) {
			t.Errorf("--set %s: err %v, output %q; want a schema error naming %s", c.set, err, firstLine(out), c.want)
		}
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// TestChartDisruptionBudget: the core's PodDisruptionBudget always lets
// one replica be evicted (a budget that allows none blocks every node
// drain): none at one replica, an integer minAvailable kept below the
// replicas, a percentage passed through.
func TestChartDisruptionBudget(t *testing.T) {
	h := helm(t)
	for _, c := range []struct {
		set  string
		want string // "" no budget
	}{
		{"core.replicas=1", ""},
		{"core.replicas=2", "1"},
		{"core.replicas=3", "2"},
		{"core.replicas=5,core.podDisruptionBudget.minAvailable=3", "3"},
		{"core.replicas=3,core.podDisruptionBudget.minAvailable=50%", "50%"},
	} {
		objs := decodeAll(t, c.set, render(t, h, "template", "n", "../charts/narwhal", "--set", c.set))
		pdb := find(objs, func(*policyv1.PodDisruptionBudget) bool { return true })
		got := ""
		if pdb != nil {
			got = pdb.Spec.MinAvailable.String()
		}
		if got != c.want {
			t.Errorf("--set %s: minAvailable %q, want %q", c.set, got, c.want)
		}
	}
}

// TestChartTLS: with tls.existingSecret every party speaks HTTPS to the
// core and trusts the Secret's CA: the core loads the Secret's pair from
// where the Deployment mounts it, replicas ship demand and agents report
// over https with SSL_CERT_FILE at the mounted CA, the probes use HTTPS,
// and the ServiceMonitor scrapes over https with the CA and the Service's
// name. No monitoring object carries a write token, with or without TLS
// (/metrics needs none). Without the value nothing of this renders.
func TestChartTLS(t *testing.T) {
	h := helm(t)
	type monitor struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Endpoints []map[string]any `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	monitors := func(out []byte) []monitor {
		var ms []monitor
		for _, doc := range bytes.Split(out, []byte("\n---\n")) {
			var m monitor
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatal(err)
			}
			if m.Kind == "ServiceMonitor" || m.Kind == "PodMonitor" {
				ms = append(ms, m)
			}
		}
		return ms
	}
	env := func(c corev1.Container, name string) string {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	// mountOf is the path where the pod mounts the volume of Secret secret,
	// and the keys it projects (key -> path).
	mountOf := func(spec corev1.PodSpec, secret string) (string, map[string]string) {
		for _, v := range spec.Volumes {
			if v.Secret == nil || v.Secret.SecretName != secret {
				continue
			}
			items := map[string]string{}
			for _, it := range v.Secret.Items {
				items[it.Key] = it.Path
			}
			for _, m := range spec.Containers[0].VolumeMounts {
				if m.Name == v.Name {
					return m.MountPath, items
				}
			}
		}
		return "", nil
	}

	for _, tc := range []struct {
		name, set string
		tls       bool
	}{
		{"plain", "auth.existingSecret=tok,serviceMonitor.enabled=true", false},
		{"tls", "auth.existingSecret=tok,serviceMonitor.enabled=true,tls.existingSecret=narwhal-tls", true},
	} {
		out := render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "narwhal", "--set", tc.set)
		objs := decodeAll(t, tc.name, out)
		checkConfigs(t, objs, "narwhal", "narwhal.io/role")
		core := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["core.yaml"] != "" })
		write := tempWriter(t)
		cfg, err := service.Load([]string{"--config", write("core.yaml", core.Data["core.yaml"])}, coreEnv(write, "narwhal", core))
		if err != nil {
			t.Fatalf("%s: core.yaml: %v", tc.name, err)
		}
		t.Setenv("NODE_NAME", "gpu-node-1")
		ag := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["agent.yaml"] != "" })
		ac, err := agent.LoadConfig(write("agent.yaml", ag.Data["agent.yaml"]))
		if err != nil {
			t.Fatalf("%s: agent.yaml: %v", tc.name, err)
		}
		dep := find(objs, func(d *appsv1.Deployment) bool { return d.Name == "narwhal-core" })
		ds := find(objs, func(*appsv1.DaemonSet) bool { return true })
		coreC, agentC := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0]
		probes := []*corev1.Probe{coreC.ReadinessProbe, coreC.LivenessProbe}
		ms := monitors(out)
		if len(ms) != 2 {
			t.Fatalf("%s: %d monitors, want a ServiceMonitor and a PodMonitor", tc.name, len(ms))
		}
		for _, m := range ms {
			for _, ep := range m.Spec.Endpoints {
				if _, ok := ep["authorization"]; ok {
					t.Errorf("%s: %s sends a credential to /metrics: %v", tc.name, m.Kind, ep)
				}
			}
		}
		sm := ms[slices.IndexFunc(ms, func(m monitor) bool { return m.Kind == "ServiceMonitor" })].Spec.Endpoints[0]

		if !tc.tls {
			if cfg.TLS.CertFile != "" || !strings.HasPrefix(cfg.Kubernetes.DemandURL, "http://") || !strings.HasPrefix(ac.CoreURL, "http://") ||
				env(coreC, "SSL_CERT_FILE") != "" || env(agentC, "SSL_CERT_FILE") != "" || sm["scheme"] != nil {
				t.Fatalf("plain: TLS rendered: cert %q demand %q agent %q ssl %q/%q scheme %v", cfg.TLS.CertFile, cfg.Kubernetes.DemandURL,
					ac.CoreURL, env(coreC, "SSL_CERT_FILE"), env(agentC, "SSL_CERT_FILE"), sm["scheme"])
			}
			for _, p := range probes {
				if p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP {
					t.Fatalf("plain: probe scheme %q", p.HTTPGet.Scheme)
				}
			}
			continue
		}
		dir, items := mountOf(dep.Spec.Template.Spec, "narwhal-tls")
		if dir == "" || cfg.TLS.CertFile != dir+"/"+items["tls.crt"] || cfg.TLS.KeyFile != dir+"/"+items["tls.key"] {
			t.Fatalf("tls: core loads %q, %q; the Secret is mounted at %q with %v", cfg.TLS.CertFile, cfg.TLS.KeyFile, dir, items)
		}
		if got := env(coreC, "SSL_CERT_FILE"); got != dir+"/"+items["ca.crt"] {
			t.Fatalf("tls: core SSL_CERT_FILE %q; the CA is at %s/%s", got, dir, items["ca.crt"])
		}
		adir, aitems := mountOf(ds.Spec.Template.Spec, "narwhal-tls")
		if got := env(agentC, "SSL_CERT_FILE"); adir == "" || got != adir+"/"+aitems["ca.crt"] || aitems["tls.key"] != "" {
			t.Fatalf("tls: agent SSL_CERT_FILE %q; mounted at %q with %v (the key must not reach agents)", got, adir, aitems)
		}
		if !strings.HasPrefix(cfg.Kubernetes.DemandURL, "https://narwhal-core-leader.narwhal.svc:") || !strings.HasPrefix(ac.CoreURL, "https://narwhal-core-leader.narwhal.svc:") {
			t.Fatalf("tls: demand_url %q, agent core_url %q; want https to the leader Service", cfg.Kubernetes.DemandURL, ac.CoreURL)
		}
		for _, p := range probes {
			if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Fatalf("tls: probe scheme %q, want HTTPS", p.HTTPGet.Scheme)
			}
		}
		tc, _ := sm["tlsConfig"].(map[string]any)
		ca, _ := tc["ca"].(map[string]any)
		sec, _ := ca["secret"].(map[string]any)
		if sm["scheme"] != "https" || tc["serverName"] != "narwhal-core.narwhal.svc" || sec["name"] != "narwhal-tls" || sec["key"] != "ca.crt" {
			t.Fatalf("tls: ServiceMonitor endpoint %v", sm)
		}
	}
}

// TestChartPriorityClasses: core.priorityClassName sets the core pods'
// PriorityClass (none by default); agents run as system-node-critical
// whatever it is (an evicted agent marks its node's engines down).
func TestChartPriorityClasses(t *testing.T) {
	h := helm(t)
	for _, tc := range []struct{ set, want string }{
		{"auth.existingSecret=tok", ""},
		{"auth.existingSecret=tok,core.priorityClassName=narwhal-high", "narwhal-high"},
	} {
		objs := decodeAll(t, tc.set, render(t, h, "template", "narwhal", "../charts/narwhal", "-n", "narwhal", "--set", tc.set))
		dep := find(objs, func(d *appsv1.Deployment) bool { return d.Name == "narwhal-core" })
		ds := find(objs, func(*appsv1.DaemonSet) bool { return true })
		if got := dep.Spec.Template.Spec.PriorityClassName; got != tc.want {
			t.Errorf("--set %s: core priorityClassName %q, want %q", tc.set, got, tc.want)
		}
		if got := ds.Spec.Template.Spec.PriorityClassName; got != "system-node-critical" {
			t.Errorf("--set %s: agent priorityClassName %q, want system-node-critical", tc.set, got)
		}
	}
}

// TestChartExtProc: core.extproc.enabled (on in the llm-d preset) makes
// every core pod serve Envoy's ext_proc filter: extproc.listen in
// core.yaml as narwhal-core loads it, a container port and a port named
// extproc on the core's Service; off by default, none of them.
func TestChartExtProc(t *testing.T) {
	h := helm(t)
	for _, tc := range []struct {
		name   string
		args   []string
		listen string
	}{
		{"default", nil, ""},
		{"llm-d preset", []string{"-f", "../charts/narwhal/values-llm-d.yaml"}, ":9002"},
		{"own port", []string{"--set", "core.extproc.enabled=true,core.extproc.port=9100"}, ":9100"},
	} {
		args := append([]string{"template", "narwhal", "../charts/narwhal", "-n", "narwhal"}, tc.args...)
		objs := decodeAll(t, tc.name, render(t, h, args...))
		cm := find(objs, func(c *corev1.ConfigMap) bool { return c.Data["core.yaml"] != "" })
		write := tempWriter(t)
		cfg, err := service.Load([]string{"--config", write("core.yaml", cm.Data["core.yaml"])}, coreEnv(write, "narwhal", cm))
		if err != nil {
			t.Fatalf("%s: core.yaml: %v", tc.name, err)
		}
		if cfg.ExtProc.Listen != tc.listen {
			t.Errorf("%s: extproc.listen %q, want %q", tc.name, cfg.ExtProc.Listen, tc.listen)
		}
		dep := find(objs, func(d *appsv1.Deployment) bool { return d.Name == "narwhal-core" })
		var port int32
		for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
			if p.Name == "extproc" {
				port = p.ContainerPort
			}
		}
		svc := find(objs, func(s *corev1.Service) bool { return s.Name == "narwhal-core" })
		var svcPort int32
		for _, p := range svc.Spec.Ports {
			if p.Name == "extproc" && p.TargetPort.String() == "extproc" {
				svcPort = p.Port
			}
		}
		want := int32(0)
		if tc.listen != "" {
			n, _ := strconv.Atoi(strings.TrimPrefix(tc.listen, ":"))
			want = int32(n)
		}
		if port != want || svcPort != want {
			t.Errorf("%s: container port %d, Service port %d; want %d", tc.name, port, svcPort, want)
		}
	}
}
