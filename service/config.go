package service

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
)

// Config is the whole service configuration. Every leaf field is settable
// from the YAML file (its yaml tag path), the environment
// (NARWHAL_<PATH>, dots as underscores, upper case) and a flag
// (--<path>); precedence flags > environment > file > defaults. Lists
// (engines) come from the file only.
type Config struct {
	// Listen is the API listener, host:port.
	Listen string `yaml:"listen" json:"listen"`
	// AdminListen is the pprof listener; empty (the default) disables it. It holds at most 16 connections, reads request bodies up to 64 KiB, and serves profiles and traces of at most 60 s.
	AdminListen string `yaml:"admin_listen" json:"admin_listen"`
	// DataDir holds the decision journal (journal.jsonl) and the
	// controller state (state.json); empty keeps both in memory only.
	DataDir string `yaml:"data_dir" json:"data_dir"`
	// LogLevel is debug, info, warn or error (logs are JSON on stderr).
	LogLevel string `yaml:"log_level" json:"log_level"`

	Auth    AuthConfig    `yaml:"auth" json:"auth"`
	TLS     TLSConfig     `yaml:"tls" json:"tls"`
	HTTP    HTTPConfig    `yaml:"http" json:"http"`
	Events  EventsConfig  `yaml:"events" json:"events"`
	Agents  AgentsConfig  `yaml:"agents" json:"agents"`
	Journal JournalConfig `yaml:"journal" json:"journal"`
	Engines []EngineSeed  `yaml:"engines" json:"engines"`
	Core    coreConfig    `yaml:"core" json:"core"`
	// Kubernetes runs the replica as one of N behind a Lease (see
	// KubernetesConfig and kube.go).
	Kubernetes KubernetesConfig `yaml:"kubernetes" json:"kubernetes"`
	// Profiles: measured latency profiles (core/profile/README.md).
	Profiles ProfilesConfig `yaml:"profiles" json:"profiles"`
	// ExtProc serves Envoy's external processing filter (service/extproc).
	ExtProc ExtProcConfig `yaml:"extproc" json:"extproc"`
}

// ExtProcConfig: a gateway's Envoy as the source of request lifecycles,
// for gateways whose router posts no events (llm-d's scheduler): the
// gateway runs Envoy's ext_proc filter in observability mode against this
// listener, and each HTTP request's stream is reported to the core as
// /v1/events would be (docs/llm-d.md).
type ExtProcConfig struct {
	// Listen is the gRPC listener (host:port) for Envoy's ext_proc
	// filter; empty (the default) serves none. A stream carries the
	// routers' token as "authorization: Bearer <token>" metadata (the
	// filter's grpc_service initial_metadata); with tls.cert_file the
	// listener speaks TLS with the API's certificate.
	Listen string `yaml:"listen" json:"listen"`
	// MaxConnections caps open ext_proc connections (Envoy holds one
	// or a few per worker thread); one beyond it is closed at once.
	MaxConnections int64 `yaml:"max_connections" json:"max_connections"`
	// MaxStreams caps the streams open at once on one connection: one
	// per HTTP request in flight through that Envoy.
	MaxStreams int64 `yaml:"max_streams" json:"max_streams"`
	// MaxMessageBytes bounds one message from Envoy (a body chunk); use
	// the filter's STREAMED body modes, whose chunks are far smaller.
	MaxMessageBytes int64 `yaml:"max_message_bytes" json:"max_message_bytes"`
}

// ProfilesConfig: where latency profiles come from besides the built-in
// ones and the geometry prior.
type ProfilesConfig struct {
	// File is a profile file (JSON, core/profile/README.md); its
	// profiles take precedence over the built-in ones. Also --profiles.
	File string `yaml:"file" json:"file"`
}

