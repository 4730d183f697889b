// Package ring is the time-bucket ring under every bucketed structure of the
// core (demand history, SLO attainment, observed pressure).
//
// A ring is a fixed, power-of-two array of slots. Bucket k covers
// [k*width, (k+1)*width) nanoseconds for writers and readers alike (widths
// are nanoseconds; sub-second widths work; nothing indexes by whole
// seconds). Bucket k lives in slot k mod slots. The ring holds
// floor(retention/width)+1 buckets: a bucket expires once its start lies
// more than the retention before the start of the newest recorded bucket.
// Pruning therefore advances from the newest recorded bucket, never from a
// clock; no function here reads the clock.
//
// Every value in a slot (counter, shape key, maximum) is one 64-bit word
// tagged with the low TagBits bits of its epoch. A writer adds with a single
// compare-and-swap that also checks the tag: a word of an older epoch is
// stale and is replaced (the lazy clear on write, and the writer accounts
// for the value it replaced as expired); a word of a newer epoch means the
// writer is a straggler whose bucket was reused, and it writes nothing.
// Readers skip words whose tag is not the epoch they read. Each slot also
// records the newest epoch claimed in it, so readers skip unused slots
// without reading their words.
//
// Expiry is exact. The record that advances the newest epoch drains (zeroes
// and accounts) the epochs that fell out of retention; a writer claiming a
// slot for a new epoch first makes sure the slot's previous epoch was
// drained; Prune drains anything left; a writer whose bucket expired while
// its write was in flight drains its epoch again after writing (a writer
// that only adds to a non-zero word of its own tag needs not: a drain
// either ran before its load, leaving the word zero or newer, or fails its
// compare-and-swap, or takes its count). Claimed, the newest epoch ever
// claimed, lets a fast path skip the slot lookup while it is retained. Drains name
// the exact epoch they expire. Since every change is a CAS on a tagged word,
// each observation is either in a retained bucket or has been accounted as
// expired exactly once: recorded = retained + expired. Tags are compared
// modulo 1<<TagBits (lazy clear on write, straggler detection); because a
// slot is drained before it takes a new epoch, the only way two far-apart
// epochs meet in a slot is a straggler racing with a jump of the ring, and
// even then its words are drained by their exact tag (an alias would need
// the jump to be an exact multiple of 1<<TagBits buckets).
//
// Far-future timestamps: see Ring.Admit. One stray timestamp more than a
// day (or one retention, if longer) ahead is refused and cannot wipe the
// history; two such records within one retention of each other move the
// ring (an idle gap followed by real traffic). Callers with a trusted clock
// may call Advance.
//
// Stripes: Stripe returns the id of the P the caller runs on (the runtime's
// own procPin, read as a hint and released at once), so structures keep one
// block of counters per P (at most MaxStripes) on separate cache lines and
// sum the stripes on read. (buckets.History uses its first stripe alone
// until writers contend.) Reads are exact once writers stop; while they
// run, a reader sees each word at some instant, not one instant for all.
//
// Why the ring keeps its own stripes instead of xsync.Counter
// (github.com/puzpuzpuz/xsync/v3, the design card's concurrency library,
// used elsewhere for maps): a slot's counter must carry its bucket's epoch
// tag in the same word as its value, so that one compare-and-swap both
// checks the epoch and counts (the lazy clear, straggler detection and
// drains by exact tag above). xsync.Counter is an untagged int64 striped
// behind a pointer; it could not do that, a bucket would need 130 of them
// per slot (128 cells, overflow, unsized) each with its own stripe array,
// and its Add takes a P token from a sync.Pool on every call. Measured side
// by side on one untagged counter (benchmarks/stripes_bench_test.go,
// Intel Xeon 2-vCPU guest, Go 1.26, 2026-12-01, medians of 6 of the CPU
// time per add, perf task-clock of 22M minus 2M adds, the host being too
// loaded for wall-clock figures): a ring stripe (Stripe, then an atomic
// add) 7.0 ns at -cpu 1 and 8.1 ns at -cpu 2, xsync.Counter.Add 12.4 and
// 12.3 ns; from every P at once 8.2 / 14.6 ns against 12.9 / 17.0 ns
// (wall-clock medians of the same run, inflated by the load: 18.9 / 23.3
// ns against 36.8 / 47.7 ns). The stripes stay.
//
// Allocation: nothing here allocates after Init; Admit, Claim, Add, SubOne,
// Drain, Prune and Range are allocation-free and lock-free.
package ring
