// Package controller decides, every controller step, how many engines hold
// the prefill and the decode role and which engine moves, so that the TTFT
// and TPOT SLOs hold while the traffic mix shifts.
//
// # A step
//
// Step(now, inputs) freezes a Snapshot (values only: copies of the profile
// coefficients, the engine rows, demand moments for the short and the long
// horizon, observed phase pressure, the output estimate), scores every
// candidate split over the live serving engines, applies the movement
// gates, journals the Decision and, for a move, calls the Actuator after
// releasing its lock. Live buckets, engines or profiles changed after the
// freeze cannot change a score computed from it.
//
// # Profiles
//
// Per (model, GPU kind): prefill seconds = a + b·L + c·L² for a prompt of
// L tokens; decode step seconds = a + s·batch + k·context tokens; both
// least-squares fitted on relative error from measured points, with the
// ranges the points cover. Built-ins (BuiltinProfiles) come from
// ../shared/profiles: DistServe's OPT-13B TP1 and OPT-66B TP4 A100 fits
// (evaluated on a grid and refitted with one coefficient set) and
// Splitwise's measured Llama2-70B TP8 medians on A100 and H100; each names
// its source. LoadProfiles reads measured points from JSON.
//
// # Scoring
//
// Demand over a horizon is reduced to moments of the request shapes:
// rate λ, E[L], E[L²], expected output E[o] (requested output through the
// learned discount) and the decode context weighted by output tokens. For
// a split, the prefill pool of n engines with total service rate Σμ has
// predicted TTFT = backlog/n + S_f + W_q: S = n/Σμ is the mean service
// time and ρ = λ/Σμ over all requests (they all load the engines); S_f is
// the own prefill time of the requests that can meet the TTFT SLO at all
// (input up to where the reference profile's prefill reaches the SLO;
// the others miss whatever the split and must not drive it); W_q is the
// latency_quantile (default 0.5) of an M/M/1 queue's waiting time per
// engine, S/(1−ρ)·ln(ρ/(1−q)) when ρ > 1−q; backlog is the resident
// queued and running prefill seconds of the engines that stay. The
// decode pool with Σ(1/m) token capacity (m = per-sequence step cost at
// the horizon's mean context) has TPOT = ā/(1 − λE[o]/Σ(1/m)) × decode
// correction, and predicted KV = λE[o]·TPOT sequences × mean context.
// Pressures are latency / SLO; the decode pressure is also at least KV
// need / physical KV capacity. Each phase takes the worse of the two
// horizons, and never less than its observed pressure scaled by engine
// counts (n0/n) once min_observations latencies were seen: reality wins
// when it is worse than the model. A split's score is max(min(prefill,
// score_cap), min(decode, score_cap)) + drain_cost_weight × seconds of
// resident work the moving engines must drain: a phase past score_cap
// (default 2) in every split is past saving, and chasing it would only
// starve the other phase. Movers are taken in order of drain cost (then
// id), so every split is O(1) from prefix sums: no per-split allocation.
// Full precision is carried through scoring and gates; the journal and
// state hold values rounded to 6 decimals (roundJ).
//
// Defaults (latency_quantile 0.5, source_limit 0.6, score_cap 2, target
// 0.8, hysteresis 0.1, confirm 3, cooldown 30 s, dwell 120 s) were chosen
// on the simulator (sim/: 16 OPT-66B TP8 engines; Azure conv+code at 2×,
// 4×, 6×, 8× rate; Mooncake conversation at 0.1×–0.3×): SLO attainment
// 83.6/79.1/71.2/49.2% against 84.8/77.0/69.2/46.7% for the best static
// split in hindsight and 84.3/79.9/72.8/22.5% for the threshold policy
// on Azure; 29.2/28.8/27.8% against 29.3/29.0/28.6% (static) and
// 29.3/26.4/19.0% (threshold) on Mooncake, with 6–20 moves.
//
// The decode correction is observed TPOT / modelled TPOT at the decode
// engines' current residency (clamped to [0.5, 2]), used once at least
// min_observations TPOTs were seen; the output estimate (learned discount
// actual/requested, and the mean output of requests without a requested
// output) is built from the outputs history once per step and used for
// both horizons; it is switched off (discount 1, default_output_tokens)
// while the outputs window holds overflow.
//
// # decision_basis (closed set)
//
//   - offered_demand: demand complete; scored as above.
//   - observed_pressure: demand incomplete (unsized offers pending beyond
//     pending_tolerance, or an arrivals overflow cohort with zero requested
//     output) and no recovery ratio applies; pressures are the observed
//     phase ratios scaled by engine counts (n0/n), raised to what the
//     priced part of the demand predicts (a lower bound).
//   - recovery: demand incomplete, queued_prefill_s > 0 and a prefill
//     engine exists; prefill pressure is recovery_prefill_ratio =
//     max(observed, (running + queued prefill s)/(prefill engines × TTFT
//     SLO)), decode the observed ratio.
//   - no_engines: no live serving engine; hold.
//
// Every decision exposes recovery_prefill_ratio, queued_prefill_s and both
// observed ratios, whatever its basis.
//
// # Deciding and gates
//
// The controller proposes one move toward the best split only when the
// best split is not the current one, the current split's worse phase is
// above target_pressure, and the best score beats the current one by more
// than hysteresis_margin. The proposal then passes, in order, role_floors,
// live_availability (no engine draining or switching), source_pressure
// (the source role's pressure after the move < source_limit; stricter
// than target_pressure so that a donor keeps headroom for growth),
// kv_limit (decode to prefill: KV need <= kv_headroom × remaining
// capacity; unknown capacity is not judged), demand_evidence (decode to
// prefill: evidence closed and the envelope of needed decode engines
// kept), cooldown (since the last move anywhere), dwell (a candidate past
// its own dwell), profile_coverage (a candidate whose own profile covers
// the destination role and the observed shapes; engines without a profile
// are scored with the default profile and never moved) and confirmation
// (the same direction chosen on confirm_steps consecutive steps; any hold
// resets it). All gates are evaluated and journalled; the first failing
// one is blocked_gate.
//
// # Consolidation evidence
//
// Risk events: a move, or a step whose decode is breaching (observed TPOT
// ratio > 1 with enough observations, or predicted decode pressure > 1).
// The evidence cutoff is the latest risk within the demand window (else
// now − window); evidence counts arrivals only in buckets wholly after the
// cutoff and not invalidated (buckets.History.Evidence). closed is true
// when span_s >= required_span_s (min_evidence_span_s) and arrivals >=
// required_arrivals. short/long_decode_engines are the smallest decode
// pools meeting target_pressure on each horizon, envelope the larger;
// trend_ratio is the short over the long arrival rate.
//
// # Roles, moves, state
//
// The RoleTable is rebuilt on every role, state or liveness change and
// published through an atomic.Pointer: routers read it lock-free with 0
// allocations. A moving engine is draining (in neither list) until
// MoveDone. DryRun, the default actuator, completes moves at once. An
// engine upserted without a role takes its restored role, else the role
// with fewer engines. PersistedState (roles, last move times, pending
// confirmation, risk events, sequence) is written atomically by SaveState
// (temp file, fsync, rename); an engine mid-move is saved in its target
// role.
//
// # Concurrency and allocation
//
// All methods are safe for concurrent use; one mutex guards the engine
// table and steps, Roles takes none. Step reuses its snapshot buffers; it
// allocates the Decision's gate list and small slices only.
package controller
