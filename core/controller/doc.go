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
// Engines draining or switching toward a role are scored in it (its
// capacity and KV count, they are not movers): a split is where the pools
// stand once the moves in flight land, so a deficit is not answered twice.
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
// the horizon's mean context) has TPOT = ā/(1 − λE[o]·g/Σ(1/m)) ×
// decode correction (g the decode load correction below), and predicted
// KV = λE[o]·TPOT sequences × mean context. The λ a decode pool sees is
// what the split's prefill pool delivers: the offered rate plus the
// resident prefill backlog drained over the horizon (backlog·Σμ/n/span),
// at most Σμ. Behind a saturated prefill pool, decode priced at the
// offered rate was over-predicted 5–10× (the concatenation's conv part:
// 9 decode engines predicted past their SLO and KV capacity while they
// measured 0.3 and 11 % of KV), which kept the prefill pool starved.
// Resident KV calibrates the KV prediction downward: with at least 16
// resident sequences per decode engine and none moving to decode, every
// split's predicted KV is scaled by resident / predicted at the current
// split, clamped to [0.5, 1] (kv_correction; the KV need is never below
// the resident KV anyway). Pressures are latency / SLO;
// the decode pressure is also at least the long horizon's KV need /
// physical KV capacity. Prefill takes the worse of the two horizons;
// decode the larger of the long horizon and the mean of both (the
// prefill queue smooths a burst before it reaches decode, and KV holds
// sequences: sizing decode for the short horizon's peak starved prefill
// on the simulator's Azure conv, 83 % against 94 % without). Each phase
// is never less than its observed pressure scaled by engine
// counts (n0/n) once min_observations latencies were seen: reality wins
// when it is worse than the model. The queueing formulas stop at
// utilization 0.99: past it a pool is saturated and its latency grows
// linearly with the excess load over the horizon's span, so saturated
// splits stay finite and ordered by how much of the deficit they remove.
// A split's score ranks it by its worse phase, then its other phase, then
// drain cost: level(worse) + 0.01·level(other) + drain_cost_weight ×
// seconds of resident work the moving engines must drain, where
// level(p) = p up to score_cap and score_cap·(1 + ln(p/score_cap))
// beyond (continuous and increasing, so a phase far past its SLO still
// ranks splits, and the hysteresis margin is relative there). Movers are
// taken in order of drain cost (then id), so every split is O(1) from
// prefix sums: no per-split allocation. Full precision is carried through
// scoring and gates; the journal and state hold values rounded to 6
// decimals (roundJ).
//
// Defaults (latency_quantile 0.5, source_limit 0.65, score_cap 1, target
// 0.8, hysteresis 0.1, confirm 3, reversal confirm 5, cooldown 10 s,
// dwell 60 s, max_moves_per_step 4, burst_pressure 10, burst_arrivals
// 60, prediction_arrivals 60) were chosen on the simulator (sim/:
// 16 OPT-66B TP8 engines, 1 s step; Azure code, Azure conv, Mooncake
// conversation and their concatenation, each at the rate scale of
// benchmarks/slo and at 0.8× and 1.2× of it, seeds 1 and 2). The results
// against the best static split and a threshold planner are in
// benchmarks/slo/README.md. source_limit was 0.6 until the Azure conv
// row at seed 2 showed it on a knife edge (a needed move to 10:6
// predicted to leave decode at 0.61 was held 70 s: 84.5 against 94.4 %);
// 0.65 passes it on both seeds without changing any other row by more
// than 1.5 pt (0.7 and above cost Mooncake 2× the reversals). An earlier score capped each phase at 2 and
// saturated pools at +Inf: once a phase was past the cap in every split
// all splits tied and the controller held while that phase drowned.
//
// The decode corrections use the observed TPOT once at least
// min_observations were seen, at the decode engines' current residency.
// With at least 16 resident sequences per decode engine, the decode load
// correction g = (observed TPOT − ā) / (modelled step − ā) scales the
// per-sequence cost (a linear fit over all batch sizes misprices the
// slope where the engines run, and 1/(1−ρ) amplifies that); otherwise the
// decode correction = observed / modelled TPOT scales the TPOT. Both are
// clamped to [0.5, 2], and only one is not 1. The output estimate
// (learned discount actual/requested, and the mean output of requests
// without a requested output) is built from the outputs history once per step and used for
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
// The controller proposes a move toward the best split only when the
// best split is not the current one, the current split's worse phase is
// above target_pressure, and the best score beats the current one by more
// than hysteresis_margin. Two measurements stand in for those conditions.
// A decode pool filling up: when the best split adds decode engines and
// the decode engines' resident KV, growing at its rate over the last 5 s,
// would pass kv_headroom of their capacity within kv_lead_s (15 s) while
// growing by at least half of that limit, the move is proposed although
// both phases may be within target, and counts as a confirmed deficit
// (kv_exhaustion_projected in the journal). A prefill-to-decode move takes
// a drain (the prefill engines' finished prompts must find decode KV) and
// the switch, about the lead; started once KV is full it lands only after
// decode has freed KV, while TPOT floods (Azure conv started at 14:2: the
// first moves took 26 s to land and the row ended at 84.2 %; with the
// projection 91.5 %). The growth condition keeps long-context traffic
// that runs its decode KV near capacity in steady state (Mooncake) from
// moving on every fluctuation: without it Mooncake x0.8 lost 2.4 pt at
// seed 1. And a prefill queue measured past the TTFT SLO (as below)
// waives the hysteresis margin for a move toward prefill: in the log
// range of the score one engine more for a drowning prefill pool, less
// its drain cost, was worth less than the margin, and the issue's
// concatenation held 7:9 for 130 s while its queue grew from 11 to
// 300 s. Together (seeds 1-4): the concatenation 78.16 / 79.04 /
// 77.30 / 82.66 -> 78.86 / 85.45 / 85.66 / 85.48 %, comparable segments
// 83.00 / 80.90 / 82.45 / 80.95 -> 86.99 / 86.85 / 87.02 / 87.07 %
// (static-best 81.78), Mooncake x0.8 within 0.1 pt, Azure code and conv
// unchanged.
//
// One prediction needs a measurement: while the outputs history holds
// overflow, learned output discounts are off (a spec rule) and decode is
// priced at the requested outputs and the default for unbounded ones, an
// upper bound. A move toward decode then waits until a measurement says
// decode is short: observed TPOT past target_pressure of its SLO (over
// min_observations), resident decode KV past target_pressure of the pool's
// capacity, or its projected exhaustion (above); until then the decision
// holds ("decode deficit predicted from unlearned outputs, not measured").
// With no completed request yet the prediction still moves on its own: a
// cold start on a decode-heavy mix must not wait for the first outputs.
// On the concatenation at seed 1, with overflowed outputs, conv's
// decode was predicted at pressure 0.84-1.0 on 8 engines (target 0.8;
// observed 0.42, resident KV 31 % of capacity); the move to 7:9 at 989 s left
// prefill one engine short when conv's peak came, and its queue reached
// 290 s. With this rule 78.86 -> 84.48 % (its conv part 61.4 -> 73.6 %);
// no other run of the SLO benchmark (five rows x seeds 1-4) or its
// neighbours changes. Applying it to the no-outputs case too changes no
// benchmark run but fails the cold-start tests (a decode-heavy load on a
// fresh core never moves).
//
// The upper bound also weighs on the other direction: priced at it,
// decode looked 3-800x past its SLO on 8 engines while TPOT measured
// 0.3-0.5 of it, so every split that gave prefill an engine scored
// worse, and the concatenation held 8:8 through conv at x8.5
// (74 %; 9:7 attains 91.5 %). So once TPOT is measured
// (min_observations) and below target_pressure, and while the prefill
// queue is within the TTFT SLO, the mean output is scaled down
// (OutputScale, journalled as output_scale; never up, at least 0.05)
// until the decode model predicts the measured TPOT at the current split
// over the long horizon: the model keeps its shape across splits
// (batching, KV, the capacity cliff) and takes its level from the
// measurement. One factor serves both horizons, as the output estimate
// does (built once, reused across both: a spec rule); a factor per
// horizon gave 96.30 % below, one 95.60 %. Our reading: the spec fixes
// how an overflow cohort is priced, not that an upper bound outweighs a
// measurement. Measured TPOT past target_pressure leaves the
// upper bound standing: on Azure conv x9 (overloaded) calibrating there
// too delayed the move toward decode by 60 s (56.2 -> 50.4 %); so does a
// prefill queue past the SLO (decode is then starved, and its TPOT says
// nothing of the release to come: 37.4 % on conv x9 without that
// condition). The concatenation at seed 1: 84.61 -> 95.60 % (its
// conv part 73.6 -> 96.9 %); no other run of the benchmark or its
// neighbours changes (overflowed outputs appear only there).
//
// A learned output estimate is calibrated the same way, with one more
// condition: the short window's mean output must not exceed the long
// window's. Whether the outputs history overflows is chance (the same
// workload overflowed at seed 1 and not at seeds 2-4), and the learned
// price was off in the same direction: on the concatenation at
// seed 2, 6 decode engines were priced at 1.2-2.7x their SLO (7 at
// 0.6-0.8) while TPOT measured 0.41-0.47, so source_pressure held conv's
// move to 10:6 from 1051 s until the queue had grown to 75 s (seed 1,
// calibrated, moved at 1049 s). The condition is the mix: TPOT measures
// the sequences resident now, admitted over the long window, so when
// arrivals turn heavier (the code -> conv switch of the comparable
// segments) the measurement lags the mix and calibrating to it
// under-prices decode: without the condition the comparable segments at
// seed 4 fell 87.07 -> 76.75 % (5 decode engines at conv's start, TPOT
// 4.5x its SLO). Requiring the short mean output to be 1.2 or 1.3x the
// long one before holding the calibration back lost the same run; 0.95x
// lost the concatenation at seed 2 (83.74 %). The upper bound
// keeps its calibration across a shift (with the condition the issue's
// concatenation at seed 1 fell 95.81 -> 90.62 %): it is far from any
// measurement, a learned estimate is not. With no completed output yet
// (no estimate to calibrate) nothing changes. Seeds 1-4: Azure conv x7.5
// 94.36 / 94.36 / 94.42 / 94.36 -> 97.40 / 97.43 / 97.37 / 96.07 %
// (static-best 94.62), the comparable segments 86.97 / 86.94 / 87.07 /
// 87.07 -> 89.09 / 88.77 / 89.07 / 88.97 %, the concatenation
// 95.81 / 92.96 / 92.78 / 87.97 -> 95.81 / 90.83 / 93.33 / 92.35 %,
// Mooncake x0.8 91.24 / 91.61 / 90.77 / 91.95 -> 91.34 / 91.47 / 91.22 /
// 91.44 %, Azure code unchanged. On seeds 5-8, run after the rule was
// fixed, Azure conv gains 2.7-4.5 pt at every seed and the comparable
// segments lose 9.8 pt at seed 5 (the code segment, calibrated, ends at
// 15:1 and conv starts on one decode engine); mean +0.69 pt over the 20.
//
// The prefill side has its counterpart: a predicted prefill deficit from
// fewer than prediction_arrivals (60) requests in the short window does
// not move an engine until the prefill pool measures a shortage (a queue
// past the TTFT SLO, or observed TTFT past target_pressure); the decision
// holds ("prefill deficit predicted from few arrivals, not measured"). A
// few arrivals are a few prompts' sizes: Mooncake's reach 126k tokens, and
// at x0.8 its short window holds about 27 requests; the prefill pool
// was predicted 1.7-30x past its SLO while TTFT measured 0.2-0.5 of it,
// and such moves were reversed 35-86 s later. Mooncake x0.8 at
// seeds 1-4: 91.68 / 89.34 / 89.65 / 91.75 -> 91.11 / 91.49 / 91.30 /
// 89.46 % (mean 90.61 -> 90.84) with 26 / 42 / 34 / 32 -> 13 / 14 / 10 /
// 19 moves; the concatenation 84.48 / 85.45 / 85.66 / 85.48 ->
// 84.63 / 85.76 / 85.89 / 86.00 % with about half the moves; Azure code,
// Azure conv and the comparable segments unchanged (Azure code's and
// conv's short windows hold about 100 and 400 requests on average). 45
// and 80 give the same results within 0.04 pt, 30 less.
// Requiring a measured shortage for every prediction toward prefill
// instead cost Azure conv 14-16 pt: its onsets show in the prediction
// long before they show in TTFT.
// The decode side has the same rule: a predicted decode deficit from
// fewer than prediction_arrivals requests in the short window does not
// move an engine until decode measures a shortage (observed TPOT past
// target_pressure, resident KV past target_pressure of capacity, or its
// projected exhaustion); the decision holds ("decode deficit predicted
// from few arrivals, not measured"). A few Mooncake arrivals with 30-54k
// token contexts predicted decode 16-124x past its SLO while TPOT measured
// 0.65 of it, and the prefill engine given away met the next long
// prompts (Mooncake x0.8 at seed 1, 4197-4202 s: 48 more requests missed
// than static:10 over the next 200 s). Mooncake x0.8 at seeds 1-4:
// 91.11 / 91.61 / 91.30 / 90.82 -> 91.24 / 91.61 / 90.77 / 91.95 %; the
// issue's concatenation 95.60 / 92.96 / 92.78 / 87.86 -> 95.81 / 92.96 /
// 92.78 / 87.97 %; the comparable segments within 0.1 pt, Azure code and
// conv unchanged (their short windows hold 100-400 requests); every
// neighbouring run of the benchmark the same or better (Mooncake x0.96
// seed 1 +2.3 pt).
//
// A proposal moves k engines: the distance to the best split, at most
// max_moves_per_step, and only one unless measured latencies confirm the
// destination phase is past its SLO (observed ratio
// > 1 over min_observations): a prediction from a few arrivals moves one
// engine at a time, a confirmed large deficit is closed in one decision
// instead of one engine per cooldown. A prefill queue measured past the
// TTFT SLO ((running + queued prefill s) / (prefill engines × SLO) > 1)
// confirms a prefill deficit too: first tokens report a backlog only
// once it is served. Decode KV measured past target_pressure of the
// decode pool's capacity confirms a decode deficit the same way: TPOT
// reports a KV shortage only once sequences have waited for KV, and by
// then the prefill engines that must move cannot drain (their finished
// prompts wait for the same decode KV). On Azure conv started at 14:2
// the first moves took 50 s to land and the row ended at 39.6 %; with
// this rule 84.2 % (the concatenation 68.45 -> 78.16 / 75.18 ->
// 79.04 % at seeds 1 / 2, comparable segments 55.15 -> 83.00 / 54.65 ->
// 80.90 %, Mooncake x0.8 91.93 -> 91.67 / 90.45 -> 89.29 %; 0.85 of
// capacity keeps the concatenation's gain but not the comparable
// segments', 0.9 keeps neither; requiring KV to be growing as well cost
// Mooncake seed 1 1.5 pt). So does a burst predicted from many arrivals:
// current prefill pressure > burst_pressure (10) with >= burst_arrivals
// (60) requests in the short window. On Azure code x4 the first
// burst otherwise took one engine at 50 s and four more only after the
// cooldown (SLO 83.85 -> 84.28 / 85.00 % at seeds 1 / 2; comparable
// segments 52.38 / 51.22 -> 55.03 / 54.62 %; no other run of the SLO
// benchmark or its neighbours changes; pressure 7-12 at 60 arrivals and
// 60-100 arrivals at 10 give the same results; pressure 5 costs the
// issue's concatenation 17 pt, and 20 arrivals cost Mooncake x0.8 up to
// 1.7 pt: giant Mooncake prompts predict high pressure from few
// arrivals). The proposal then passes, in order,
// role_floors, live_availability (no engine draining or switching, except
// engines already moving toward the destination when the deficit is
// confirmed: on the simulator a draining prefill engine waits until its
// finished prompts find decode KV, so a move toward a saturated decode
// pool took 30–60 s and blocked every other move meanwhile),
// source_pressure (the source role's pressure after the move <
// source_limit; stricter than target_pressure so that a donor keeps
// headroom for growth; when the destination's deficit is confirmed as
// above, it is also enough that the source stays below the
// destination's pressure after the move: when both phases are short the
// score decides, instead of holding while the worse phase drowns),
// kv_limit (decode to prefill: KV need <=
// kv_headroom × remaining capacity; unknown capacity is not judged; with
// a prefill backlog the need includes its release, KVSurgeTokens: the
// resident KV plus the backlog's prompts at the mean decode context, all
// of them when the split's prefill pool releases the backlog faster than
// a sequence decodes, else the share resident at once. The release is
// judged only while the current split could hold it: past that, the
// backlog overflows decode whatever the split. Our reading: the
// delivered-rate pricing spreads a backlog over the horizon, while a
// prefill pool that catches up releases it within seconds; on Azure conv
// x8.5, where 9:7 is the only good split (91.5 %; 8:8 74.2 %, 10:6 11.4 %),
// moves to 10:6 and 11:5 during a 110 s queue collapsed decode),
// demand_evidence (decode to prefill: evidence closed and the envelope of
// needed decode engines kept; while the evidence is open, a prefill queue
// measured past the TTFT SLO, as above, still lets one engine move: the
// window guards against consolidating decode on a demand dip the model
// predicts, and a measured backlog is no prediction. On the issue's
// concatenation the conv part's queue grew from 41 to 90 s while an open
// window held the first move 9 steps; SLO 67.31 -> 68.45 % at seed 1,
// 75.11 -> 75.18 % at seed 2, Mooncake x0.8 91.61 -> 91.93 / 90.63 ->
// 90.45 %, no other row changes), cooldown (since the last move anywhere),
// dwell (candidates past their own dwell), profile_coverage (candidates
// whose own profile covers the destination role and the observed shapes;
// engines without a profile are scored with the default profile and never
// moved) and confirmation (the same direction chosen on confirm_steps
// consecutive steps, reversal_confirm_steps when the move reverses the
// direction of the last move; any hold resets it). Role floors, source
// pressure, KV limit, demand evidence and the candidates found each may
// lower k; a gate fails when it allows no engine, and the gates after it
// are then judged for one. All gates are evaluated and journalled; the
// first failing one is blocked_gate; the journal's proposed split is the
// one the decision moves to.
//
// # Consolidation evidence
//
// Risk events: a move (one per decision, whatever k), or a step whose decode is breaching (observed TPOT
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
// with fewer engines. UpsertEngines registers a batch with one role-table
// rebuild (an agent's snapshot of new engines). PersistedState (roles, last move times, pending
// confirmation, risk events, sequence) is written atomically by SaveState
// (temp file, fsync, rename); an engine mid-move is saved in its target
// role. The direction of the last move is saved with it
// (last_move_dir), so a restart keeps the stricter confirmation of a
// reversal.
//
// # Journal and checkpoint (OpenJournal)
//
// The Journal is a write-ahead log: each Decision is one JSON line,
// written and fsynced inside Step before its moves reach the actuator.
// state.json is a checkpoint carrying the sequence of the last record it
// includes, saved in the background after each durable record and never
// ahead of the journal; Apply replays a record (roles, last move times,
// cooldown clock and direction, confirmation). After any crash the state
// is the checkpoint plus the records after it, so a move journalled
// before a kill is never undone or issued again. Risk events and the
// output-discount lock-out are not in the records: they come from the
// checkpoint (advisory, at most one step old). Choices: one sequence for
// both files; a torn tail (a record without its newline or not a whole
// JSON object) is cut off when the journal opens; a failed write is cut
// back to the last whole record and retried with the records after it
// (in order, up to MaxPending in memory), counted
// (narwhal_journal_write_errors_total), logged once per change of error
// and reported by Healthy; the active file is renamed to
// journal-<first seq>.jsonl past MaxBytes (the directory fsynced), Keep
// rotated files are retained (never one the checkpoint does not cover),
// and opening reads only the files that hold the checkpoint's successors
// or the last Ring records. The rotation is hand-written rather than
// lumberjack's, which can neither fsync nor cut back a partial write. A
// missing, empty or torn state.json falls back to replaying the retained
// journal; an impossible one (unknown role, a time in the future) is an
// error naming the field.
//
// # Concurrency and allocation
//
// All methods are safe for concurrent use; one mutex guards the engine
// table and steps, Roles takes none. Step reuses its snapshot buffers; it
// allocates the Decision's gate list and small slices (candidates,
// moves) only.
package controller
