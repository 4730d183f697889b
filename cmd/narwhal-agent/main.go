package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/liveness"
	"github.com/narwhal-io/narwhal/internal/netcap"
	"github.com/narwhal-io/narwhal/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "scrape" {
		return scrape(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	return serve(ctx, args, stderr)
}

// agentUsage heads --help: the two commands.
const agentUsage = `narwhal-agent: the per-node agent (NVML, engine metrics, liveness) streaming to narwhal-core.

Usage:
  narwhal-agent [run] [-config FILE] [-listen ADDR] [-max-connections N] [-log-level LEVEL]
      run the agent (the default command)
  narwhal-agent scrape -kind vllm|sglang (-url URL | -file FILE) [-json] [geometry flags]
      read one engine's metrics once and print what the agent sees
      (narwhal-agent scrape -h lists its flags)

Flags of run:
`

// maxGPUMemGiB bounds scrape's -gpu-mem-gib (a PiB): GiB × 2^30 stays
// within the uint64 bytes CrossCheck takes.
const maxGPUMemGiB = 1 << 20

func scrape(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scrape", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: narwhal-agent scrape -kind vllm|sglang (-url URL | -file FILE) [flags]")
		fs.PrintDefaults()
	}
	kind := fs.String("kind", "vllm", "engine kind: vllm or sglang")
	url := fs.String("url", "", "engine metrics URL")
	file := fs.String("file", "", "file holding a metrics body (instead of -url)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "scrape timeout")
	var g engine.Geometry
	fs.Int64Var(&g.Layers, "layers", 0, "model layers (for the KV cross-check)")
	fs.Int64Var(&g.KVHeads, "kv-heads", 0, "model KV heads")
	fs.Int64Var(&g.HeadDim, "head-dim", 0, "model head dimension")
	fs.Int64Var(&g.DTypeBytes, "dtype-bytes", 0, "KV cache dtype bytes (bf16: 2)")
	fs.Int64Var(&g.TP, "tp", 1, "tensor-parallel degree")
	memGiB := fs.Float64("gpu-mem-gib", 0, "GPU memory in GiB (for the KV cross-check; 0: skip)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "narwhal-agent scrape: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if !(*memGiB >= 0 && *memGiB <= maxGPUMemGiB) {
		fmt.Fprintf(stderr, "narwhal-agent scrape: -gpu-mem-gib %v: must be in [0, %d]\n", *memGiB, maxGPUMemGiB)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "narwhal-agent scrape: -timeout %v: must be > 0\n", *timeout)
		return 2
	}
	if (*url == "") == (*file == "") {
		fmt.Fprintln(stderr, "narwhal-agent scrape: give exactly one of -url or -file")
		return 2
	}
	var m engine.Metrics
	var err error
	if *file != "" {
		var f *os.File
		f, err = os.Open(*file)
		if err == nil {
			m, err = engine.Parse(engine.Kind(*kind), f)
			f.Close()
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		m, err = engine.Scrape(ctx, http.DefaultClient, engine.Kind(*kind), *url)
		cancel()
	}
	if err != nil {
		fmt.Fprintln(stderr, "narwhal-agent scrape:", err)
		return 1
	}
	// -tp defaults to 1, so the geometry is given when any model field is.
	geometry := g.Layers != 0 || g.KVHeads != 0 || g.HeadDim != 0 || g.DTypeBytes != 0
	if !geometry {
		g = engine.Geometry{}
	}
	var lim *engine.KVLimit
	if geometry || *memGiB > 0 {
		l := engine.CrossCheck(m.CapacityTokens, uint64(*memGiB*(1<<30)), g, m.GPUMemoryUtilization)
		lim = &l
	}
	// one page: the lifetime rate, as the agent prices a first scrape
	backlog := (&engine.PrefillRate{}).Price(m.Waiting, m.Running, m.Latency)
	if *asJSON {
		out := struct {
			Metrics engine.Metrics  `json:"metrics"`
			KVUsage *float64        `json:"kv_usage"`
			KV      *engine.KVLimit `json:"kv_limit,omitempty"`
			Backlog engine.Backlog  `json:"prefill_backlog"`
		}{Metrics: m, KV: lim, Backlog: backlog}
		if m.KVUsage == m.KVUsage { // not NaN
			out.KVUsage = &m.KVUsage
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return 0
	}
	num := func(v int64) string {
		if v < 0 {
			return "unknown"
		}
		return fmt.Sprint(v)
	}
	fmt.Fprintf(stdout, "engine kind        %s\n", m.Kind)
	fmt.Fprintf(stdout, "running requests   %s\n", num(m.Running))
	fmt.Fprintf(stdout, "waiting requests   %s\n", num(m.Waiting))
	if backlog.RequestsPerS > 0 {
		fmt.Fprintf(stdout, "prefill backlog    queued %.3f s, running %.3f s (%s rate %.3g prefills/s)\n",
			backlog.QueuedPrefillS, backlog.RunningPrefillS, backlog.Source, backlog.RequestsPerS)
	} else {
		fmt.Fprintf(stdout, "prefill backlog    unpriced (the engine exposes no prefill time or has timed none)\n")
	}
	if m.KVUsage == m.KVUsage {
		fmt.Fprintf(stdout, "kv usage           %.4f (%s)\n", m.KVUsage, m.UsageMetric)
	} else {
		fmt.Fprintf(stdout, "kv usage           unknown\n")
	}
	fmt.Fprintf(stdout, "kv tokens used     %s\n", num(m.KVUsedTokens))
	fmt.Fprintf(stdout, "kv capacity tokens %s\n", num(max(m.CapacityTokens, 0)))
	if m.NumGPUBlocks > 0 && m.BlockSize > 0 && m.NumGPUBlocks*m.BlockSize == m.CapacityTokens {
		fmt.Fprintf(stdout, "  = num_gpu_blocks %d × block_size %d\n", m.NumGPUBlocks, m.BlockSize)
	} else if m.NumGPUBlocks > 0 && m.CapacityTokens > 0 {
		// Hybrid models (attention + mamba layers) report a token pool
		// that is not blocks × block size.
		fmt.Fprintf(stdout, "  = kv_cache_size_tokens (num_gpu_blocks %d, block_size %d)\n", m.NumGPUBlocks, m.BlockSize)
	}
	if m.GPUMemoryUtilization > 0 {
		fmt.Fprintf(stdout, "gpu mem util       %.2f\n", m.GPUMemoryUtilization)
	}
	if len(m.Missing) > 0 {
		fmt.Fprintf(stdout, "missing            %s\n", strings.Join(m.Missing, ", "))
	}
	for _, n := range m.Notes {
		fmt.Fprintf(stdout, "note               %s\n", n)
	}
	if lim != nil {
		if lim.BoundTokens > 0 {
			fmt.Fprintf(stdout, "kv bytes/token     %d\n", lim.BytesPerToken)
			fmt.Fprintf(stdout, "kv nvml bound      %d tokens\n", lim.BoundTokens)
		}
		fmt.Fprintf(stdout, "kv limit           %d tokens (%s)\n", lim.Tokens, lim.Source)
		switch {
		case lim.Source == engine.KVSourceEngine && lim.BoundTokens == 0:
			// Informational: the engine's number is used as it is.
			fmt.Fprintf(stdout, "kv cross-check     skipped (%s; give -layers, -kv-heads, -head-dim, -dtype-bytes and -gpu-mem-gib to run it)\n",
				strings.TrimPrefix(lim.Disagreement, "not cross-checked: "))
		case lim.Disagreement != "":
			fmt.Fprintf(stdout, "kv disagreement    %s\n", lim.Disagreement)
		default:
			fmt.Fprintf(stdout, "kv cross-check     agrees\n")
		}
	}
	return 0
}

func serve(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("narwhal-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, agentUsage)
		fs.PrintDefaults()
	}
	cfgPath := fs.String("config", "/etc/narwhal/agent.yaml", "configuration file (YAML)")
	listen := fs.String("listen", ":9400", "address for /healthz and /metrics")
	maxConns := fs.Int64("max-connections", 64, "connections the /healthz and /metrics listener holds open; more are answered 503 and closed")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "narwhal-agent: unexpected argument %q (the configuration file is -config FILE)\n", fs.Arg(0))
		return 2
	}
	if *maxConns < 1 {
		fmt.Fprintf(stderr, "narwhal-agent: -max-connections %d: must be at least 1\n", *maxConns)
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(stderr, "narwhal-agent: -log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv}))
	cfg, err := agent.LoadConfig(*cfgPath)
	if err != nil {
		log.Error("configuration refused", "err", err)
		return 2
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	gpus := nvml.NewManager(nvml.Library(), time.Duration(cfg.NVMLTimeoutS*1e9), log)
	defer func() { _ = gpus.Close(context.Background()) }()
	if _, err := gpus.Devices(ctx, time.Now().UnixNano()); err != nil {
		log.Warn("NVML unavailable at start: degraded mode, retrying", "err", err)
	}
	opts := []agent.Option{agent.WithNVML(gpus), agent.WithLogger(log)}
	pollNs := int64(cfg.ProcPollS * 1e9)
	switch cfg.Liveness {
	case "auto":
		w, reason := liveness.New(ctx, pollNs, log)
		defer w.Close()
		opts = append(opts, agent.WithWatcher(w, reason))
	case "ebpf":
		w, err := liveness.NewBPF(log)
		if err != nil {
			log.Error("liveness: ebpf requested but unavailable", "err", err)
			return 1
		}
		defer w.Close()
		opts = append(opts, agent.WithWatcher(w, ""))
	case "proc":
		w := liveness.NewProc("/proc", 256)
		go w.Run(ctx, pollNs)
		defer w.Close()
		opts = append(opts, agent.WithWatcher(w, "")) // chosen, not a fallback from eBPF
	}
	a, err := agent.New(cfg, opts...)
	if err != nil {
		log.Error("agent refused the configuration", "err", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(a.Collectors()...)
	if code := startDiscovery(ctx, cfg, a, gpus, reg, log); code != 0 {
		return code
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		h := a.Health(time.Now().UnixNano())
		w.Header().Set("Content-Type", "application/json")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	srv := &http.Server{Handler: http.MaxBytesHandler(mux, 64<<10), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("http listener", "listen", *listen, "err", err)
		return 1
	}
	go func() {
		if err := srv.Serve(netcap.New(ln, *maxConns, "-max-connections", a.HTTPRefused(), log)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "err", err)
			stop()
		}
	}()
	log.Info("narwhal-agent started", "node", cfg.Node, "engines", len(cfg.Engines), "core", cfg.CoreURL,
		"epoch", a.Epoch(), "listen", *listen, "nvml", gpus.Status())
	err = a.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}
