// Package engine reads serving engines' own Prometheus metrics (vLLM,
// SGLang) into residency and KV-capacity numbers, and derives an engine's
// physical KV limit from its capacity cross-checked against GPU memory and
// the model's KV geometry. It is pure Go (no cgo), so the fuzz package and
// operators' tools can use it without NVML.
//
// Parse reads the text exposition format with
// github.com/prometheus/common/expfmt. vLLM: vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc or the older
// vllm:gpu_cache_usage_perc, and vllm:cache_config_info's labels
// (num_gpu_blocks, block_size, kv_cache_size_tokens when present,
// gpu_memory_utilization). SGLang: sglang:num_running_reqs,
// sglang:num_queue_reqs, sglang:num_used_tokens, sglang:max_total_num_tokens,
// sglang:token_usage. Garbage gives ErrParse, a body without the engine's
// metrics ErrNoEngineMetrics; a missing or NaN metric is listed in
// Metrics.Missing and its value is -1 (unknown), never a guess.
//
// Choices where the spec is silent: series of one family (vLLM's
// data-parallel engines) are summed for counts and capacity, averaged for
// usage fractions; kv_cache_size_tokens wins over num_gpu_blocks ×
// block_size (they differ on hybrid models, vLLM #51163); counts above 2^53
// are treated as missing; a label such as num_gpu_blocks="None" (early vLLM
// V1) leaves the capacity unknown with a note.
//
// KV bytes per token per tensor-parallel rank = 2 × layers × max(1, KV
// heads / TP) × head dim × dtype bytes (Llama-3-8B bf16: 131,072 B). See
// CrossCheck for how the engine's number and the NVML bound combine.
//
// Latency (latency.go): Parse also reads the engine's cumulative latency
// histograms and counters into Metrics.Latency (vLLM
// request_prefill_time, request_prompt_tokens, inter_token_latency or the
// older time_per_output_token; SGLang time_to_first_token less
// queue_time, inter_token_latency or the older time_per_output_token),
// and LatencyCounters.Since turns two scrapes into the interval the agent
// reports for online profile calibration. Only histograms' exact sums and
// counts are used, except Σ L² of the prompts, estimated from the
// buckets' midpoints scaled to the exact sum.
//
// Backlog (backlog.go): PrefillRate learns an engine's prefill drain
// rate from its prefill histogram at successive scrapes and prices its
// waiting and running requests in seconds; an engine that times no
// prefill (SGLang without queue_time) is priced at the first tokens it
// completed per second while requests waited (see package agent for
// the choice of source).
//
// Concurrency: all functions are pure and safe for concurrent use; a
// PrefillRate is one engine's and not safe for concurrent use.
// Allocation: Parse allocates (the parser builds metric families); it runs
// once per scrape interval per engine.
package engine
