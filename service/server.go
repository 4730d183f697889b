package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/narwhal-io/narwhal/core/fleet"
	"github.com/narwhal-io/narwhal/internal/netcap"
	"github.com/narwhal-io/narwhal/service/ui"
)

// Decision listing limits for GET /v1/decisions.
const (
	defaultDecisionLimit = 100
	maxDecisionLimit     = 1000
)

// Option adjusts a Server.
type Option func(*Server)

// WithClock replaces the wall clock (Unix ns) for event validation, agent
// staleness and readiness; tests pass a virtual clock.
func WithClock(now func() int64) Option { return func(s *Server) { s.now = now } }

// WithoutControlLoop keeps Serve from running the core's Run loop: the
// caller drives Step itself (tests, the simulator).
func WithoutControlLoop() Option { return func(s *Server) { s.noRun = true } }

// Route is an extra endpoint mounted by WithRoutes.
type Route struct {
	// Pattern is the http.ServeMux pattern, e.g. "/v1/demand/deltas".
	Pattern string
	// Name labels the route's narwhal_http_* metrics.
	Name    string
	Handler http.Handler
	// Write puts the bearer token of every write (auth.token) in front.
	Write bool
}

// WithRoutes mounts extra endpoints (e.g. the Kubernetes leader's demand
// deltas). New fails on a pattern that is empty, malformed or taken.
func WithRoutes(rs ...Route) Option {
	return func(s *Server) { s.extraRoutes = append(s.extraRoutes, rs...) }
}

// WithCollectors registers extra metrics on /metrics.
func WithCollectors(cs ...prometheus.Collector) Option {
	return func(s *Server) { s.extraCollectors = append(s.extraCollectors, cs...) }
}

// WithLoop runs run(ctx) beside the control loop while Serve serves; ctx
// ends after the listeners shut down, and Serve waits for run to return
// before it closes the core. An error is logged.
func WithLoop(name string, run func(ctx context.Context) error) Option {
	return func(s *Server) { s.loops = append(s.loops, namedLoop{name, run}) }
}

// every is a loop that calls fn every d until ctx ends.
func every(d time.Duration, fn func()) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				fn()
			}
		}
	}
}

func secsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

type namedLoop struct {
	name string
	run  func(ctx context.Context) error
}

// Server is the narwhal-core HTTP service around one core.
type Server struct {
	cfg      Config
	core     Core
	log      *slog.Logger
	now      func() int64
	noRun    bool
	registry *fleet.Registry
	metrics  *httpMetrics
	prom     *prometheus.Registry
	ingest   *Ingest
	handler  http.Handler
	page     *ui.Page // the status page at / (status.go)
	// collectors is every collector on /metrics (Collectors).
	collectors []prometheus.Collector

	api, admin     *http.Server
	apiLn, adminLn net.Listener
	sidecars       []*sidecar

	serveOnce sync.Once

	budget      *bodyBudget
	connRefused prometheus.Counter

	extraRoutes     []Route
	extraCollectors []prometheus.Collector
	loops           []namedLoop
	tokens          *authTokens
	certs           *certSource // nil without TLS
	roles           rolesWatch

	// The engines-list ids (never forgotten), and since when each
	// other engine has been gone (forgetGone; the sweep's goroutine only).
	seeded    map[string]bool
	goneSince map[string]int64
	forgotten prometheus.Counter
}

