// Command narwhal-agent runs on every GPU node (a Kubernetes DaemonSet): it
// reads NVML, the engines' metrics and their liveness, and streams them to
// narwhal-core. See package agent.
//
// Usage:
//
//	narwhal-agent [run] -config /etc/narwhal/agent.yaml [-listen :9400] [-log-level info]
//	narwhal-agent scrape -kind vllm -url http://127.0.0.1:8000/metrics [-json]
//	narwhal-agent scrape -kind sglang -file metrics.txt [-layers 32 -kv-heads 8 -head-dim 128 -dtype-bytes 2 -tp 1 -gpu-mem-gib 80]
//
// run serves /healthz (200 when data is fresh, 503 with the problems
// otherwise, JSON either way) and /metrics (narwhal_agent_*).
// scrape reads one engine's metrics once and prints what the agent reads
// from it, and the KV limit cross-check when a geometry is given.
package main
