// Package servicetest holds test doubles for the service. Recorder is an
// EventSink that records every accepted lifecycle call and refuses what the
// real core refuses (unknown engines, negative arguments), changing nothing
// when it refuses; fuzz tests compare it across replays.
//
// Concurrency: Recorder is safe for concurrent use (one mutex). Allocation:
// it appends one Call per accepted call; it is not for benchmarks.
package servicetest
