package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Kind is the serving engine's software.
type Kind string

const (
	VLLM   Kind = "vllm"
	SGLang Kind = "sglang"
)

// Sentinel errors of the metrics reader.
var (
	// ErrParse: the body is not the Prometheus text exposition format.
	ErrParse = errors.New("engine: engine metrics are not in the text exposition format")
	// ErrNoEngineMetrics: the body parsed but holds none of the engine's
	// residency metrics (wrong URL, wrong engine kind, metrics disabled).
	ErrNoEngineMetrics = errors.New("engine: no residency metrics for this engine kind")
	// ErrUnknownKind: the engine kind is neither vllm nor sglang.
	ErrUnknownKind = errors.New("engine: unknown engine kind")
)

// Metric names read from the engines (see REFERENCES.md).
const (
	vllmRunning     = "vllm:num_requests_running"
	vllmWaiting     = "vllm:num_requests_waiting"
	vllmKVUsage     = "vllm:kv_cache_usage_perc"
	vllmKVUsageOld  = "vllm:gpu_cache_usage_perc"
	vllmCacheConfig = "vllm:cache_config_info"
	sglRunning      = "sglang:num_running_reqs"
	sglWaiting      = "sglang:num_queue_reqs"
	sglUsedTokens   = "sglang:num_used_tokens"
	sglMaxTokens    = "sglang:max_total_num_tokens"
	sglTokenUsage   = "sglang:token_usage"
)

// maxCount is the largest count taken from a metric (2^53: exact in a
// float64); anything larger is treated as missing.
const maxCount = 1 << 53

// Metrics is what one read of an engine's metrics endpoint says.
// Counts are summed over the series of the family (one per data-parallel
// engine in vLLM); a value that is missing or NaN is -1 (usage: NaN) and
// its name is listed in Missing.
type Metrics struct {
	Kind Kind `json:"kind"`
	// Running and Waiting are requests running in the engine and queued.
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	// KVUsage is the fraction of the KV cache in use (0..1); NaN unknown.
	KVUsage float64 `json:"-"`
	// KVUsedTokens is KV tokens in use: SGLang reports it, for vLLM it is
	// round(KVUsage × capacity); -1 unknown.
	KVUsedTokens int64 `json:"kv_used_tokens"`
	// CapacityTokens is the engine's own KV capacity in tokens: vLLM
	// kv_cache_size_tokens if present, else num_gpu_blocks × block_size;
	// SGLang max_total_num_tokens; 0 unknown.
	CapacityTokens int64 `json:"capacity_tokens"`
	// BlockSize and NumGPUBlocks are vLLM's cache_config_info labels.
	BlockSize    int64 `json:"block_size,omitempty"`
	NumGPUBlocks int64 `json:"num_gpu_blocks,omitempty"`
	// GPUMemoryUtilization is vLLM's label (0 when absent).
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization,omitempty"`
	// UsageMetric is the KV usage metric name found (vLLM has two).
	UsageMetric string `json:"usage_metric,omitempty"`
	// Missing lists the metrics that were absent or NaN.
	Missing []string `json:"missing,omitempty"`
	// Notes are non-fatal oddities (labels that did not parse, ...).
	Notes []string `json:"notes,omitempty"`
	// Latency is the engine's cumulative latency figures (latency.go);
	// nil when it exposes none.
	Latency *LatencyCounters `json:"latency,omitempty"`
}

// Parse reads one body in the Prometheus text exposition
// format. Garbage gives an ErrParse error, a body without the engine's
// metrics ErrNoEngineMetrics; partial metrics give a result with Missing
// filled. It never panics on input.
func Parse(kind Kind, r io.Reader) (Metrics, error) {
	if kind != VLLM && kind != SGLang {
		return Metrics{}, fmt.Errorf("%w: %q (want vllm or sglang)", ErrUnknownKind, kind)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Metrics{}, fmt.Errorf("%w: %w", ErrParse, err)
	}
	m := Metrics{Kind: kind, Running: -1, Waiting: -1, KVUsage: math.NaN(), KVUsedTokens: -1}
	found := 0
	sum := func(name string) (int64, bool) {
		v, n := sumFamily(fams[name])
		if n == 0 || math.IsNaN(v) || v < 0 || v > maxCount {
			m.Missing = append(m.Missing, name)
			return -1, false
		}
		found++
		return int64(math.Round(v)), true
	}
	mean := func(name string) (float64, bool) {
		v, n := sumFamily(fams[name])
		if n == 0 || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return math.NaN(), false
		}
		found++
		return v / float64(n), true
	}
	switch kind {
	case VLLM:
		m.Running, _ = sum(vllmRunning)
		m.Waiting, _ = sum(vllmWaiting)
		if u, ok := mean(vllmKVUsage); ok {
			m.KVUsage, m.UsageMetric = u, vllmKVUsage
		} else if u, ok := mean(vllmKVUsageOld); ok {
			m.KVUsage, m.UsageMetric = u, vllmKVUsageOld
		} else {
			m.Missing = append(m.Missing, vllmKVUsage+"|"+vllmKVUsageOld)
		}
		if f := fams[vllmCacheConfig]; f != nil && len(f.GetMetric()) > 0 {
			found++
			m.readCacheConfig(f)
		} else {
			m.Missing = append(m.Missing, vllmCacheConfig)
		}
		if !math.IsNaN(m.KVUsage) && m.CapacityTokens > 0 {
			m.KVUsedTokens = int64(math.Round(min(m.KVUsage, 1) * float64(m.CapacityTokens)))
		}
	case SGLang:
		m.Running, _ = sum(sglRunning)
		m.Waiting, _ = sum(sglWaiting)
		m.KVUsedTokens, _ = sum(sglUsedTokens)
		if c, ok := sum(sglMaxTokens); ok {
			m.CapacityTokens = c
		}
		if u, ok := mean(sglTokenUsage); ok {
			m.KVUsage, m.UsageMetric = u, sglTokenUsage
		} else {
			m.Missing = append(m.Missing, sglTokenUsage)
		}
		if m.KVUsedTokens < 0 && !math.IsNaN(m.KVUsage) && m.CapacityTokens > 0 {
			m.KVUsedTokens = int64(math.Round(min(m.KVUsage, 1) * float64(m.CapacityTokens)))
			m.Notes = append(m.Notes, "kv_used_tokens derived from token_usage × max_total_num_tokens")
		}
	}
	if found == 0 {
		return Metrics{}, fmt.Errorf("%w: %s (%d families in the body)", ErrNoEngineMetrics, kind, len(fams))
	}
	m.Latency = readLatency(kind, fams)
	sort.Strings(m.Missing)
	return m, nil
}

