// Package buckets holds the core's time-bucketed evidence: demand history
// (arrivals, residency, completed outputs), unsized offers, SLO attainment
// and observed latency pressure, on an allocation-free, lock-free hot path
// built on package ring.
//
// # Demand history
//
// A History is one kind's ring of buckets of BucketWidth (min of one
// second, the controller step and the minimum evidence span). Each bucket
// holds ExactCells (128) exact shape cells, one overflow cohort and one
// unsized cell. The cells are an open-addressed table keyed by shape, in 16
// groups of 8: a shape's home group comes from its hash (ProbeStart), and
// it probes its home group then the next one (ProbeWindow = 16 cells),
// taking its own cell or the first free one, claimed by CAS; a shape that
// finds neither within its window goes to the overflow cohort. One control
// byte per cell (free, or 7 bits of the shape's hash) lets a writer decide
// eight cells at a time, so a hit or a miss in a full table costs two loads
// and no key comparisons. A bucket never holds more than 128 exact shapes
// and in practice fills nearly all of them before overflowing; once a
// shape overflows in a bucket, its later observations there overflow too
// (cells are never freed within a bucket). The overflow cohort keeps every
// count and is priced by its
// largest input and largest requested output (atomic maxima); an overflowed
// observation with requested output 0 marks the cohort ZeroOutput, i.e.
// decode demand incomplete (Window.DecodeIncomplete).
//
// Outputs history with overflow: HasOverflow (equivalently
// Window(...).Overflow.Count > 0 over the retained span) tells the
// controller that learned output discounts must be disabled; the overflow
// expires with its bucket, four demand windows later.
//
// Retention: arrivals and residency one demand window, outputs four (see
// NewDemand). A History holds floor(retention/width)+1 buckets, so the
// retained span (start of the oldest retained bucket to the start of the
// newest) never exceeds the retention, while a window of the full retention
// ending in the newest bucket, boundary bucket included, is still held.
//
// # Timestamps and refusals
//
// Record, RecordUnsized, Reprice and the attainment and pressure Record
// return false and change nothing for: negative timestamps; token counts
// below 0 or above MaxTokens (1<<24-1); a timestamp whose bucket is older
// than the newest bucket minus the retention; a timestamp more than a day
// (or one retention, if longer) ahead of the newest bucket, unless the
// previous such refused record lies within one retention of it (see
// ring.Ring.Admit: a single stray timestamp never wipes the history, an idle
// gap followed by real traffic costs one record). A record that lands in a
// newer bucket advances the newest bucket and expires, right there, every
// bucket that fell out of retention: recording prunes with no controller
// running. Prune drains whatever is left and returns what it expired;
// Expired returns the running total (recording and lazy clears included).
//
// # Windows and evidence
//
// Window(from, to) covers every retained bucket that intersects
// [from, to], both inclusive: the bucket holding from is included whole (a
// cohort crossing the boundary counts whole, at most one extra bucket),
// bucket k being [k*width, (k+1)*width) for writers and readers alike. It
// appends each bucket's non-empty exact cells, oldest bucket first, to the
// caller's buffer; the summary's FromNs/ToNs are the covered buckets'
// bounds, clamped to what is retained (Buckets counts them, empty or not). Evidence(cutoff, to) is the conservative opposite: only
// buckets starting at or after cutoff count, invalidated buckets are
// skipped (and counted in SkippedInvalid), and buckets before the oldest
// record ever are not evidence. SpanNs runs from the start of the oldest
// counted bucket to the end of the newest (the bucket holding to, which may
// still be filling).
//
// # Repricing and boundary evidence
//
// Reprice(arrival, from, to) moves one count from shape from to shape to
// inside arrival's bucket (false if that bucket is gone or holds no from);
// offers never repriced keep their estimate. Our reading of boundary
// evidence (DESIGN.md): an exact cell is priced by its own shape and has no
// boundary; the overflow cohort's boundary is the set of observations that
// define its price, i.e. those at its maximum input, those at its maximum
// requested output, and those with requested output 0. The maxima words
// count how many observations sit at the maximum. When a repricing moves
// the last observation at a maximum (or the last zero-output one) out of
// the cohort, the bucket's boundary evidence becomes invalid: its maxima
// stay where they were (conservative price, ZeroOutput stays set), Window
// counts it in InvalidBuckets, and Evidence skips it until it expires.
// Counting at the maximum saturates at 2^25-1 observations, after which the
// boundary never invalidates (it cannot have moved entirely). If the bucket
// is reused for a newer epoch while a reprice is in flight, the observation
// leaves with its bucket (counted by Expired) and Reprice returns false.
//
// # Concurrency
//
// Every method is safe for concurrent use. Writers never block each other
// or readers. A History counts in one stripe until two writers have been
// seen to race on a counter (a lost compare-and-swap); from then on, for
// good, each writer counts in its P's stripe (ring.Stripe) and reads sum
// the stripes (LongAdder's rule: a router recording from one goroutine at
// a time never pays for the P lookup).
// A reader running alongside writers sees each counter at some instant:
// it may miss an observation still in flight, see a repriced observation
// missing (the count leaves its old cell before it reaches its new one;
// never twice), see an overflow count whose maxima lag by in-flight
// records, or miss a bucket that is being reused for a newer epoch. Once
// writers stop, reads are exact, and every observation ever recorded is
// either in a retained bucket or counted by Expired, exactly once (the
// race test checks recorded = retained + expired). Control bytes are hints
// kept exact at rest: a writer sets a cell's byte right after claiming its
// key, a drain clears the byte before the key and gives it back if a newer
// epoch took the key meanwhile, and a lookup that finds a live key behind a
// free byte repairs it.
//
// Record's fast path (a timestamp in the newest claimed bucket, the shape
// in its cell or a full window sending it to the overflow) reads the
// bucket from ring.Ring.Claimed and its slot from the history's cur (no
// division, no slot lookup; a pair of the two that disagree never counts,
// since every word of another slot carries another tag), the shape's two
// control words, the key of its first candidate in each group, and counts
// with one compare-and-swap on a live word of the bucket; everything else
// (a new bucket, a claim, more candidates, a stale word, a lost swap)
// leaves for the general path, the fast path having changed nothing. It needs no straggler drain after the
// swap: a drain of the bucket before the load leaves the word empty or
// newer, one between the load and the swap makes the swap fail, one after
// it takes the count. The empty word of tag 0 looks live, so the fast path
// leaves zero words to the general path (TestFastPathLeavesTheZeroWordTo-
// TheGeneralPath drains the bucket at that point through a hook that only
// `-tags narwhal_hooks` builds compile; .ci/run runs it).
//
// # Allocation
//
// Record, RecordUnsized, Reprice, Prune, Advance, Evidence, HasOverflow,
// the Demand offer calls, Attainment.Record/Window, Pressure.Record/Window
// and Window into a buffer of enough capacity allocate nothing
// (TestHotPathsDoNotAllocate). Stats,
// Snapshot and the collectors (scrape time) scan the ring.
//
// # Introspection
//
// Demand.Snapshot is demand_history: per kind retained cells (claimed exact
// cells in retained buckets), cell limit (128 per retained bucket), counted
// observations and overflow observations, plus unsized pending and
// observations (pending never drops below zero: an end without a start is
// ignored). NewCollector exports the same as narwhal_demand_history_*
// (retained_cells, cell_limit, observations, overflow_observations by kind;
// unsized_pending, unsized_observations; expired_observations_total by
// kind; refused_records_total by kind and reason too_old/too_far;
// jumps_total by kind, so a refused stray timestamp or a history reset by
// an idle gap is never silent); NewAttainmentCollector exports
// narwhal_attainment_* (requests, ttft_met, tpot_met by outcome;
// covered_seconds).
//
// # Attainment and pressure
//
// Attainment buckets are monitor_interval_s wide, per outcome (completed,
// failed, expired, refused) counting TTFT-met, TPOT-met and total; the
// caller retains four demand windows (NewAttainment's retention). CoveredS
// is the age at now of the oldest retained bucket's start (the newer of
// the oldest record ever and newest minus retention), capped at the
// configured retention; 0 before the first record. Pressure keeps per
// bucket the count, sum and maximum of a latency/SLO ratio as fixed point
// (resolution 2^-16, clamped at 1e4); NaN, infinities and negative ratios
// are refused.
package buckets
