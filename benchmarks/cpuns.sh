#!/usr/bin/env bash
# CPU time per op of one benchmark, for hosts too loaded for wall-clock
# ns/op: perf stat task-clock of the benchmark run N2 times minus N1 times
# (setup and the trace load cancel), divided by N2-N1.
#   benchmarks/cpuns.sh 'ArrivalRecord$' 1 [N1 N2]
# BIN=/path/to/benchmarks.test uses that test binary (go test -c) instead
# of building one, so that two commits can be measured interleaved.
# Needs perf (Debian: linux-perf). Run from the repository root.
set -euo pipefail
re=$1; cpu=${2:-1}; n1=${3:-2000000}; n2=${4:-22000000}
if [ -n "${BIN:-}" ]; then
  bin=$(realpath "$BIN")
else
  bin=$(mktemp)
  trap 'rm -f "$bin"' EXIT
  go test -c -o "$bin" ./benchmarks/
fi
cd benchmarks
tc() { perf stat -x, -e task-clock "$bin" -test.run '^$' -test.bench "^Benchmark$re" -test.benchtime "${1}x" -test.cpu "$cpu" 2>&1 >/dev/null | grep task-clock | cut -d, -f1; }
a=$(tc "$n1"); b=$(tc "$n2")
awk -v a="$a" -v b="$b" -v n="$((n2 - n1))" 'BEGIN { printf "%.2f\n", (b - a) * 1e6 / n }'
