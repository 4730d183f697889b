// Command narwhal-sim replays real LLM serving traces through a simulated
// disaggregated cluster under a role policy (narwhal, static:P,
// static-best, threshold) and reports SLO attainment. See package sim.
// --engine-slowdown X, --controller-profile exact|nominal|prior|none|FILE
// (--profiles FILE is the same as FILE) and --calibrate=true|false set
// what the narwhal policy's controller starts from and whether it learns
// from the engines' latency figures (benchmarks/slo/PROFILES.md);
// --warmup S also reports the attainment of the requests after S seconds.
package main
