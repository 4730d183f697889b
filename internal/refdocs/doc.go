// Package refdocs generates the reference pages that must not drift from
// the code: docs/configuration.md from service.Config (every setting, its
// default, flag and NARWHAL_* variable, and the field's doc comment),
// docs/metrics.md from the collectors narwhal-core and narwhal-agent
// register, and docs/journal.md from controller.Decision's JSON fields and
// their doc comments. `go run ./cmd/narwhal-docs` rewrites them; the
// package's tests regenerate them and fail when a committed page differs,
// and check the shipped Prometheus rules (promtool) and Grafana dashboard
// against the registered metrics, and against a real Prometheus server
// scraping the real narwhal-core's demo (TestLivePrometheus: every rule
// evaluates cleanly, every dashboard query returns data).
//
// Settings, metrics and journal fields added anywhere are picked up
// without touching this package: the pages are built by reflection over
// the live types and collectors, and the descriptions are read from the
// Go sources (go/parser) of the package that declares each field.
package refdocs

//go:generate go run ../../cmd/narwhal-docs
