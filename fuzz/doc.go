// Package fuzz holds Narwhal's fuzz targets. Each decodes its input into
// an operation sequence or a wire message and checks invariants against a
// reference model (see core/buckets/buckettest) or a parser's contract.
// Seed corpora live under testdata/fuzz/<Target>/. Run one target, e.g.:
//
//	go test ./fuzz/ -run '^$' -fuzz '^FuzzDemandHistory$' -fuzztime 15s
//
// Without -fuzz, `go test ./fuzz/` replays the seed corpora as ordinary
// tests.
package fuzz
