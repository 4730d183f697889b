// Package benchmarks runs Narwhal's hot paths beside the structures a
// router would otherwise use (a Prometheus histogram, a mutex-guarded map)
// in the same binary, on shapes drawn from real traces. It holds only
// benchmarks; results and the commands that produced them are in README.md.
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 ./benchmarks/
//
// Trace-driven benchmarks look for shared/traces beside (or above) the
// repository and skip, saying so, when it is absent.
package benchmarks
