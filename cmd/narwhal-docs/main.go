// Command narwhal-docs regenerates the reference pages that must not
// drift from the code (docs/configuration.md, docs/metrics.md,
// docs/journal.md; package internal/refdocs). Run it from anywhere in the
// repository after changing a setting, a metric or a journal field:
//
//	go run ./cmd/narwhal-docs
//
// The refdocs tests fail while a committed page differs from what this
// writes.
package main

import (
	"fmt"
	"os"

	"github.com/narwhal-io/narwhal/internal/refdocs"
)

func main() {
	root, err := refdocs.FindRoot(".")
	if err == nil {
		err = refdocs.Write(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "narwhal-docs:", err)
		os.Exit(1)
	}
	for _, p := range refdocs.Pages {
		fmt.Fprintln(os.Stderr, "wrote", p.Path)
	}
}