// AuthConfig: bearer tokens for writes. Routers (events, demand deltas)
// and agents (agent reports) hold different tokens: neither may write the
// other's endpoint. A token comes from its file or the environment
// (NARWHAL_AUTH_TOKEN, NARWHAL_AUTH_AGENT_TOKEN); a flag would show it in
// the process list and is refused.
type AuthConfig struct {
	// Token is the routers' bearer token. Prefer TokenFile or
	// NARWHAL_AUTH_TOKEN over writing it into the config file.
	Token string `yaml:"token" json:"-"`
	// TokenFile is a file holding the routers' token (a mounted Secret):
	// one token per line, each accepted (the new and the old one during a
	// rotation), read again every token_reload_s.
	TokenFile string `yaml:"token_file" json:"token_file"`
	// AgentToken is the agents' bearer token (POST /v1/agent/reports),
	// required while agents.required; it must differ from Token.
	AgentToken string `yaml:"agent_token" json:"-"`
	// AgentTokenFile is a file holding the agents' token (a mounted
	// Secret), read as token_file is.
	AgentTokenFile string `yaml:"agent_token_file" json:"agent_token_file"`
	// TokenReloadS is how often the token files are read again, so that
	// a rotated Secret is accepted without a restart (0: read at start
	// only).
	TokenReloadS float64 `yaml:"token_reload_s" json:"token_reload_s"`
	// AllowUnauthenticated must be set explicitly to run writes without
	// a token (tests, demos).
	AllowUnauthenticated bool `yaml:"allow_unauthenticated" json:"allow_unauthenticated"`
}

// TLSConfig enables TLS on the API listener when both files are set.
type TLSConfig struct {
	// CertFile is the PEM certificate chain the API listener presents
	// (with KeyFile; one without the other is refused at start).
	CertFile string `yaml:"cert_file" json:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file" json:"key_file"`
	// ReloadS is how often both files are read again, so that a renewed
	// certificate (cert-manager) is served without a restart (0: read at
	// start only).
	ReloadS float64 `yaml:"reload_s" json:"reload_s"`
}

// HTTPConfig: server timeouts and request size limits.
type HTTPConfig struct {
	// ReadHeaderTimeoutS bounds reading a request's headers; a client
	// slower than this is disconnected.
	ReadHeaderTimeoutS float64 `yaml:"read_header_timeout_s" json:"read_header_timeout_s"`
	// ReadTimeoutS bounds reading a whole request, headers and body.
	ReadTimeoutS float64 `yaml:"read_timeout_s" json:"read_timeout_s"`
	// WriteTimeoutS bounds a response, from the end of the request's
	// headers to the last byte written.
	WriteTimeoutS float64 `yaml:"write_timeout_s" json:"write_timeout_s"`
	// IdleTimeoutS: a keep-alive connection with no request this long is
	// closed.
	IdleTimeoutS float64 `yaml:"idle_timeout_s" json:"idle_timeout_s"`
	// ShutdownTimeoutS: on SIGTERM or SIGINT the listeners stop
	// accepting, and requests in progress get this long to finish.
	ShutdownTimeoutS float64 `yaml:"shutdown_timeout_s" json:"shutdown_timeout_s"`
	// MaxBodyBytes bounds one POST body (events and agent reports).
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxLineBytes bounds one event line.
	MaxLineBytes int64 `yaml:"max_line_bytes" json:"max_line_bytes"`
	// MaxConnections caps open API connections; one beyond it is answered
	// 503 and closed at once. Lowered at start to keep 256 descriptors of
	// RLIMIT_NOFILE for persistence.
	MaxConnections int64 `yaml:"max_connections" json:"max_connections"`
	// MaxInflightBodyBytes caps the body bytes of write requests being
	// read at once (each reserves its Content-Length, or max_body_bytes
	// when unknown); a request that does not fit is answered 503.
	MaxInflightBodyBytes int64 `yaml:"max_inflight_body_bytes" json:"max_inflight_body_bytes"`
}

