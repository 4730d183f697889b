// Package fuzz holds Narwhal's fuzz targets. Each decodes its input into
// an operation sequence or a wire message and checks invariants against a
// reference model (see core/buckets/buckettest) or a parser's contract.
// Seed corpora live under testdata/fuzz/<Target>/. Run one target, e.g.:
//
//	go test ./fuzz/ -run '^$' -fuzz '^FuzzDemandHistory$' -fuzztime 15s
//
// Without -fuzz, `go test ./fuzz/` replays the seed corpora as ordinary
// tests. The inputs covered: demand history and attainment operation
// sequences, sequences of calls on one core (FuzzCoreAPISequence: the
// request lifecycle, engine calls, steps, moves, restores and restarts,
// with hostile arguments), router event bodies, engine metrics pages, and
// the files an operator writes or a crash leaves: profile files,
// state.json, narwhal-core's configuration and the agent's
// (FuzzAgentConfig builds the agent, so this package needs cgo, as the
// agent does).
package fuzz
