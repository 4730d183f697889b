// Command narwhal-docs regenerates the reference pages that must not
// drift from the code (docs/configuration.md, docs/metrics.md,
// docs/journal.md; package internal/refdocs). Run it from anywhere in the
// repository after changing a setting, a metric or a journal field:
//
//	go run ./cmd/narwhal-docs
//
// The refdocs tests fail while a committed page differs from what this
// writes. It takes no arguments: -h or --help prints this use, anything
// else is refused; neither writes a page.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/narwhal-io/narwhal/internal/refdocs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, writePages))
}

// run checks the arguments before write (the pages) runs: it returns the
// exit code.
func run(args []string, stdout, stderr io.Writer, write func(io.Writer) error) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			fmt.Fprintln(stdout, "Usage: narwhal-docs\n\nRegenerates the reference pages under docs/ from the code; takes no arguments.")
			return 0
		}
		fmt.Fprintf(stderr, "narwhal-docs: unexpected argument %q (it takes none; -h for help)\n", args[0])
		return 2
	}
	if err := write(stderr); err != nil {
		fmt.Fprintln(stderr, "narwhal-docs:", err)
		return 1
	}
	return 0
}

func writePages(stderr io.Writer) error {
	root, err := refdocs.FindRoot(".")
	if err == nil {
		err = refdocs.Write(root)
	}
	if err != nil {
		return err
	}
	for _, p := range refdocs.Pages {
		fmt.Fprintln(stderr, "wrote", p.Path)
	}
	return nil
}
