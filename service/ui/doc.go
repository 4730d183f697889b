// Package ui is narwhal-core's status page: what the controller sees and
// does, drawn live in the browser. It serves, from assets embedded in the
// binary (plain SVG drawn by a small script; no CDN, no third-party
// code):
//
//	GET /                 the page
//	GET /ui/app.js        its script, /ui/style.css its style
//	GET /ui/api/series    the sampled time series (JSON): engines by role
//	                      and state, offered prefill and decode demand, and
//	                      TTFT/TPOT attainment over the demand window
//
// The page also reads GET /v1/decisions?limit=N (the latest decisions
// with their basis and blocked gate) and polls both every second.
//
// A Page samples its Source once per second of the source's clock (Run
// checks every 100 ms of wall time, so a replay in accelerated virtual
// time is sampled per virtual second as far as the wall allows) into a
// fixed ring of MaxSamples: memory never grows. Offered demand is the
// latest decision's short-horizon demand: arrivals/s × mean input tokens
// (prefill) and × mean expected output tokens (decode).
//
// Concurrency: Page is safe for concurrent use (one mutex around the
// ring); serving the series copies it. Allocation: a sample allocates the
// source's State; not a hot path.
package ui