// EventsConfig: what an event may say (see Limits).
type EventsConfig struct {
	// MaxTokens bounds every token count an event carries (estimated,
	// input, requested and produced output); a larger one is refused.
	MaxTokens int64 `yaml:"max_tokens" json:"max_tokens"`
	// MaxPastS: an event stamped (ts_ns) more than this before the
	// server's clock is refused.
	MaxPastS float64 `yaml:"max_past_s" json:"max_past_s"`
	// MaxFutureS: an event stamped more than this after the server's
	// clock is refused; on the leader it also bounds the demand deltas
	// replicas ship (a skewed router clock cannot move the newest bucket).
	// The core refuses records more than core.future_tolerance_s ahead
	// too, so the smaller of the two is the limit a router's clock has.
	MaxFutureS float64 `yaml:"max_future_s" json:"max_future_s"`
	// MaxRequestS: an event whose request arrived (arrival_ns) more than
	// this before the event's own stamp is refused.
	MaxRequestS float64 `yaml:"max_request_s" json:"max_request_s"`
	// PendingTimeoutS: an offer_started never followed by sized, refused
	// or offer_abandoned is ended after this long and counted as an
	// unsized observation (core pending_timeout_s). 0: http.read_timeout_s,
	// after which the server has given up reading the body anyway.
	PendingTimeoutS float64 `yaml:"pending_timeout_s" json:"pending_timeout_s"`
	// IdempotencyMaxKeys bounds the Idempotency-Key values of POST
	// /v1/events batches retained; past it the oldest applied keys are
	// forgotten first (a retry of one is then applied again). The store
	// also stays within 32 MiB of keys and stored replies.
	IdempotencyMaxKeys int `yaml:"idempotency_max_keys" json:"idempotency_max_keys"`
	// IdempotencyRetentionS: a batch's Idempotency-Key is retained this
	// long after its first request (a repeat within it is answered from
	// the store, nothing applied). 0: events.max_past_s +
	// events.max_future_s, so that a retry after the key expired is
	// refused line by line as too old rather than counted twice.
	IdempotencyRetentionS float64 `yaml:"idempotency_retention_s" json:"idempotency_retention_s"`
}

// AgentsConfig: the agents' ingest endpoint and readiness.
type AgentsConfig struct {
	// Required: /readyz is ready only while some agent reported within
	// StaleAfterS. Set false to run without agents (static engines).
	Required bool `yaml:"required" json:"required"`
	// StaleAfterS: the engines of a node whose agent has not reported
	// for this long are marked not live (the controller neither scores
	// nor moves them); /readyz counts only reports within it.
	StaleAfterS float64 `yaml:"stale_after_s" json:"stale_after_s"`
	// SweepS is how often nodes that stopped reporting are marked not live.
	SweepS float64 `yaml:"sweep_s" json:"sweep_s"`
	// MaxNodes bounds the nodes the registry tracks: a report from a new
	// node beyond it is refused.
	MaxNodes int `yaml:"max_nodes" json:"max_nodes"`
	// MaxEngines bounds the engines the registry tracks: a new engine
	// beyond it is refused.
	MaxEngines int `yaml:"max_engines" json:"max_engines"`
	// ForgetAfterS: a node silent this long is forgotten; and, without
	// kubernetes.enabled, an engine that no agent has listed and that has
	// not been live for this long leaves the engine table, unless the
	// engines list names it (engine ids follow pod names, so a fleet that
	// replaces pods would otherwise grow the table without a bound).
	ForgetAfterS float64 `yaml:"forget_after_s" json:"forget_after_s"`
	// MaxEpochAheadS: a report whose epoch (the agent's start time) lies
	// further ahead of the core's clock is refused, never adopted.
	MaxEpochAheadS float64 `yaml:"max_epoch_ahead_s" json:"max_epoch_ahead_s"`
}

// JournalConfig: the decision journal in data_dir (see
// controller.OpenJournal).
type JournalConfig struct {
	// MaxSegmentBytes: the journal is rotated before a record would take
	// the active file past this size.
	MaxSegmentBytes int64 `yaml:"max_segment_bytes" json:"max_segment_bytes"`
	// KeepSegments: rotated journal files retained.
	KeepSegments int `yaml:"keep_segments" json:"keep_segments"`
	// RetryS: how often failed journal writes and state saves are retried.
	RetryS float64 `yaml:"retry_s" json:"retry_s"`
}

func (j JournalConfig) options(ring int, logger *slog.Logger) controller.JournalOptions {
	return controller.JournalOptions{MaxBytes: j.MaxSegmentBytes, Keep: j.KeepSegments, Ring: ring,
		RetryEvery: time.Duration(j.RetryS * float64(time.Second)), Logger: logger}
}

