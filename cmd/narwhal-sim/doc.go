// Command narwhal-sim replays real LLM serving traces through a simulated
// disaggregated cluster under a role policy (narwhal, static:P,
// static-best, threshold) and reports SLO attainment. See package sim.
//
// `narwhal-sim suite [--json] [--half tune|held|all|dev] [--dev-draw K]
// [--quick]` runs the scenario suite (package sim, "Scenario suite"; dev:
// the development draw, part of neither half; --dev-draw K ≥ 1 another
// draw of it, xK-NN-…): per policy, the
// distribution of narwhal − static-best and narwhal − threshold over
// generated one-hour workloads; --variant NAME=CORE_CONFIG.json adds a
// narwhal configuration, --baselines FILE caches the calibration and
// static-best per scenario; --even-start starts from an even split. The
// scenarios' engines run at their drawn slowdown; narwhal starts from
// --controller-profile prior --calibrate=true (the defaults) and
// NAME@exact (the true profile, no calibration) is reported beside each
// variant unless --exact=false. --oracle also searches each scenario's
// hindsight schedule (the oracle policy, from static-best; minutes per
// scenario, cached in --baselines) and reports oracle − static-best and
// narwhal − oracle (benchmarks/slo/SUITE.md, "Headroom").
//
// --engine-slowdown X, --controller-profile exact|nominal|prior|none|FILE
// (--profiles FILE is the same as FILE) and --calibrate=true|false set
// what the narwhal policy's controller starts from and whether it learns
// from the engines' latency figures (benchmarks/slo/PROFILES.md);
// --warmup S also reports the attainment of the requests after S seconds.
// --client-timeout S gives clients a first-token timeout: a request with
// no first token S seconds after it arrived is cancelled and counts as
// missed (0, the default: clients wait for ever); `suite --client-timeout
// S` runs every policy so on each scenario's reference traffic (the load
// is calibrated with clients that wait for ever).
package main