// New validates nothing beyond what Config.Validate did (call Load or
// Validate first), registers the configured static engines the core does
// not know yet, binds the listeners (so Addr is known before Serve) and
// builds the routes. Serve takes over closing the core.
func New(cfg Config, c Core, logger *slog.Logger, opts ...Option) (*Server, error) {
	if c == nil {
		return nil, errors.New("service: nil core")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, core: c, log: logger, now: func() int64 { return time.Now().UnixNano() }}
	for _, o := range opts {
		o(s)
	}
	// The core refuses evidence stamped ahead of its clock: the service's.
	if cl, ok := c.(interface{ SetClock(func() int64) }); ok {
		cl.SetClock(s.now)
	}
	known := map[string]bool{}
	for _, e := range c.Engines() {
		known[e.ID] = true
	}
	// A configured role is the engine's initial role: the core's restored
	// controller state wins over it (controller.UpsertEngine), so a
	// restart never undoes a move.
	s.seeded, s.goneSince = make(map[string]bool, len(cfg.Engines)), map[string]int64{}
	for _, seed := range cfg.Engines {
		s.seeded[seed.ID] = true
		if known[seed.ID] {
			continue
		}
		if err := c.UpsertEngine(seed.Engine()); err != nil {
			return nil, fmt.Errorf("service: registering engine %q: %w", seed.ID, err)
		}
	}
	s.registry = fleet.NewRegistry(c, int64(cfg.Agents.StaleAfterS*1e9), logger.With("component", "fleet"),
		fleet.WithLimits(fleet.Limits{MaxNodes: cfg.Agents.MaxNodes, MaxEngines: cfg.Agents.MaxEngines,
			MaxEpochAheadNs: int64(cfg.Agents.MaxEpochAheadS * 1e9), ForgetAfterNs: int64(cfg.Agents.ForgetAfterS * 1e9)}))
	s.metrics = newHTTPMetrics()
	s.tokens = newAuthTokens(cfg.Auth, logger.With("component", "auth"))
	s.loops = append(s.loops, namedLoop{"roles watch", s.roles.run(c)})
	if s.tokens.hasFile() && cfg.Auth.TokenReloadS > 0 {
		s.loops = append(s.loops, namedLoop{"token reload", every(secsDur(cfg.Auth.TokenReloadS), s.tokens.reload)})
	}
	if cfg.TLS.CertFile != "" {
		var err error
		if s.certs, err = newCertSource(cfg.TLS.CertFile, cfg.TLS.KeyFile, logger.With("component", "tls")); err != nil {
			return nil, err
		}
		s.extraCollectors = append(s.extraCollectors, s.certs)
		if cfg.TLS.ReloadS > 0 {
			s.loops = append(s.loops, namedLoop{"TLS reload", every(secsDur(cfg.TLS.ReloadS), func() { _, _ = s.certs.reload() })})
		}
	}
	s.budget = newBodyBudget(cfg.HTTP.MaxInflightBodyBytes, cfg.HTTP.MaxBodyBytes)
	s.connRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_http_connections_refused_total",
		Help: "API connections answered 503 and closed because http.max_connections were open."})
	s.forgotten = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_engines_forgotten_total",
		Help: "Engines removed from the engine table after agents.forget_after_s unlisted by every agent and not live (without kubernetes.enabled)."})
	for _, sc := range s.sidecars {
		srv, cs, err := sc.Build(SidecarEnv{Sink: c, Now: s.now, RouterAuth: s.tokens.router.check,
			TLS: s.tlsConfig(), Logger: logger.With("component", sc.Setting)})
		if err != nil {
			return nil, fmt.Errorf("service: %s: %w", sc.Setting, err)
		}
		sc.srv = srv
		s.extraCollectors = append(s.extraCollectors, cs...)
		if sc.ConnectionsRefused != nil {
			s.extraCollectors = append(s.extraCollectors, sc.ConnectionsRefused)
		}
	}
	if cfg.ExtProc.Listen != "" && !s.hasSidecar("extproc.listen") {
		return nil, errors.New("service: extproc.listen is set, but this server was built without the ext_proc server (service/extproc.ServiceOption)")
	}
	idem := newIdemStore(cfg.Events.IdempotencyMaxKeys, idempotencyRetentionNs(cfg.Events.IdempotencyRetentionS, cfg.Limits()), idempotencyMaxBytes)
	s.prom = prometheus.NewRegistry()
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	cs = append(cs, s.metrics.collectors()...)
	cs = append(cs, s.budget.refused, s.budget.inflight, s.connRefused, s.forgotten, s.tokens.reloads)
	cs = append(cs, idem.collectors()...)
	cs = append(cs, s.registry.Collectors()...)
	cs = append(cs, c.Collectors()...)
	cs = append(cs, newOpsCollector(s))
	if jc, ok := c.(journaled); ok {
		cs = append(cs, jc.JournalCollectors()...)
	}
	cs = append(cs, s.extraCollectors...)
	for _, col := range cs {
		if err := s.prom.Register(col); err != nil {
			return nil, fmt.Errorf("service: registering metrics: %w", err)
		}
	}
	s.collectors = cs
	s.ingest = newIngest(c, cfg.Limits(), cfg.HTTP.MaxBodyBytes, cfg.HTTP.MaxLineBytes, s.now, s.metrics, idem)
	s.addStatusPage()
	var err error
	if s.handler, err = s.routes(); err != nil {
		return nil, err
	}

	s.api = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: secsDur(cfg.HTTP.ReadHeaderTimeoutS),
		ReadTimeout:       secsDur(cfg.HTTP.ReadTimeoutS),
		WriteTimeout:      secsDur(cfg.HTTP.WriteTimeoutS),
		IdleTimeout:       secsDur(cfg.HTTP.IdleTimeoutS),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if s.apiLn == nil { // else WithListener's
		if s.apiLn, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("service: listen %s: %w", cfg.Listen, err)
		}
	}
	s.apiLn = netcap.New(s.apiLn, effectiveMaxConnections(cfg.HTTP.MaxConnections, logger), "http.max_connections", s.connRefused, logger)
	if s.certs != nil {
		s.apiLn = tls.NewListener(s.apiLn, s.tlsConfig())
	}
	for _, sc := range s.sidecars {
		ln, err := net.Listen("tcp", sc.Addr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("service: listen %s %s: %w", sc.Setting, sc.Addr, err)
		}
		sc.ln = netcap.New(ln, sc.MaxConnections, sc.limitName(), sc.ConnectionsRefused, logger)
	}
	if cfg.AdminListen != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		// The admin listener is for an operator's pprof session: a few
		// connections, small bodies (pprof's symbol lookup reads a POST
		// body of addresses), profiles and traces of at most a minute
		// (pprof extends its write deadline by the seconds asked for).
		s.admin = &http.Server{
			Handler:           http.MaxBytesHandler(maxProfileSeconds(mux), adminMaxBodyBytes),
			ReadHeaderTimeout: secsDur(cfg.HTTP.ReadHeaderTimeoutS),
			ReadTimeout:       secsDur(cfg.HTTP.ReadTimeoutS),
			WriteTimeout:      adminWriteTimeout,
			IdleTimeout:       secsDur(cfg.HTTP.IdleTimeoutS),
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		ln, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("service: listen admin %s: %w", cfg.AdminListen, err)
		}
		s.adminLn = netcap.New(ln, adminMaxConnections, "admin_listen's connection limit", nil, logger)
	}
	return s, nil
}

