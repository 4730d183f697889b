package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/narwhal-io/narwhal/service/servicetest"
)

// The config tests' file and environment helpers (servicetest's, which
// service/kube's tests use too).
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	return servicetest.WriteFile(t, name, content)
}

var envOf = servicetest.EnvOf

// Precedence: flags > environment > file > defaults, per field.
func TestLoadPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
listen: "127.0.0.1:9001"
admin_listen: "127.0.0.1:9009"
data_dir: /from/file
log_level: warn
auth:
  token: file-token
http:
  max_body_bytes: 1000
  max_line_bytes: 100
events:
  max_tokens: 500
engines:
  - {id: e1, node: n1, model: m, gpu: H100, role: decode, kv_capacity_tokens: 1000}
`)
	env := map[string]string{
		"NARWHAL_CONFIG":              file,
		"NARWHAL_DATA_DIR":            "/from/env",
		"NARWHAL_HTTP_MAX_BODY_BYTES": "2000",
		"NARWHAL_LOG_LEVEL":           "debug",
		"NARWHAL_AGENTS_REQUIRED":     "false",
		"NARWHAL_ADMIN_LISTEN":        "",
		"NARWHAL_AUTH_AGENT_TOKEN":    "agent-token",
	}
	cfg, err := Load([]string{"--log_level=error", "--events.max_tokens", "700", "--agents.required"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	f := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Fatalf("unexpected %s; got %v; want %v", name, got, want)
		}
	}
	f("listen (file)", cfg.Listen, "127.0.0.1:9001")
	f("data_dir (env over file)", cfg.DataDir, "/from/env")
	f("http.max_body_bytes (env over file)", cfg.HTTP.MaxBodyBytes, int64(2000))
	f("http.max_line_bytes (file)", cfg.HTTP.MaxLineBytes, int64(100))
	f("log_level (flag over env)", cfg.LogLevel, "error")
	f("events.max_tokens (flag over file)", cfg.Events.MaxTokens, int64(700))
	f("events.max_past_s (default)", cfg.Events.MaxPastS, 600.0)
	f("auth.token (file)", cfg.Auth.Token, "file-token")
	f("agents.required (bare bool flag over env)", cfg.Agents.Required, true)
	f("admin_listen (env set empty over file)", cfg.AdminListen, "")
	f("engines", len(cfg.Engines), 1)
	f("engine role", cfg.Engines[0].Engine().Role.String(), "decode")

	// --config beats NARWHAL_CONFIG.
	other := writeFile(t, "d.yaml", "listen: \"127.0.0.1:9002\"\nauth: {allow_unauthenticated: true}\n")
	cfg, err = Load([]string{"--config", other}, envOf(map[string]string{"NARWHAL_CONFIG": file}))
	if err != nil {
		t.Fatal(err)
	}
	f("listen (--config file)", cfg.Listen, "127.0.0.1:9002")
}

func TestLoadErrors(t *testing.T) {
	f := func(args []string, env map[string]string, yaml string, mentions ...string) {
		t.Helper()
		if yaml != "" {
			args = append(args, "--config", writeFile(t, "c.yaml", yaml))
		}
		_, err := Load(args, envOf(env))
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Load(%v): unexpected error; got %v; want ErrConfig", args, err)
		}
		for _, m := range mentions {
			if !strings.Contains(err.Error(), m) {
				t.Fatalf("Load(%v): error %q does not mention %q", args, err, m)
			}
		}
	}
	tok := map[string]string{"NARWHAL_AUTH_TOKEN": "t"}
	f([]string{"--http.max_body_bytes=-1"}, tok, "", "http.max_body_bytes must be > 0, got -1")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_AGENTS_STALE_AFTER_S": "-2"}, "", "agents.stale_after_s must be > 0, got -2")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_EVENTS_MAX_PAST_S": "NaN"}, "", "NARWHAL_EVENTS_MAX_PAST_S", "events.max_past_s must be a finite number")
	f([]string{"--listen=nonsense"}, tok, "", `listen must be host:port, got "nonsense"`)
	f([]string{"--extproc.listen=9002"}, tok, "", `extproc.listen must be host:port, got "9002"`)
	f([]string{"--extproc.listen=:8080"}, tok, "", `extproc.listen must differ from listen and admin_listen, got ":8080"`)
	f(nil, tok, "extproc: {listen: \":9002\", max_streams: 0}\n", "extproc.max_connections and extproc.max_streams must be positive", "got 256 and 0")
	f([]string{"--extproc.max_streams=4294967296"}, tok, "", "max_streams at most 4294967295")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_EXTPROC_MAX_MESSAGE_BYTES": "100"}, "", "extproc.max_message_bytes must be in [65536, 1073741824], got 100")
	f(nil, nil, "listen: \":1\"\n", "auth.token must be set")
	f(nil, tok, "listen: \":1\"\nlisen: \":2\"\n", "field lisen not found")
	f(nil, tok, "http: {max_body_bytes: lots}\n", "cannot unmarshal")
	f(nil, tok, "tls: {cert_file: a.pem}\n", "tls.cert_file and tls.key_file must be set together")
	f(nil, tok, "engines: [{id: a, role: sideways}, {id: a, role: decode}]\n", `engines[0].role must be prefill or decode, got "sideways"`, `engines[1].id must be unique, got duplicate "a"`)
	f(nil, tok, "core: {step_s: -1}\n", "core.step_s must be > 0 and <= 31536000, got -1")
	f([]string{"--core.controller.cooldown_s=-1"}, tok, "", "core.controller.cooldown_s must be >= 0, got -1")
	f(nil, tok, "core: {controller: {cooldown_z: 1}}\n", "field cooldown_z not found")
	f([]string{"--events.idempotency_max_keys=0"}, tok, "", "events.idempotency_max_keys must be > 0, got 0")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_EVENTS_IDEMPOTENCY_RETENTION_S": "-1"}, "", "events.idempotency_retention_s must be >= 0")
	f(nil, tok, "events: {idempotency_retention_s: 1e9}\n", "events.idempotency_retention_s must be <= 31536000")
	f([]string{"--bogus=1"}, tok, "", "flag provided but not defined: -bogus")
	f([]string{"--engines=x"}, tok, "", "flag provided but not defined")
	f([]string{"--agents.required=maybe"}, tok, "", "agents.required must be a boolean")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN_FILE": "/does/not/exist"}, "", "auth.token_file must be a readable file holding a token", "/does/not/exist")
	f(nil, tok, "listen: \":1\"\n---\nlisten: \":2\"\n", "more than one YAML document")
	// A setting a release removed is refused with why, from a file, the
	// environment or a flag.
	f(nil, tok, "core: {controller: {burst_pressure: 10}}\n", "sets core.controller.burst_pressure: removed", "delete it")
	f(nil, map[string]string{"NARWHAL_AUTH_TOKEN": "t", "NARWHAL_CORE_CONTROLLER_BURST_ARRIVALS": "60"}, "", "env NARWHAL_CORE_CONTROLLER_BURST_ARRIVALS sets core.controller.burst_arrivals: removed")
	f([]string{"--core.controller.burst_pressure=10"}, tok, "", "flag --core.controller.burst_pressure: removed")
}

func TestTokenFile(t *testing.T) {
	p := writeFile(t, "tok", "  abc123\n")
	cfg, err := Load([]string{"--auth.token_file", p}, envOf(map[string]string{"NARWHAL_AUTH_AGENT_TOKEN": "agent"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Auth.Token != "abc123" {
		t.Fatalf("unexpected token; got %q; want %q", cfg.Auth.Token, "abc123")
	}
}

func TestUsageListsEverySetting(t *testing.T) {
	var b strings.Builder
	Usage(&b)
	for _, m := range []string{"--listen  (env NARWHAL_LISTEN)", "--http.max_line_bytes  (env NARWHAL_HTTP_MAX_LINE_BYTES) default 4096", "--core.step_s  (env NARWHAL_CORE_STEP_S)"} {
		if !strings.Contains(b.String(), m) {
			t.Fatalf("usage lacks %q:\n%s", m, b.String())
		}
	}
}

// Issue 16 defect 10: a token given as a flag (visible in the process
// list) is refused; routers and agents need different tokens.
func TestTokenFlagIsRefusedAndTokensAreSplit(t *testing.T) {
	for _, flag := range []string{"--auth.token=s3cret", "--auth.agent_token=s3cret"} {
		_, err := Load([]string{flag}, envOf(map[string]string{"NARWHAL_AUTH_TOKEN": "a", "NARWHAL_AUTH_AGENT_TOKEN": "b"}))
		if err == nil || !strings.Contains(err.Error(), "process list") {
			t.Fatalf("%s: %v; want refused as visible in the process list", flag, err)
		}
	}
	_, err := Load(nil, envOf(map[string]string{"NARWHAL_AUTH_TOKEN": "a"}))
	if err == nil || !strings.Contains(err.Error(), "auth.agent_token must be set") {
		t.Fatalf("no agent token with agents.required: %v; want refused", err)
	}
	_, err = Load(nil, envOf(map[string]string{"NARWHAL_AUTH_TOKEN": "a", "NARWHAL_AUTH_AGENT_TOKEN": "a"}))
	if err == nil || !strings.Contains(err.Error(), "must differ") {
		t.Fatalf("one token for both: %v; want refused", err)
	}
	cfg, err := Load(nil, envOf(map[string]string{"NARWHAL_AUTH_TOKEN_FILE": writeFile(t, "r", "router\n"), "NARWHAL_AUTH_AGENT_TOKEN_FILE": writeFile(t, "a", "agent\n")}))
	if err != nil || cfg.Auth.Token != "router" || cfg.Auth.AgentToken != "agent" {
		t.Fatalf("tokens from files: %q %q %v", cfg.Auth.Token, cfg.Auth.AgentToken, err)
	}
}

// A duration too large for a time.Duration (seconds × 1e9 past int64) is
// refused by name at Load: it used to pass, then panic the staleness
// sweep (agents.sweep_s: NewTicker of a negative interval), turn a
// timeout off (http.*: a negative duration), or be refused only after
// data_dir's journal was opened, under the core's own name
// (http.read_timeout_s as "pending_timeout_s").
func TestLoadRefusesDurationsPastAYear(t *testing.T) {
	for _, path := range []string{
		"agents.sweep_s", "agents.stale_after_s", "agents.forget_after_s", "agents.max_epoch_ahead_s",
		"journal.retry_s", "http.read_header_timeout_s", "http.read_timeout_s",
		"http.write_timeout_s", "http.idle_timeout_s", "http.shutdown_timeout_s",
		"events.max_past_s", "events.max_future_s", "events.max_request_s", "events.pending_timeout_s",
	} {
		for _, v := range []string{"1e300", "31536001"} {
			_, err := Load([]string{"--auth.allow_unauthenticated", "--" + path + "=" + v}, envOf(nil))
			want := path + " must be <= 31536000, got " + map[string]string{"1e300": "1e+300", "31536001": "3.1536001e+07"}[v]
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
				t.Fatalf("--%s=%s: unexpected error; got %v; want ErrConfig mentioning %q", path, v, err, want)
			}
			if strings.Count(err.Error(), path) != 1 {
				t.Fatalf("--%s=%s: unexpected error; got %v; want %s named once", path, v, err, path)
			}
		}
	}
	// From the file, +Inf is refused by the same rule.
	_, err := Load([]string{"--config", writeFile(t, "c.yaml", "auth: {allow_unauthenticated: true}\nagents: {sweep_s: .inf}\n")}, envOf(nil))
	if want := "agents.sweep_s must be <= 31536000, got +Inf"; !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
		t.Fatalf("sweep_s .inf: unexpected error; got %v; want ErrConfig mentioning %q", err, want)
	}
	// A year is still accepted.
	if _, err := Load([]string{"--auth.allow_unauthenticated", "--agents.forget_after_s=31536000"}, envOf(nil)); err != nil {
		t.Fatalf("forget_after_s=31536000: unexpected error; got %v; want nil", err)
	}
}
