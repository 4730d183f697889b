#!/bin/sh
# Reproduces the tables in PROFILES.md: the five rows of README.md (same
# commands) at seeds 1-2 under each controller profile mode, one JSON
# object per line on stdout. Run from the repository root:
#   sh benchmarks/slo/profiles.sh > /tmp/profiles.jsonl
#   go run ./benchmarks/slo/profiles-table < /tmp/profiles.jsonl
# TRACES defaults to ../shared/traces; WARMUP (default 300) is the
# warm-up in seconds after which slo_attainment_after_warmup is counted.
# "exact false 0.99/1.01" are the exact profile 1 % off
# (--controller-profile-error): the band a 1 % profile error spans.
set -eu
T=${TRACES:-../shared/traces}
go build -o /tmp/narwhal-sim-profiles ./cmd/narwhal-sim
SIM="/tmp/narwhal-sim-profiles --engines 16 --json --quiet --policy narwhal --warmup ${WARMUP:-300}"
CODE="--trace $T/AzureLLMInferenceTrace_code.csv --rate-scale 4 --ttft-slo 1.5 --tpot-slo 0.1"
CONV="--trace $T/AzureLLMInferenceTrace_conv.csv --rate-scale 7.5 --ttft-slo 1.5 --tpot-slo 0.1"
MOON="--trace $T/conversation_trace.jsonl --rate-scale 0.8 --ttft-slo 10 --tpot-slo 0.1"
CAT="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --rate-scale 4,8.5,0.8 --ttft-slo 10 --tpot-slo 0.1"
CAT2="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --rate-scale 4,7.5,0.8 --slice :2185 --ttft-slo 1.5 --tpot-slo 0.1"
run() { # row seed slowdown mode calibrate [profile error, default 1]
  eval args=\$$1
  printf '{"row":"%s","seed":%s,"slowdown":%s,"mode":"%s","calibrate":%s,"error":%s,"result":' "$1" "$2" "$3" "$4" "$5" "${6:-1}"
  $SIM $args --seed "$2" --engine-slowdown "$3" --controller-profile "$4" --calibrate="$5" --controller-profile-error "${6:-1}" | tr -d '\n'
  printf '}\n'
}
for row in CODE CONV MOON CAT CAT2; do
  for seed in 1 2; do
    run $row $seed 1 exact false
    run $row $seed 1 exact false 0.99
    run $row $seed 1 exact false 1.01
    run $row $seed 1 exact true
    run $row $seed 1 prior true
    run $row $seed 1 prior false
    run $row $seed 1 none false
    for x in 0.7 1.3; do
      run $row $seed $x exact false
      run $row $seed $x exact false 0.99
      run $row $seed $x exact false 1.01
      run $row $seed $x nominal true
      run $row $seed $x nominal false
    done
  done
done
