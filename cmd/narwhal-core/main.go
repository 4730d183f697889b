package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/service/extproc"
	"github.com/narwhal-io/narwhal/service/kube"
)

// main: with no arguments and no NARWHAL_CONFIG (or with --demo and its
// flags) it runs the demo, the main job on an embedded default; otherwise
// the service from its configuration (--config FILE or NARWHAL_CONFIG,
// flags, NARWHAL_* environment).
func main() {
	var err error
	if demo, args := demoArgs(os.Args[1:], os.LookupEnv); demo {
		err = demoMain(args)
	} else {
		err = run(args)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(os.Stdout)
			return
		}
		fmt.Fprintf(os.Stderr, "narwhal-core: %v\n", err)
		os.Exit(1)
	}
}

// demoArgs says whether args (the command line after the program name)
// run the demo, and with which arguments. A configuration file named by
// NARWHAL_CONFIG alone runs the service, as --config does: a container
// configured through its environment must not start the demo instead.
func demoArgs(args []string, lookupEnv func(string) (string, bool)) (bool, []string) {
	switch {
	case len(args) == 0:
		cfg, _ := lookupEnv("NARWHAL_CONFIG")
		return cfg == "", nil
	case args[0] == "--demo" || args[0] == "-demo":
		return true, args[1:]
	}
	return false, args
}

func run(args []string) error {
	cfg, err := service.Load(args, os.LookupEnv)
	if err != nil {
		return err
	}
	logger := service.NewLogger(os.Stderr, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if cfg.Kubernetes.Enabled {
		// One of N replicas behind a Lease: the in-cluster client (the
		// pod's service account), discovery, election, merged demand.
		rc, err := rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("kubernetes.enabled: %w", err)
		}
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("kubernetes.enabled: %w", err)
		}
		srv, _, err := kube.NewServer(cfg, client, logger, extproc.ServiceOption(cfg))
		if err != nil {
			return err
		}
		return srv.Serve(ctx)
	}
	c, err := service.NewCore(cfg, logger)
	if err != nil {
		return err
	}
	srv, err := service.New(cfg, c, logger, extproc.ServiceOption(cfg))
	if err != nil {
		_ = c.Close()
		return err
	}
	return srv.Serve(ctx)
}

// usage is --help: both ways to run, the demo's flags and every service
// setting.
func usage(w io.Writer) {
	fmt.Fprintf(w, "narwhal-core: keeps a disaggregated LLM serving cluster within its TTFT/TPOT SLOs.\n\n")
	fmt.Fprintf(w, "Usage:\n  narwhal-core                      the demo: a simulated cluster replays a bundled trace; status page and API on 127.0.0.1:8080\n")
	fmt.Fprintf(w, "  narwhal-core --demo [DEMO FLAGS]  the same, with its flags\n")
	fmt.Fprintf(w, "  narwhal-core --config FILE [--SETTING VALUE ...]   the service (so is NARWHAL_CONFIG=FILE narwhal-core)\n\nDemo flags (after --demo):\n")
	dc := defaultDemo()
	fs := demoFlags(&dc)
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s  %s (default %s)\n", f.Name, f.Usage, f.DefValue)
	})
	fmt.Fprintln(w)
	service.Usage(w)
}
