// Command narwhal-core runs the Narwhal core as an HTTP service: routers
// post request lifecycle events (POST /v1/events), agents post engine
// reports (POST /v1/agent/reports), and the controller decides engine
// roles every core.step_s. See package service for the API and the event
// schema, and `narwhal-core --help` for every setting (flags > NARWHAL_*
// environment > YAML file given by --config or NARWHAL_CONFIG > defaults).
//
// With no arguments and no NARWHAL_CONFIG (or with --demo [--listen ADDR]
// [--pace X] [--rate-scale X] [--engines N]) it runs the demo: it binds its listener first (a taken
// port fails at once), prints the status page's address as its first
// line, and replays the bundled Azure code trace through the real core
// on a simulated cluster; one line per decision on stdout. The demo takes
// no writes over HTTP (the simulator drives the core in process): POST
// /v1/events needs a token drawn for the run and never shown, and agent
// reports are off, so a --listen address beyond loopback exposes the
// pages and the read API only.
//
// main is thin on purpose: service.Load, service.NewCore, service.New and
// (*service.Server).Serve do the work, so that the service can be started
// programmatically (tests, a demo mode driving a simulated cluster).
// SIGTERM or SIGINT shut it down gracefully: in-flight requests finish,
// the control loop stops, and the journal and controller state in data_dir
// are flushed.
//
// Concurrency and allocation contracts are package service's.
package main