// tlsConfig serves the reloading certificate (TLS 1.2 or later); nil
// without tls.cert_file.
func (s *Server) tlsConfig() *tls.Config {
	if s.certs == nil {
		return nil
	}
	return &tls.Config{GetCertificate: s.certs.getCertificate, MinVersion: tls.VersionTLS12}
}

// Close releases the listeners of a Server that will not Serve (Serve
// releases them itself). It does not close the core.
func (s *Server) Close() error {
	err := s.apiLn.Close()
	if s.adminLn != nil {
		err = errors.Join(err, s.adminLn.Close())
	}
	for _, sc := range s.sidecars {
		if sc.ln != nil {
			err = errors.Join(err, sc.ln.Close())
		}
	}
	return err
}

// Addr is the API listener's address (useful with port 0).
func (s *Server) Addr() net.Addr { return s.apiLn.Addr() }

// AdminAddr is the pprof listener's address, nil when disabled.
func (s *Server) AdminAddr() net.Addr {
	if s.adminLn == nil {
		return nil
	}
	return s.adminLn.Addr()
}

// Handler is the API handler (for httptest and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the agents' registry behind /v1/agent/reports.
func (s *Server) Registry() *fleet.Registry { return s.registry }

// Serve serves until ctx ends, runs the core's control loop (unless
// WithoutControlLoop) and the agent staleness sweep, then shuts down
// gracefully: stops accepting, lets in-flight requests finish within
// http.shutdown_timeout_s, stops the control loop and closes the core,
// which flushes the journal and the controller state. Serve may be called
// once.
func (s *Server) Serve(ctx context.Context) error {
	err := errors.New("service: Serve called twice")
	s.serveOnce.Do(func() { err = s.serve(ctx) })
	return err
}