// EngineSeed is a static engine registered at start (clusters without
// agents, demos, tests).
type EngineSeed struct {
	ID   string `yaml:"id" json:"id"`     // unique engine id, as routers name it in admitted events
	Node string `yaml:"node" json:"node"` // the node it runs on
	// Model and GPU select the latency profile (e.g. facebook/opt-13b, A100-80GB).
	Model string `yaml:"model" json:"model"`
	GPU   string `yaml:"gpu" json:"gpu"`
	Role  string `yaml:"role" json:"role"` // initial role: prefill or decode
	// KVCapacityTokens is the physical KV cache limit in tokens (0 unknown).
	KVCapacityTokens int64 `yaml:"kv_capacity_tokens" json:"kv_capacity_tokens"`
}

// Engine converts the seed to a live, serving engine.
func (e EngineSeed) Engine() controller.Engine {
	r, _ := controller.ParseRole(e.Role)
	return controller.Engine{ID: e.ID, Node: e.Node, Model: e.Model, GPU: e.GPU, Role: r,
		State: controller.StateServing, Live: true, KVCapacityTokens: e.KVCapacityTokens}
}

// DefaultConfig returns the defaults every source overrides.
func DefaultConfig() Config {
	l := DefaultLimits()
	return Config{
		Listen:   ":8080",
		LogLevel: "info",
		HTTP: HTTPConfig{
			ReadHeaderTimeoutS: 5, ReadTimeoutS: 30, WriteTimeoutS: 30, IdleTimeoutS: 30,
			ShutdownTimeoutS: 10, MaxBodyBytes: 8 << 20, MaxLineBytes: 4 << 10,
			MaxConnections: 4096, MaxInflightBodyBytes: 128 << 20,
		},
		Events: EventsConfig{
			MaxTokens: l.MaxTokens, MaxPastS: float64(l.MaxPastNs) / 1e9,
			MaxFutureS: float64(l.MaxFutureNs) / 1e9, MaxRequestS: float64(l.MaxRequestNs) / 1e9,
			IdempotencyMaxKeys: 65536,
		},
		Agents: AgentsConfig{Required: true, StaleAfterS: 15, SweepS: 1,
			MaxNodes: 4096, MaxEngines: 16384, ForgetAfterS: 600, MaxEpochAheadS: 600},
		Auth:       AuthConfig{TokenReloadS: 10},
		TLS:        TLSConfig{ReloadS: 10},
		Journal:    JournalConfig{MaxSegmentBytes: 32 << 20, KeepSegments: 8, RetryS: 1},
		Core:       defaultCoreConfig(),
		Kubernetes: defaultKubernetesConfig(),
		ExtProc:    ExtProcConfig{MaxConnections: 256, MaxStreams: 8192, MaxMessageBytes: 4 << 20},
	}
}

// Limits returns the event limits in nanoseconds.
func (c *Config) Limits() Limits {
	return Limits{
		MaxTokens:    c.Events.MaxTokens,
		MaxPastNs:    int64(c.Events.MaxPastS * 1e9),
		MaxFutureNs:  int64(c.Events.MaxFutureS * 1e9),
		MaxRequestNs: int64(c.Events.MaxRequestS * 1e9),
	}
}

// idempotencyRetentionNs is events.idempotency_retention_s in ns, 0
// meaning the events' own window (max_past + max_future): an event a
// router stamped when it first posted the batch is too old to be
// accepted once its key has expired.
func idempotencyRetentionNs(retentionS float64, l Limits) int64 {
	if retentionS > 0 {
		return int64(retentionS * 1e9)
	}
	return l.MaxPastNs + l.MaxFutureNs
}

