#!/bin/sh
# Robustness check behind the README's "neighbouring scales" table: every
# row at 0.8x, 1x and 1.2x of its rate scale, seeds 1 and 2, policies
# narwhal, static-best and threshold; one JSON object per line on stdout.
# Run from the repository root:
#   sh benchmarks/slo/neighbours.sh > /tmp/slo-neighbours.jsonl
# Extra arguments go to every narwhal run (e.g. --core-config FILE).
set -eu
T=${TRACES:-../shared/traces}
go build -o /tmp/narwhal-sim ./cmd/narwhal-sim
SIM="/tmp/narwhal-sim --engines 16 --json --quiet"
CODE="--trace $T/AzureLLMInferenceTrace_code.csv --ttft-slo 1.5 --tpot-slo 0.1"
CONV="--trace $T/AzureLLMInferenceTrace_conv.csv --ttft-slo 1.5 --tpot-slo 0.1"
MOON="--trace $T/conversation_trace.jsonl --ttft-slo 10 --tpot-slo 0.1"
CAT="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --ttft-slo 10 --tpot-slo 0.1"
# CAT2: comparable segments (see run.sh); the slice end is two code
# segments plus one conv segment at each scale (3436 s / code scale,
# 3502 s / conv scale), so Mooncake stays cut to the code segment's length.
CAT2="--trace $T/AzureLLMInferenceTrace_code.csv --trace $T/AzureLLMInferenceTrace_conv.csv --trace $T/conversation_trace.jsonl --ttft-slo 1.5 --tpot-slo 0.1"
slice() {
  case $1 in
  3.2,6,0.64) echo ":2731" ;;
  4,7.5,0.8) echo ":2185" ;;
  4.8,9,0.96) echo ":1821" ;;
  esac
}
scales() {
  case $1 in
  CODE) echo "3.2 4 4.8" ;;
  CONV) echo "6 7.5 9" ;;
  MOON) echo "0.64 0.8 0.96" ;;
  CAT) echo "3.2,6.8,0.64 4,8.5,0.8 4.8,10.2,0.96" ;;
  CAT2) echo "3.2,6,0.64 4,7.5,0.8 4.8,9,0.96" ;;
  esac
}
for row in CODE CONV MOON CAT CAT2; do
  for sc in $(scales $row); do
    eval args=\$$row
    [ "$row" = CAT2 ] && args="$args --slice $(slice "$sc")"
    for seed in 1 2; do
      for p in narwhal static-best threshold; do
        extra=""
        [ "$p" = narwhal ] && extra="$*"
        printf '{"row":"%s","scale":"%s","seed":%s,"result":' "$row" "$sc" "$seed"
        # shellcheck disable=SC2086
        $SIM $args --rate-scale "$sc" --seed "$seed" --policy $p $extra | tr -d '\n'
        printf '}\n'
      done
    done
  done
done