func (s *Server) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2+len(s.sidecars))
	var wg sync.WaitGroup
	serveHTTP := func(srv *http.Server, ln net.Listener, name string) {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("service: %s listener: %w", name, err)
		}
	}
	wg.Add(1)
	go serveHTTP(s.api, s.apiLn, "api")
	if s.admin != nil {
		wg.Add(1)
		go serveHTTP(s.admin, s.adminLn, "admin")
	}
	for _, sc := range s.sidecars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sc.srv.Serve(sc.ln); err != nil {
				errc <- fmt.Errorf("service: %s listener: %w", sc.Setting, err)
			}
		}()
	}
	loopCtx, stopLoops := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	if !s.noRun {
		loops.Add(1)
		go func() {
			defer loops.Done()
			if err := s.core.Run(loopCtx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("control loop stopped", "err", err)
			}
		}()
	}
	for _, l := range s.loops {
		loops.Add(1)
		go func() {
			defer loops.Done()
			if err := l.run(loopCtx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("loop stopped", "loop", l.name, "err", err)
			}
		}()
	}
	loops.Add(1)
	go func() {
		defer loops.Done()
		t := time.NewTicker(time.Duration(s.cfg.Agents.SweepS * float64(time.Second)))
		defer t.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-t.C:
				now := s.now()
				s.registry.Sweep(now)
				s.forgetGone(now)
			}
		}
	}()
	s.log.Info("serving", "addr", s.Addr().String(), "tls", s.cfg.TLS.CertFile != "", "admin", s.cfg.AdminListen)
	for _, sc := range s.sidecars {
		s.log.Info("serving sidecar", "setting", sc.Setting, "addr", sc.ln.Addr().String(), "tls", s.certs != nil)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.log.Info("shutting down")
	s.roles.stop()
	shCtx, shCancel := context.WithTimeout(context.Background(), time.Duration(s.cfg.HTTP.ShutdownTimeoutS*float64(time.Second)))
	defer shCancel()
	var errs []error
	if serveErr != nil {
		errs = append(errs, serveErr)
	}
	if err := s.api.Shutdown(shCtx); err != nil {
		errs = append(errs, fmt.Errorf("service: api shutdown: %w", err))
	}
	if s.admin != nil {
		if err := s.admin.Shutdown(shCtx); err != nil {
			errs = append(errs, fmt.Errorf("service: admin shutdown: %w", err))
		}
	}
	for _, sc := range s.sidecars {
		sc.srv.Stop(shCtx)
	}
	wg.Wait()
	stopLoops()
	loops.Wait()
	if err := s.core.Close(); err != nil {
		errs = append(errs, fmt.Errorf("service: closing core: %w", err))
	}
	s.log.Info("stopped")
	return errors.Join(errs...)
}

func (s *Server) routes() (http.Handler, error) {
	mux := http.NewServeMux()
	auth := newBearer(s.tokens.router)
	m := s.metrics
	// The budget is taken after authentication: an unauthenticated client
	// cannot hold body bytes.
	mux.Handle("/v1/events", m.instrument("events", auth.wrap(s.budget.wrap(s.ingest))))
	var agents http.Handler
	switch {
	case s.cfg.Auth.AgentToken != "":
		agents = newBearer(s.tokens.agent).wrap(s.budget.wrap(s.registry.Handler("", s.cfg.HTTP.MaxBodyBytes, s.now)))
	case s.cfg.Auth.AllowUnauthenticated:
		agents = s.budget.wrap(s.registry.Handler("", s.cfg.HTTP.MaxBodyBytes, s.now))
	default:
		agents = agentAuthDisabled()
	}
	mux.Handle("/v1/agent/reports", m.instrument("agent_reports", agents))
	mux.Handle("/v1/roles", m.instrument("roles", getOnly(s.handleRoles)))
	mux.Handle("/v1/state", m.instrument("state", getOnly(s.handleState)))
	mux.Handle("/v1/decisions", m.instrument("decisions", getOnly(s.handleDecisions)))
	mux.Handle("/metrics", m.instrument("metrics", promhttp.HandlerFor(s.prom, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	})))
	mux.Handle("/healthz", getOnly(s.handleHealth))
	mux.Handle("/readyz", getOnly(s.handleReady))
	mux.Handle("/ui/", m.instrument("ui", getOnly(s.page.Handler().ServeHTTP)))
	mux.Handle("/", s.rootHandler())
	for _, rt := range s.extraRoutes {
		h := rt.Handler
		if rt.Pattern == "" || h == nil {
			return nil, fmt.Errorf("service: extra route %q needs a pattern and a handler", rt.Name)
		}
		if rt.Write {
			h = auth.wrap(s.budget.wrap(h))
		}
		if err := handle(mux, rt.Pattern, m.instrument(rt.Name, h)); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// handle turns ServeMux's panic on a bad or taken pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("service: route %q: %v", pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func getOnly(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, errorReply{"method " + r.Method + " not allowed; use GET"})
			return
		}
		h(w, r)
	})
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.state())
}