// shared reports whether a and b have a token in common.
func shared(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid configuration")

// Validate checks every field; the error names field, value and rule, e.g.
// "http.max_body_bytes must be > 0, got -1". It also loads the token file.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	hostPort := func(name, v string, optional bool) {
		if v == "" && optional {
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			bad("%s must be host:port, got %q", name, v)
		}
	}
	hostPort("listen", c.Listen, false)
	hostPort("admin_listen", c.AdminListen, true)
	if c.AdminListen != "" && c.AdminListen == c.Listen {
		bad("admin_listen must differ from listen, got %q", c.AdminListen)
	}
	hostPort("extproc.listen", c.ExtProc.Listen, true)
	// (port 0 on both picks two free ports)
	if _, port, _ := net.SplitHostPort(c.ExtProc.Listen); port != "0" && c.ExtProc.Listen != "" &&
		(c.ExtProc.Listen == c.Listen || c.ExtProc.Listen == c.AdminListen) {
		bad("extproc.listen must differ from listen and admin_listen, got %q", c.ExtProc.Listen)
	}
	if c.ExtProc.MaxConnections < 1 || c.ExtProc.MaxStreams < 1 || c.ExtProc.MaxStreams > math.MaxUint32 {
		bad("extproc.max_connections and extproc.max_streams must be positive (max_streams at most %d), got %d and %d",
			uint32(math.MaxUint32), c.ExtProc.MaxConnections, c.ExtProc.MaxStreams)
	}
	if c.ExtProc.MaxMessageBytes < 64<<10 || c.ExtProc.MaxMessageBytes > 1<<30 {
		bad("extproc.max_message_bytes must be in [65536, 1073741824], got %d", c.ExtProc.MaxMessageBytes)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level must be one of debug, info, warn, error, got %q", c.LogLevel)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.cert_file and tls.key_file must be set together, got cert_file=%q key_file=%q", c.TLS.CertFile, c.TLS.KeyFile)
	}
	// Each token file is read here (its first token kept in the token
	// field) so that a bad one stops the start; the server reads it again
	// (authtokens.go).
	clear := map[string][]string{}
	readToken := func(name string, tok, file *string) {
		if *tok != "" && *file != "" {
			bad("auth.%s and auth.%s_file are exclusive, got both", name, name)
			return
		}
		if *file == "" {
			if *tok != "" {
				clear[name] = []string{*tok}
			}
			return
		}
		_, toks, err := readTokenFile(*file)
		if err != nil {
			bad("auth.%s_file must be a readable file holding a token (one per line), got %q: %v", name, *file, err)
			return
		}
		*tok, clear[name] = toks[0], toks
	}
	if c.Profiles.File != "" {
		if _, err := profile.LoadFile(c.Profiles.File); err != nil {
			bad("profiles.file: %v", err)
		}
	}
	tokFile, agentFile := c.Auth.TokenFile, c.Auth.AgentTokenFile
	readToken("token", &c.Auth.Token, &c.Auth.TokenFile)
	readToken("agent_token", &c.Auth.AgentToken, &c.Auth.AgentTokenFile)
	if c.Auth.Token == "" && tokFile == "" && !c.Auth.AllowUnauthenticated {
		bad("auth.token must be set (or auth.token_file, or NARWHAL_AUTH_TOKEN), got none; set auth.allow_unauthenticated=true to run writes without a token")
	}
	if c.Auth.AgentToken == "" && agentFile == "" && c.Agents.Required && !c.Auth.AllowUnauthenticated {
		bad("auth.agent_token must be set while agents.required=true (auth.agent_token_file or NARWHAL_AUTH_AGENT_TOKEN), got none; agents and routers hold different tokens")
	}
	if shared(clear["token"], clear["agent_token"]) {
		bad("auth.agent_token must differ from auth.token, got the same token for routers and agents")
	}
	// maxSpanS bounds every duration (a year, as the core's), so that
	// seconds × 1e9 fits a time.Duration.
	const maxSpanS = 365 * 24 * 3600
	pos := func(name string, v float64) {
		switch {
		case !(v > 0):
			bad("%s must be > 0, got %v", name, v)
		case v > maxSpanS:
			bad("%s must be <= %d, got %v", name, maxSpanS, v)
		}
	}
	// zeroOr: a duration where 0 has a meaning of its own (zero).
	zeroOr := func(name string, v float64, zero string) {
		switch {
		case v < 0 || v != v:
			bad("%s must be >= 0 (0: %s), got %v", name, zero, v)
		case v > maxSpanS:
			bad("%s must be <= %d, got %v", name, maxSpanS, v)
		}
	}
	posInt := func(name string, v int64) {
		if v <= 0 {
			bad("%s must be > 0, got %d", name, v)
		}
	}
	pos("http.read_header_timeout_s", c.HTTP.ReadHeaderTimeoutS)
	pos("http.read_timeout_s", c.HTTP.ReadTimeoutS)
	pos("http.write_timeout_s", c.HTTP.WriteTimeoutS)
	pos("http.idle_timeout_s", c.HTTP.IdleTimeoutS)
	pos("http.shutdown_timeout_s", c.HTTP.ShutdownTimeoutS)
	posInt("http.max_body_bytes", c.HTTP.MaxBodyBytes)
	posInt("http.max_line_bytes", c.HTTP.MaxLineBytes)
	posInt("http.max_connections", c.HTTP.MaxConnections)
	posInt("http.max_inflight_body_bytes", c.HTTP.MaxInflightBodyBytes)
	if c.HTTP.MaxInflightBodyBytes < c.HTTP.MaxBodyBytes && c.HTTP.MaxInflightBodyBytes > 0 {
		bad("http.max_inflight_body_bytes must be >= http.max_body_bytes (%d), got %d", c.HTTP.MaxBodyBytes, c.HTTP.MaxInflightBodyBytes)
	}
	if c.HTTP.MaxLineBytes > c.HTTP.MaxBodyBytes && c.HTTP.MaxBodyBytes > 0 {
		bad("http.max_line_bytes must be <= http.max_body_bytes (%d), got %d", c.HTTP.MaxBodyBytes, c.HTTP.MaxLineBytes)
	}
	posInt("events.max_tokens", c.Events.MaxTokens)
	if c.Events.MaxTokens > buckets.MaxTokens {
		bad("events.max_tokens must be <= %d (the most the core records), got %d", buckets.MaxTokens, c.Events.MaxTokens)
	}
	pos("events.max_past_s", c.Events.MaxPastS)
	pos("events.max_future_s", c.Events.MaxFutureS)
	pos("events.max_request_s", c.Events.MaxRequestS)
	zeroOr("events.pending_timeout_s", c.Events.PendingTimeoutS, "http.read_timeout_s")
	posInt("events.idempotency_max_keys", int64(c.Events.IdempotencyMaxKeys))
	zeroOr("events.idempotency_retention_s", c.Events.IdempotencyRetentionS, "events.max_past_s + events.max_future_s")
	zeroOr("auth.token_reload_s", c.Auth.TokenReloadS, "read at start only")
	zeroOr("tls.reload_s", c.TLS.ReloadS, "read at start only")
	posInt("journal.max_segment_bytes", c.Journal.MaxSegmentBytes)
	posInt("journal.keep_segments", int64(c.Journal.KeepSegments))
	pos("journal.retry_s", c.Journal.RetryS)
	pos("agents.stale_after_s", c.Agents.StaleAfterS)
	pos("agents.sweep_s", c.Agents.SweepS)
	posInt("agents.max_nodes", int64(c.Agents.MaxNodes))
	posInt("agents.max_engines", int64(c.Agents.MaxEngines))
	pos("agents.forget_after_s", c.Agents.ForgetAfterS)
	pos("agents.max_epoch_ahead_s", c.Agents.MaxEpochAheadS)
	seen := map[string]bool{}
	for i, e := range c.Engines {
		if e.ID == "" {
			bad("engines[%d].id must not be empty, got %q", i, e.ID)
		}
		if seen[e.ID] {
			bad("engines[%d].id must be unique, got duplicate %q", i, e.ID)
		}
		seen[e.ID] = true
		if _, ok := controller.ParseRole(e.Role); !ok {
			bad("engines[%d].role must be prefill or decode, got %q", i, e.Role)
		}
		if e.KVCapacityTokens < 0 {
			bad("engines[%d].kv_capacity_tokens must be >= 0, got %d", i, e.KVCapacityTokens)
		}
	}
	if err := c.Core.Validate(); err != nil {
		// The facade says "invalid config: step_s must be ..."; name the
		// field by its full path in this file instead.
		msg := err.Error()
		for strings.HasPrefix(msg, "invalid config: ") {
			msg = strings.TrimPrefix(msg, "invalid config: ")
		}
		bad("core.%s", msg)
	}
	errs = append(errs, c.Kubernetes.validate()...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// Load builds the configuration from defaults, the YAML file (--config or
// NARWHAL_CONFIG), the environment (lookupEnv, e.g. os.LookupEnv; a
// variable set to "" sets the empty value) and the flags in args, in
// increasing precedence, then validates it. Boolean flags may omit their
// value (--agents.required). With --help or -h it returns flag.ErrHelp;
// Usage prints every setting.
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	leaves := settings(&cfg)
	fs := flag.NewFlagSet("narwhal-core", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "YAML configuration file (env NARWHAL_CONFIG)")
	type rawFlag struct{ name, value string }
	var flagged []rawFlag
	fs.Func("profiles", "profile file, same as --profiles.file", func(v string) error {
		flagged = append(flagged, rawFlag{"profiles.file", v})
		return nil
	})
	for _, s := range leaves {
		name := s.path
		record := func(v string) error {
			flagged = append(flagged, rawFlag{name, v})
			return nil
		}
		if s.v.Kind() == reflect.Bool {
			fs.BoolFunc(name, s.help(), record)
		} else {
			fs.Func(name, s.help(), record)
		}
	}
	if err := checkRemoved(nil, args, lookupEnv); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := fs.Parse(joinBoolValues(args, leaves)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: flags: %w", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected argument %q", ErrConfig, fs.Arg(0))
	}
	path := *configPath
	if path == "" {
		path, _ = lookupEnv("NARWHAL_CONFIG")
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("%w: reading config file: %w", ErrConfig, err)
		}
		if err := checkRemoved(b, nil, func(string) (string, bool) { return "", false }); err != nil {
			return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
		}
		if err := decodeYAML(b, &cfg); err != nil {
			return cfg, fmt.Errorf("%w: config file %s: %w", ErrConfig, path, err)
		}
	}
	leaves = settings(&cfg)
	byPath := map[string]setting{}
	for _, s := range leaves {
		byPath[s.path] = s
		if v, ok := lookupEnv(s.env()); ok {
			if err := s.set(v); err != nil {
				return cfg, fmt.Errorf("%w: env %s: %w", ErrConfig, s.env(), err)
			}
		}
	}
	for _, f := range flagged {
		if f.name == "auth.token" || f.name == "auth.agent_token" {
			return cfg, fmt.Errorf("%w: flag --%s puts the secret in the process list; use %s_file or NARWHAL_%s", ErrConfig,
				f.name, f.name, strings.ToUpper(strings.ReplaceAll(f.name, ".", "_")))
		}
		if err := byPath[f.name].set(f.value); err != nil {
			return cfg, fmt.Errorf("%w: flag --%s: %w", ErrConfig, f.name, err)
		}
	}
	if cfg.Kubernetes.Enabled {
		// kubernetes.namespace and pod_name default to the downward API's
		// POD_NAMESPACE and POD_NAME.
		cfg.Kubernetes.Config = cfg.Kubernetes.Config.FromEnv(func(k string) string { v, _ := lookupEnv(k); return v })
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Usage writes every setting with its flag, environment variable and
// default.
func Usage(w io.Writer) {
	cfg := DefaultConfig()
	fmt.Fprintf(w, "Usage: narwhal-core [--config FILE] [--SETTING VALUE ...]\n\n")
	fmt.Fprintf(w, "  --config FILE  (env NARWHAL_CONFIG) YAML configuration file\n")
	fmt.Fprintf(w, "  --profiles FILE  same as --profiles.file: latency profiles (core/profile/README.md)\n")
	for _, s := range settings(&cfg) {
		if s.path == "auth.token" || s.path == "auth.agent_token" {
			fmt.Fprintf(w, "  %s  (env %s or %s_file; never a flag)\n", s.path, s.env(), s.path)
			continue
		}
		fmt.Fprintf(w, "  --%s  (env %s) default %v\n", s.path, s.env(), s.v.Interface())
	}
}

// removedSettings are settings a release removed, with what to do; a
// file, variable or flag that still sets one is refused with this text
// rather than a bare "field not found", so that an upgrade says why.
var removedSettings = map[string]string{
	"core.controller.burst_pressure": "removed (the predicted-burst rule measured no gain on the scenario suite, benchmarks/slo/SUITE.md); delete it",
	"core.controller.burst_arrivals": "removed with core.controller.burst_pressure; delete it",
}

// RemovedSettings lists the removed settings (path, what to do), sorted
// by path, for the configuration reference.
func RemovedSettings() [][2]string {
	var out [][2]string
	for _, p := range slices.Sorted(maps.Keys(removedSettings)) {
		out = append(out, [2]string{p, removedSettings[p]})
	}
	return out
}

// checkRemoved refuses a removed setting in the YAML file b, the
// environment or the flags.
func checkRemoved(b []byte, args []string, lookupEnv func(string) (string, bool)) error {
	var root map[string]any
	_ = yaml.Unmarshal(b, &root) // a malformed file is reported by decodeYAML
	for _, r := range RemovedSettings() {
		path, why := r[0], r[1]
		if yamlHas(root, strings.Split(path, ".")) {
			return fmt.Errorf("config file sets %s: %s", path, why)
		}
		if env := (setting{path: path}).env(); func() bool { _, ok := lookupEnv(env); return ok }() {
			return fmt.Errorf("env %s sets %s: %s", env, path, why)
		}
		for _, a := range args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if strings.HasPrefix(a, "-") && name == path {
				return fmt.Errorf("flag --%s: %s", path, why)
			}
		}
	}
	return nil
}

