// Package agent is narwhal-agent's library: it reads one GPU node's
// engines (residency from their own Prometheus metrics, vLLM or SGLang,
// through package engine),
// derives each engine's physical KV limit (the engine's own capacity,
// cross-checked against NVML memory and the model's KV bytes per token),
// watches engine liveness (package liveness: eBPF, else /proc), and streams
// it all to the core (core/wire messages) with node epoch and sequence
// numbers.
//
// Flow: Agent.Run collects every scrape_interval_s (NVML devices, every
// engine's metrics in parallel under scrape_timeout_s) and queues a full
// Snapshot; a liveness event (exit, port closed) marks the engine not live
// at once and queues a Liveness report that the Streamer sends
// immediately. The Streamer POSTs batches to the core's ingest endpoint
// with a bearer token, keeps a bounded drop-oldest queue while the core is
// unreachable, backs off with full jitter, re-sends a hello after an
// outage (the core may have restarted), and sends a heartbeat when idle.
//
// Choices where the spec is silent:
//   - Redirects: a scrape follows one on the engine's own host (a
//     mounted metrics app answers /metrics with /metrics/) and no other
//     (another host's numbers would count as the engine's); a report to
//     the core follows none (a 3xx is an error naming the target: set
//     core_url to the core's own address).
//   - Resident work: DecodeSeqs = running requests, KVTokens = KV tokens
//     in use (vLLM: usage fraction × capacity; SGLang: num_used_tokens).
//   - Prefill backlog (QueuedPrefillS, RunningPrefillS). Source: the
//     engine's own metrics, not the router. The engine's queue is the
//     truth whichever router (llm-d, Dynamo, a plain Service) admitted
//     the work, reading it adds nothing to the core's request path, and
//     the agent scrapes it anyway. Waiting requests
//     (vllm:num_requests_waiting, sglang:num_queue_reqs) are queued
//     prefill; running requests are running prefill, half done on
//     average. Neither engine exposes the prompt sizes of waiting
//     requests, so each is priced at the engine's measured drain rate
//     (engine.PrefillRate): max(prefills / wall seconds, prefills /
//     their summed prefill seconds) over its prefill histogram (vLLM
//     request_prefill_time; SGLang time to first token less queue time),
//     decayed with a 30 s half-life. Both terms are lower bounds of the
//     engine's capacity, so the backlog errs long rather than short. With no
//     recent prefill (agent or engine just started, long idle) the
//     engine's lifetime seconds per prefill stand in; with none at all
//     the backlog is 0 and narwhal_agent_engine_prefill_backlog_priced
//     is 0. SGLang releases without sglang:queue_time_seconds time no
//     prefill (their time to first token is mostly queueing); there the
//     drain rate is the busy throughput: first tokens per second over
//     the scrape intervals that had requests waiting at both ends (an
//     engine with a standing queue works throughout, so that is its
//     capacity), decayed with the same half-life; until the agent has
//     seen one such interval the backlog is unpriced. Every engine is
//     priced; the core reads the seconds of prefill-role engines only
//     (the agent does not know the controller's current role; a decode
//     engine's waiting requests await KV, not prefill). SGLang's P/D
//     bootstrap queue (num_prefill_prealloc_queue_reqs) waits on the
//     decode side's memory and is not counted. Queued requests are also
//     sent as a count (queued_requests).
//   - Busy time (LatencyInterval.busy_s, the controller's measured
//     prefill work): the mean NVML utilization.gpu of the engine's GPUs,
//     sampled at the collection, × the interval since the last one; absent
//     when the engine names no GPU or one of them does not report it (MIG
//     instances never do). Not the engines' prefill histograms: their
//     per-request times overlap within a batch and would count a batch's
//     time once per prompt.
//   - KV limit: the engine's number wins (it knows its pool); NVML gives a
//     physical upper bound floor(min GPU memory × gpu_memory_utilization /
//     bytes per token per TP rank). An engine number above the bound is
//     reported as a disagreement (wire kv_disagreement, metric
//     narwhal_agent_engine_kv_disagreement) and still used; with no engine
//     number the bound is used and flagged as an overestimate.
//   - NVML faults (package nvml says what each NVML answer does to a
//     read): the agent never reports a KV limit from GPU memory it could
//     not read. A GPU whose memory is unknown (fallen off the bus, a
//     failed call, implausible figures, a total of 0) gives its engines
//     no NVML bound: an engine with a capacity of its own keeps it with
//     kv_disagreement "not cross-checked: NVML memory unknown", one
//     without reports kv_capacity_tokens 0, which the core counts as
//     unknown. NVML unreadable as a whole (degraded: a transient error,
//     a driver reload) leaves the last read's memory in use for
//     stale_after_s (a GPU's total does not change; MIG instances may, so
//     not longer), then none until NVML answers again (one log line each
//     way). Busy time is sent only from utilization sampled at that
//     collection. An engine's GPU kind, once named by NVML, stays while
//     NVML cannot name its GPUs (a kind flipping to "" would re-register
//     the engine with the core on another profile). NVML's process lists
//     do not map engines here (the configuration's gpus does; discovery
//     uses them, agent/kubediscover), so PIDs of no engine change nothing.
//     Where an operator looks: /healthz nvml (available, reason,
//     last_read_ns, problems: each faulty GPU or MIG instance with its
//     notes), narwhal_agent_nvml_available and
//     narwhal_agent_nvml_device_problems, and one log line per change.
//     None of it fails /healthz.
//   - Liveness: live = the last scrape worked and no exit/port-close was
//     seen since; a later successful scrape (engine restarted) makes it live
//     again. A failed scrape makes the engine not live in the next
//     snapshot, without an immediate event.
//   - Ports and namespaces: an engine's port is watched in its network
//     namespace (netns file, else its PID's), since pods on one node listen
//     on the same port; a port event goes to the engine of its namespace,
//     else to the engine watching the port in every namespace (no pid or
//     netns). Two engines that may share a node and a port must each name
//     their namespace (a config error otherwise); when a namespace cannot
//     be read at start, a shared port is not watched at all (logged) rather
//     than attributed to the wrong engine.
//   - Epoch: the agent's start time in Unix ns (a restart gives a larger
//     one; a clock stepped backwards across a restart would be refused by
//     the core as stale until it passes the old epoch).
//
// Concurrency: Agent and Streamer methods are safe for concurrent use; one
// mutex each. Allocation: collection allocates per scrape (parsing); it runs
// once per interval, not on a request path.
package agent
