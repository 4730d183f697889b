// Command narwhal-sim replays real LLM serving traces through a simulated
// disaggregated cluster under a role policy (narwhal, static:P,
// static-best, threshold) and reports SLO attainment. See package sim.
package main