func (s *Server) handleDecisions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "limit" {
			writeJSON(w, http.StatusBadRequest, errorReply{fmt.Sprintf("unknown parameter %q (want since, limit)", k)})
			return
		}
	}
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorReply{fmt.Sprintf("since must be a decision sequence number (non-negative integer), got %q", v)})
			return
		}
		since = n
	}
	limit := defaultDecisionLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDecisionLimit {
			writeJSON(w, http.StatusBadRequest, errorReply{fmt.Sprintf("limit must be an integer in [1, %d], got %q", maxDecisionLimit, v)})
			return
		}
		limit = n
	}
	ds := s.decisions(q.Has("since"), since, limit)
	if ds == nil {
		ds = []decision{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"decisions": ds})
}

// journaled is a Core with a data directory (*DurableCore).
type journaled interface {
	JournalHealth() error
	JournalCollectors() []prometheus.Collector
}

// stuckCore is the core's report of a clock behind its recorded demand
// history (core.Core.Stuck).
type stuckCore interface {
	Stuck() bool
	ClockBehindNs() int64
}

// handleHealth is the liveness probe: the process is up and can record.
// A core whose clock stepped back past its demand history refuses every
// record until the clock catches up (an hour's step: an hour blind); a
// restart records at once (roles and move times come back from the
// checkpoint), so the probe fails and the kubelet restarts the pod.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if sc, ok := s.core.(stuckCore); ok && sc.Stuck() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stuck",
			"reason": fmt.Sprintf("the clock is %.0f s behind the recorded demand history (it stepped back): every record is refused until it catches up; a restart records again",
				float64(sc.ClockBehindNs())/1e9)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	body := func(status, reason string) map[string]string {
		m := map[string]string{"status": status, "reason": reason}
		// Models without a latency profile (their engines move on
		// observed pressure only); readiness does not depend on it.
		if u, ok := s.core.(interface{ Unprofiled() []string }); ok {
			if list := u.Unprofiled(); len(list) > 0 {
				m["unprofiled"] = strings.Join(list, "; ")
			}
		}
		return m
	}
	if jc, ok := s.core.(journaled); ok {
		if err := jc.JournalHealth(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, body("not ready", "persistence failing (retried): "+err.Error()))
			return
		}
	}
	if !s.cfg.Agents.Required {
		writeJSON(w, http.StatusOK, body("ready", "running without agents (agents.required=false)"))
		return
	}
	if s.registry.Fresh(s.now()) {
		writeJSON(w, http.StatusOK, body("ready", "fresh agent data"))
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, body("not ready",
		fmt.Sprintf("no agent reported within agents.stale_after_s=%g", s.cfg.Agents.StaleAfterS)))
}

// forgetGone removes from the engine table every engine that no agent
// lists, that is not live and that is not in the engines list, once it
// has been so for agents.forget_after_s. Agents name engines after their
// pods, so a fleet that replaces pods would otherwise grow the table (and
// state.json, /v1/state and the per-engine series) for as long as the
// core runs. With kubernetes.enabled it does nothing: discovery removes
// an engine with its pod, and keeps one whose pod is there.
func (s *Server) forgetGone(nowNs int64) {
	rm, ok := s.core.(interface{ RemoveEngine(id string) error })
	if !ok || s.cfg.Kubernetes.Enabled {
		return
	}
	after := int64(s.cfg.Agents.ForgetAfterS * 1e9)
	engines := s.core.Engines()
	present := make(map[string]bool, len(engines))
	for _, e := range engines {
		present[e.ID] = true
		if e.Live || s.seeded[e.ID] || s.registry.Listed(e.ID) {
			delete(s.goneSince, e.ID)
			continue
		}
		since, seen := s.goneSince[e.ID]
		switch {
		case !seen:
			s.goneSince[e.ID] = nowNs
		case nowNs-since >= after:
			if err := rm.RemoveEngine(e.ID); err != nil {
				s.log.Warn("forgetting a gone engine", "engine", e.ID, "err", err)
				continue
			}
			delete(s.goneSince, e.ID)
			s.forgotten.Inc()
			s.log.Info("engine forgotten: no agent listed it and it was not live", "engine", e.ID,
				"gone_s", float64(nowNs-since)/1e9)
		}
	}
	for id := range s.goneSince {
		if !present[id] {
			delete(s.goneSince, id)
		}
	}
}
