// Command narwhal-core runs the Narwhal core as an HTTP service: routers
// post request lifecycle events (POST /v1/events), agents post engine
// reports (POST /v1/agent/reports), and the controller decides engine
// roles every core.step_s. See package service for the API and the event
// schema, and `narwhal-core --help` for every setting (flags > NARWHAL_*
// environment > YAML file given by --config or NARWHAL_CONFIG > defaults).
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
