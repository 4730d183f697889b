package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/sim"
)

// The demo is the main job on an embedded default: no GPU, no cluster, no
// configuration. A simulated 16-engine cluster (sim/) replays the bundled
// Azure code trace at accelerated time through the real core, the
// service's HTTP API is live on localhost, and every controller decision
// is one line on stdout. It ends when the replay ends (or on SIGINT).

func demoMain(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runDemo(ctx, args, os.Stdout, os.Stderr)
}

// demoConfig are the demo's few knobs (flags after --demo).
type demoConfig struct {
	listen    string
	pace      float64
	rateScale float64
	engines   int
}

// demoFlags declares the demo's flags on a fresh flag set over dc.
func demoFlags(dc *demoConfig) *flag.FlagSet {
	fs := flag.NewFlagSet("narwhal-core --demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&dc.listen, "listen", dc.listen, "API and status page listen address (host:port; port 0 picks one)")
	fs.Float64Var(&dc.pace, "pace", dc.pace, "virtual seconds per wall second")
	fs.Float64Var(&dc.rateScale, "rate-scale", dc.rateScale, "compress the trace's arrivals by this factor")
	fs.IntVar(&dc.engines, "engines", dc.engines, "simulated engines")
	return fs
}

func defaultDemo() demoConfig {
	return demoConfig{listen: "127.0.0.1:8080", pace: 30, rateScale: 4, engines: 16}
}

func parseDemo(args []string) (demoConfig, error) {
	dc := defaultDemo()
	fs := demoFlags(&dc)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return dc, err
		}
		return dc, fmt.Errorf("demo flags: %w", err)
	}
	if fs.NArg() > 0 {
		return dc, fmt.Errorf("demo flags: unexpected argument %q", fs.Arg(0))
	}
	if !(dc.pace > 0 && dc.pace <= 1e6) {
		return dc, fmt.Errorf("demo flags: --pace must be in (0, 1e6], got %v", dc.pace)
	}
	if !(dc.rateScale > 0 && dc.rateScale <= 1000) {
		return dc, fmt.Errorf("demo flags: --rate-scale must be in (0, 1000], got %v", dc.rateScale)
	}
	// An empty host would listen on every interface (the port alone, or
	// nothing at all: a random port there), not where --help says.
	if host, _, err := net.SplitHostPort(dc.listen); err != nil || host == "" {
		return dc, fmt.Errorf("demo flags: --listen %q: want HOST:PORT with a host (127.0.0.1:0 picks a free port on loopback; 0.0.0.0:8080 every interface)", dc.listen)
	}
	if dc.engines < 2 || dc.engines > 512 {
		return dc, fmt.Errorf("demo flags: --engines must be in [2, 512], got %d", dc.engines)
	}
	return dc, nil
}