// sumFamily sums a gauge/counter/untyped family's sample values; n is the
// number of samples.
func sumFamily(f *dto.MetricFamily) (float64, int) {
	if f == nil {
		return 0, 0
	}
	var s float64
	n := 0
	for _, mt := range f.GetMetric() {
		switch {
		case mt.Gauge != nil:
			s += mt.GetGauge().GetValue()
		case mt.Untyped != nil:
			s += mt.GetUntyped().GetValue()
		case mt.Counter != nil:
			s += mt.GetCounter().GetValue()
		default:
			continue
		}
		n++
	}
	return s, n
}

// readCacheConfig reads vllm:cache_config_info's labels, summing capacity
// over its series (one per data-parallel engine).
func (m *Metrics) readCacheConfig(f *dto.MetricFamily) {
	for _, mt := range f.GetMetric() {
		var blocks, blockSize, sizeTokens int64
		for _, lp := range mt.GetLabel() {
			v := lp.GetValue()
			switch lp.GetName() {
			case "num_gpu_blocks":
				blocks = m.intLabel("num_gpu_blocks", v)
			case "block_size":
				blockSize = m.intLabel("block_size", v)
			case "kv_cache_size_tokens":
				sizeTokens = m.intLabel("kv_cache_size_tokens", v)
			case "gpu_memory_utilization":
				if u, err := strconv.ParseFloat(v, 64); err == nil && u > 0 && u <= 1 {
					m.GPUMemoryUtilization = u
				}
			}
		}
		m.NumGPUBlocks = min(m.NumGPUBlocks+blocks, maxCount)
		if blockSize > 0 {
			m.BlockSize = blockSize
		}
		switch {
		case sizeTokens > 0:
			m.CapacityTokens = min(m.CapacityTokens+sizeTokens, maxCount)
			if blocks > 0 && blockSize > 0 && blocks*blockSize != sizeTokens {
				m.Notes = append(m.Notes, fmt.Sprintf(
					"KV capacity from kv_cache_size_tokens (%d), which differs from num_gpu_blocks %d × block_size %d as it does for hybrid models",
					sizeTokens, blocks, blockSize))
			}
		case blocks > 0 && blockSize > 0 && blocks <= maxCount/blockSize:
			m.CapacityTokens = min(m.CapacityTokens+blocks*blockSize, maxCount)
		}
	}
}

func (m *Metrics) intLabel(name, v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxCount {
		// early vLLM V1 wrote num_gpu_blocks="None" (vllm#16560)
		m.Notes = append(m.Notes, fmt.Sprintf("label %s=%q is not a count", name, v))
		return 0
	}
	return n
}

// MaxBody bounds one engine metrics body read by Scrape; a longer body
// is refused (a scrape error), not read in part.
const MaxBody = 8 << 20

// Scrape reads one engine's metrics endpoint.
func Scrape(ctx context.Context, c *http.Client, kind Kind, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Metrics{}, fmt.Errorf("engine: scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return Metrics{}, fmt.Errorf("engine: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("engine: scrape %s: status %d", url, resp.StatusCode)
	}
	// One byte past MaxBody tells a body cut at the bound (refused: the
	// metrics after the cut would be missing, or the cut line misread)
	// from one that ends there.
	body := &io.LimitedReader{R: resp.Body, N: MaxBody + 1}
	m, err := Parse(kind, body)
	if body.N == 0 {
		return Metrics{}, fmt.Errorf("engine: scrape %s: metrics body over %d bytes", url, MaxBody)
	}
	if err != nil {
		return Metrics{}, fmt.Errorf("engine: scrape %s: %w", url, err)
	}
	return m, nil
}