func yamlHas(m map[string]any, keys []string) bool {
	for i, k := range keys {
		v, ok := m[k]
		if !ok {
			return false
		}
		if i == len(keys)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}

// decodeYAML decodes strictly: unknown fields and trailing documents are
// errors.
func decodeYAML(b []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

// setting is one leaf of Config reachable by its path.
type setting struct {
	path string
	v    reflect.Value
	// field is the struct field and owner the struct that declares it
	// (for the generated configuration reference, settingsdoc.go).
	field reflect.StructField
	owner reflect.Type
}

func (s setting) env() string {
	return "NARWHAL_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(s.path))
}

func (s setting) help() string {
	return fmt.Sprintf("%s (env %s)", s.v.Kind(), s.env())
}

func (s setting) set(raw string) error {
	switch s.v.Kind() {
	case reflect.String:
		s.v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s must be a boolean, got %q", s.path, raw)
		}
		s.v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, s.v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%s must be an integer, got %q", s.path, raw)
		}
		s.v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(raw, 10, s.v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%s must be a non-negative integer, got %q", s.path, raw)
		}
		s.v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%s must be a finite number, got %q", s.path, raw)
		}
		s.v.SetFloat(f)
	default:
		return fmt.Errorf("%s can only be set in the config file", s.path)
	}
	return nil
}

// settings lists the scalar leaves of cfg by yaml path, sorted.
func settings(cfg *Config) []setting {
	var out []setting
	walkSettings(reflect.ValueOf(cfg).Elem(), "", &out)
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func walkSettings(v reflect.Value, prefix string, out *[]setting) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := tagName(f)
		if name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Struct:
			if f.Anonymous && (f.Tag.Get("yaml") == "" || strings.Contains(f.Tag.Get("yaml"), ",inline")) {
				walkSettings(fv, prefix, out)
			} else {
				walkSettings(fv, path, out)
			}
		case reflect.String, reflect.Bool, reflect.Float32, reflect.Float64,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			*out = append(*out, setting{path: path, v: fv, field: f, owner: t})
		}
	}
}

// tagName is the field's yaml name (json tag as fallback, then the
// lower-cased field name, as yaml.v3 does).
func tagName(f reflect.StructField) string {
	for _, key := range []string{"yaml", "json"} {
		if tag, ok := f.Tag.Lookup(key); ok {
			name, _, _ := strings.Cut(tag, ",")
			if name != "" {
				return name
			}
		}
	}
	return strings.ToLower(f.Name)
}
