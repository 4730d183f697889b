#!/bin/sh
# Every draw a controller change is judged on (issue 20): the tune and
# held halves, the tune half from an even start, and dev draws 0..19, one
# `narwhal-sim suite --json` file per run in OUT (tune.json, held.json,
# even.json, devK.json), prior + calibrate, --exact=false. Then
#   go run ./benchmarks/slo/pairs OUT            # acceptance 1, run by run
#   go run ./benchmarks/slo/pairs BASE OUT       # OUT − BASE, paired
# Run from the repository root:
#   sh benchmarks/slo/draws.sh /tmp/draws-main
#   SIM=/tmp/nw-variant sh benchmarks/slo/draws.sh /tmp/draws-variant
# SIM: the narwhal-sim binary (default: built from this tree into
# /tmp/narwhal-sim); BASELINES: a directory of per-run baseline caches
# (default /tmp/narwhal-draws-baselines; the first pass computes them,
# 30-90 s a run on 2 AMD EPYC cores, all 23 runs in about 30 min; later
# passes about 30 s a run); DRAWS: the
# dev draws (default 0..19). Extra arguments go to every run (e.g.
# --variant narwhal=FILE). Progress on stderr.
set -eu
OUT=${1:?usage: sh benchmarks/slo/draws.sh OUT_DIR [suite flags...]}
shift
if [ -z "${SIM:-}" ]; then
  go build -o /tmp/narwhal-sim ./cmd/narwhal-sim
  SIM=/tmp/narwhal-sim
fi
BASELINES=${BASELINES:-/tmp/narwhal-draws-baselines}
DRAWS=${DRAWS:-$(seq 0 19)}
mkdir -p "$OUT" "$BASELINES"
runs="tune held even"
for k in $DRAWS; do runs="$runs dev$k"; done
total=$(echo $runs | wc -w)
i=0
for r in $runs; do
  i=$((i + 1))
  case $r in
  tune) args="--half tune" ;;
  held) args="--half held" ;;
  even) args="--half tune --even-start" ;;
  dev*) args="--half dev --dev-draw ${r#dev}" ;;
  esac
  echo "draws: $r ($i/$total)" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086 # args is a list of flags
  "$SIM" suite $args --exact=false --parallel 2 --baselines "$BASELINES/$r.json" \
    --json --quiet "$@" > "$OUT/$r.json.tmp"
  mv "$OUT/$r.json.tmp" "$OUT/$r.json"
  echo "draws: $r done in $(( $(date +%s) - start )) s" >&2
done
