#!/bin/sh
# The agent against a real GPU, run once on a GPU node (the project's
# device machine: one H200). Build first, on an x86-64 machine with cgo:
#
#   mkdir -p .dev
#   CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .dev/agent.test ./agent/
#   CGO_ENABLED=1 go test -c -ldflags='-s -w' -o .dev/liveness.test ./agent/liveness/
#   CGO_ENABLED=1 go build -ldflags='-s -w' -o .dev/narwhal-agent ./cmd/narwhal-agent
#
# then run this script from the repository root on the GPU node (as root
# for the eBPF part). It writes its logs under $OUT (default /tmp/narwhal-device).
set -u
OUT=${OUT:-/tmp/narwhal-device}
mkdir -p "$OUT"
fail=0
step() { echo "== $*"; }

step "driver and device (nvidia-smi)"
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,driver_version --format=csv,noheader,nounits || fail=1

step "independent reading (NVIDIA's Python bindings, nvidia-ml-py)"
python3 - <<'PY' || echo "(no python nvml bindings)"
import pynvml as n
n.nvmlInit()
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    m = n.nvmlDeviceGetMemoryInfo(h)
    print(i, n.nvmlDeviceGetUUID(h), "total", m.total, "used", m.used, "free", m.free)
PY

step "agent -> narwhal-core through the real NVML (TestRealNVMLEndToEnd)"
NARWHAL_REAL_NVML=1 ./.dev/agent.test -test.run 'TestRealNVMLEndToEnd' -test.v -test.count=1 2>&1 | tee "$OUT/agent-test.log"
grep -q '^--- PASS: TestRealNVMLEndToEnd' "$OUT/agent-test.log" || fail=1

step "eBPF liveness (raw tracepoints, ring buffer) and /proc liveness"
./.dev/liveness.test -test.v -test.count=1 2>&1 | tee "$OUT/liveness-test.log" | grep -E '^(--- |PASS|FAIL|ok)|skip' 
grep -q '^PASS' "$OUT/liveness-test.log" || fail=1

step "narwhal-agent binary, 5 s: start line and /metrics"
cat > "$OUT/agent.yaml" <<'YAML'
node: device-node
core_url: http://127.0.0.1:1/v1/agent/reports
liveness: auto
engines:
  - id: e1
    kind: vllm
    metrics_url: http://127.0.0.1:1/metrics
    gpus: ["0"]
    model: llama-3-70b
    gpu_kind: H200
    role: decode
    geometry: {layers: 80, kv_heads: 8, head_dim: 128, dtype_bytes: 2, tp: 1}
YAML
timeout 5 ./.dev/narwhal-agent -config "$OUT/agent.yaml" -listen 127.0.0.1:9400 >"$OUT/agent-run.log" 2>&1 &
sleep 3
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9400/metrics', timeout=2).read().decode())" 2>&1 | grep -E '^narwhal_agent_(nvml_available|engine_kv_capacity_tokens)' | tee "$OUT/agent-metrics.txt"
wait
grep -E 'narwhal-agent started|NVML|liveness' "$OUT/agent-run.log" | head -5
grep -q '^narwhal_agent_nvml_available 1' "$OUT/agent-metrics.txt" || fail=1

echo "== result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
