package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/narwhal-io/narwhal/service"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			service.Usage(os.Stdout)
			return
		}
		fmt.Fprintf(os.Stderr, "narwhal-core: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := service.Load(args, os.LookupEnv)
	if err != nil {
		return err
	}
	logger := service.NewLogger(os.Stderr, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c, err := service.NewCore(cfg, logger)
	if err != nil {
		return err
	}
	srv, err := service.New(cfg, c, logger)
	if err != nil {
		_ = c.Close()
		return err
	}
	return srv.Serve(ctx)
}
