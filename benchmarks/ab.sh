#!/bin/sh
# ab.sh ROUNDS BIN... : runs ArrivalRecord and the Prometheus observe at
# -cpu 1 from each test binary (built with `go test -c ./benchmarks/`) in
# turn, ROUNDS times, so that every binary's median mixes the same minutes
# of host load; prints each binary's medians and its ratio. Run it from
# benchmarks/ (the benchmarks find ../shared/traces from there).
set -eu
rounds=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ "$i" -lt "$rounds" ]; do
	for b in "$@"; do
		"$b" -test.run '^$' -test.bench 'ArrivalRecord$|BaselinePrometheusHistogramObserve$' \
			-test.cpu 1 -test.count 1 -test.benchtime 1s |
			awk -v bin="$(basename "$b")" '/^Benchmark/ {print bin, $1, $3}' >>"$out"
	done
	i=$((i + 1))
done
sort -k1,1 -k2,2 -k3,3g "$out" | awk '
	function flush() { if (n) { med[key] = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; n = 0 } }
	{ k = $1 " " $2; if (k != key) { flush(); key = k; order[++m] = k } v[++n] = $3 }
	END {
		flush()
		for (j = 1; j <= m; j++) printf "%s median %.2f ns/op\n", order[j], med[order[j]]
		for (j = 1; j <= m; j++) { split(order[j], f, " "); bins[f[1]] = 1 }
		for (b in bins) printf "%s ratio %.3f\n", b, med[b " BenchmarkArrivalRecord"] / med[b " BenchmarkBaselinePrometheusHistogramObserve"]
	}'