// runDemo replays the bundled trace; stdout gets one line per decision,
// stderr the logs, the API address and progress.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	dc, err := parseDemo(args)
	if err != nil {
		return err
	}
	// Bind first: a taken port fails now, not after the whole replay.
	ln, err := net.Listen("tcp", dc.listen)
	if err != nil {
		return fmt.Errorf("demo: %w (is another narwhal-core running? --listen 127.0.0.1:0 picks a free port)", err)
	}
	bound := false // service.New took ln over
	defer func() {
		if !bound {
			ln.Close()
		}
	}()
	fmt.Fprintf(stderr, "narwhal-core demo: status page on http://%s/ (API: /v1/state, /v1/roles, /v1/decisions?limit=5, /metrics)\n", ln.Addr())
	logger := service.NewLogger(stderr, "warn")
	trace, err := sim.BundledTrace()
	if err != nil {
		return err
	}
	reqs, err := sim.Workload([][]sim.Request{trace}, []float64{dc.rateScale}, 0, 0)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	scfg := service.DefaultConfig()
	scfg.Listen = ln.Addr().String()
	// The simulator drives the core in process, so the demo takes no
	// writes over HTTP: events need a token drawn for this run and never
	// shown, and agent reports are off (no agent token). The pages and
	// the read API stay open, on any --listen address.
	tok, err := demoToken()
	if err != nil {
		return err
	}
	scfg.Auth.Token = tok
	scfg.Agents.Required = false // the simulator is the engine table's source
	if err := scfg.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// Same settings as the Azure rows of benchmarks/slo (TTFT 1.5 s, TPOT 0.1 s).
	cfg := sim.DefaultConfig()
	cfg.Engines = dc.engines
	cfg.TTFTSLOS, cfg.TPOTSLOS = 1.5, 0.1
	cfg.StartUnixNs = demoStartNs(demoNow())
	var virtualNs atomic.Int64
	virtualNs.Store(cfg.StartUnixNs)

	serveErr := make(chan error, 1)
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var srv *service.Server
	ready := func(c *core.Core) {
		s, err := service.New(scfg, c, logger,
			service.WithListener(ln),
			service.WithoutControlLoop(), // the simulator steps the core in virtual time
			service.WithClock(virtualNs.Load))
		if err != nil {
			serveErr <- err
			stopRun() // no replay without its service
			return
		}
		srv, bound = s, true
		fmt.Fprintf(stderr, "narwhal-core demo: replaying %s ×%g at %g× real time on %d simulated engines\n",
			sim.BundledTraceName, dc.rateScale, dc.pace, dc.engines)
		go func() { serveErr <- s.Serve(srvCtx) }()
	}
	hook := func(d controller.Decision) {
		virtualNs.Store(d.AtNs)
		fmt.Fprintln(stdout, decisionLine(d, cfg.StartUnixNs))
	}
	res, err := sim.Run(runCtx, cfg, reqs, sim.WithPace(dc.pace), sim.WithCoreReady(ready),
		sim.WithDecisionHook(hook), sim.WithProgress(stderr))
	served := false // Serve's (or New's) result already received
	select {
	case e := <-serveErr: // New or Serve failed early, or ctx ended
		served = true
		if e != nil {
			return fmt.Errorf("demo: service: %w", e)
		}
	default:
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("demo: %w", err)
	}
	if res != nil {
		if err := sim.WriteSummary(stderr, res); err != nil {
			return err
		}
	}
	if srv != nil && !served {
		stopSrv()
		if e := <-serveErr; e != nil {
			return fmt.Errorf("demo: service: %w", e)
		}
	}
	return nil
}

// decisionLine is the one-line form of a decision: sequence, virtual time
// since the replay started, basis, action, split, pressures, moves and the
// gate that blocked, if any.
func decisionLine(d controller.Decision, startNs int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "decision %d t=%.0fs basis=%s action=%s split=%dP/%dD pressure(prefill=%.2f decode=%.2f)",
		d.Seq, float64(d.AtNs-startNs)/1e9, d.Basis, d.Action,
		d.Current.PrefillEngines, d.Current.DecodeEngines, d.Current.PrefillPressure, d.Current.DecodePressure)
	for _, m := range d.Moves {
		fmt.Fprintf(&b, " move=%s:%s->%s", m.EngineID, m.From, m.To)
	}
	if d.Blocked != "" {
		fmt.Fprintf(&b, " blocked=%s", d.Blocked)
	}
	return b.String()
}

// demoNow is the demo's wall clock (a variable for the tests).
var demoNow = time.Now

// demoStartNs is the replay's virtual start: the wall clock truncated to
// the minute. The core's time buckets are whole divisors of a second
// aligned to the Unix epoch, so a start on a whole minute puts every
// arrival at the same offset in its bucket in every run, and the demo
// makes the same decisions each time (from a start at an arbitrary
// nanosecond it attained 83.9–85.0 % of the SLO from run to run).
func demoStartNs(now time.Time) int64 { return now.Truncate(time.Minute).UnixNano() }

// demoToken is a random bearer token for one demo run.
func demoToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("demo: drawing a token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
