#!/bin/sh
# Reproduces the table in README.md: every row, every policy, one JSON
# object per line on stdout. Run from the repository root:
#   sh benchmarks/slo/run.sh > /tmp/slo.jsonl
# ORACLE=1 adds a schedule searched in hindsight per row (--policy oracle,
# about 2 minutes more on 2 cores).
# TRACES defaults to ../shared/traces (the project's read-only trace copies).
set -eu
T=${TRACES:-../shared/traces}
go build -o /tmp/narwhal-sim ./cmd/narwhal-sim
SIM="/tmp/narwhal-sim --engines 16 --seed 1 --json --quiet"
CODE="--trace $T/AzureLLMInferenceTrace_code.csv --rate-scale 4 --ttft-slo 1.5 --tpot-slo 0.1"
CONV="--trace $T/AzureLLMInferenceTrace_conv.csv --rate-scale 7.5 --ttft-slo 1.5 --tpot-slo 0.1"
MOON="--trace $T/conversation_trace.jsonl --rate-scale 0.8 --ttft-slo 10 --tpot-slo 0.1"
CAT="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --rate-scale 4,8.5,0.8 --ttft-slo 10 --tpot-slo 0.1"
# The same three traces in segments of comparable length: each at its own
# row's rate scale, Mooncake cut to the code segment's length (859 s:
# 859 + 467 + 859 = 2185 s), the Azure rows' TTFT SLO (see README.md).
CAT2="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --rate-scale 4,7.5,0.8 --slice :2185 --ttft-slo 1.5 --tpot-slo 0.1"
for row in CODE CONV MOON CAT CAT2; do
  eval args=\$$row
  for p in narwhal static-best threshold ${ORACLE:+oracle}; do
    printf '{"row":"%s","result":' "$row"
    $SIM $args --policy $p | tr -d '\n'
    printf '}\n'
  done
  # sensitivity: the same core moving one engine per decision
  printf '{"row":"%s","variant":"one_move","result":' "$row"
  $SIM $args --policy narwhal --core-config benchmarks/slo/one-move.json | tr -d '\n'
  printf '}\n'
done
