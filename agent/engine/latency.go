package engine

import (
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Latency histograms and counters read for online profile calibration.
// Names checked against the engines' source: vLLM
// vllm/v1/metrics/loggers.py (vllm:request_prefill_time_seconds,
// vllm:inter_token_latency_seconds, which replaced the deprecated
// vllm:time_per_output_token_seconds, vllm:request_prompt_tokens,
// vllm:prompt_tokens_total); SGLang python/sglang/srt/metrics/collector.py
// (sglang:time_to_first_token_seconds, sglang:queue_time_seconds,
// sglang:inter_token_latency_seconds, which replaced
// sglang:time_per_output_token_seconds, sglang:prompt_tokens_total).
const (
	vllmPrefillTime   = "vllm:request_prefill_time_seconds"
	vllmITL           = "vllm:inter_token_latency_seconds"
	vllmITLOld        = "vllm:time_per_output_token_seconds"
	vllmPromptHist    = "vllm:request_prompt_tokens"
	vllmPromptTotal   = "vllm:prompt_tokens_total"
	sglTTFT           = "sglang:time_to_first_token_seconds"
	sglQueueTime      = "sglang:queue_time_seconds"
	sglITL            = "sglang:inter_token_latency_seconds"
	sglITLOld         = "sglang:time_per_output_token_seconds"
	sglPromptTotal    = "sglang:prompt_tokens_total"
	maxLatencyCounter = 1e15
)

// LatencyCounters are an engine's cumulative latency figures at one
// scrape (summed over the series of each family); a figure the engine
// does not expose is -1. Since turns two of them into the interval the
// agent reports.
type LatencyCounters struct {
	// PrefillCount and PrefillSeconds: prefills timed and their total
	// time (vLLM: request_prefill_time; SGLang: time to first token less
	// queueing time, when both are exposed).
	PrefillCount   float64 `json:"prefill_count"`
	PrefillSeconds float64 `json:"prefill_seconds"`
	// PromptRequests, PromptTokens: the prompts of those requests (vLLM's
	// request_prompt_tokens histogram, recorded with the prefill time),
	// and PromptTokensSq their Σ L² estimated from the histogram's
	// buckets (each count at its bucket's midpoint); 0 when unknown.
	PromptRequests float64 `json:"prompt_requests"`
	PromptTokens   float64 `json:"prompt_tokens"`
	PromptTokensSq float64 `json:"prompt_tokens_sq"`
	// PromptTokensTotal is the prompt tokens counter (both engines).
	PromptTokensTotal float64 `json:"prompt_tokens_total"`
	// DecodeCount, DecodeSeconds: inter-token latencies observed and their
	// total (one per generated token after the first).
	DecodeCount   float64 `json:"decode_count"`
	DecodeSeconds float64 `json:"decode_seconds"`
	// FirstTokens counts the requests that reached their first token,
	// whether or not their prefill time is known (SGLang: the time to
	// first token histogram's count). PrefillRate's busy throughput
	// reads it where the prefill itself is not timed.
	FirstTokens float64 `json:"first_tokens"`
	// Names are the families found, for diagnostics.
	Names []string `json:"names,omitempty"`
}

// histSum returns a histogram family's summed count and sum; ok false
// when the family is absent, not a histogram, or holds non-finite values.
func histSum(f *dto.MetricFamily) (count, sum float64, ok bool) {
	if f == nil {
		return 0, 0, false
	}
	n := 0
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		c, s := float64(h.GetSampleCount()), h.GetSampleSum()
		if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
			return 0, 0, false
		}
		count += c
		sum += s
		n++
	}
	return count, sum, n > 0 && count <= maxLatencyCounter && sum <= maxLatencyCounter
}

// histSquares estimates Σ x² of a histogram's observations: each
// bucket's count at the midpoint of its bounds, the +Inf bucket at the
// larger of its lower bound and the mean; then scaled so that the
// midpoints' Σ x matches the exact sum (coarse buckets shift the level,
// not the spread).
func histSquares(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var sq, lin, sum float64
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil || h.GetSampleCount() == 0 {
			continue
		}
		bs := h.GetBucket()
		sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
		mean := h.GetSampleSum() / float64(h.GetSampleCount())
		sum += h.GetSampleSum()
		var lo, prev float64
		for _, b := range bs {
			ub, cum := b.GetUpperBound(), float64(b.GetCumulativeCount())
			n := cum - prev
			prev = cum
			mid := (lo + ub) / 2
			if math.IsInf(ub, 1) {
				mid = max(lo, mean)
			}
			if n > 0 {
				sq += n * mid * mid
				lin += n * mid
			}
			lo = ub
		}
		if rest := float64(h.GetSampleCount()) - prev; rest > 0 { // no +Inf bucket listed
			mid := max(lo, mean)
			sq += rest * mid * mid
			lin += rest * mid
		}
	}
	if lin <= 0 || sum <= 0 {
		return 0
	}
	k := sum / lin
	return sq * k * k
}

// readLatency fills the latency counters from the parsed families.
func readLatency(kind Kind, fams map[string]*dto.MetricFamily) *LatencyCounters {
	lc := &LatencyCounters{PrefillCount: -1, PrefillSeconds: -1, PromptRequests: -1, PromptTokens: -1,
		PromptTokensTotal: -1, DecodeCount: -1, DecodeSeconds: -1, FirstTokens: -1}
	found := false
	take := func(name string) (float64, float64, bool) {
		c, s, ok := histSum(fams[name])
		if ok {
			lc.Names = append(lc.Names, name)
			found = true
		}
		return c, s, ok
	}
	counter := func(name string) float64 {
		v, n := sumFamily(fams[name])
		if n == 0 || math.IsNaN(v) || v < 0 || v > maxLatencyCounter {
			return -1
		}
		lc.Names = append(lc.Names, name)
		found = true
		return v
	}
	switch kind {
	case VLLM:
		if c, s, ok := take(vllmPrefillTime); ok {
			lc.PrefillCount, lc.PrefillSeconds, lc.FirstTokens = c, s, c
		}
		if c, s, ok := take(vllmPromptHist); ok {
			lc.PromptRequests, lc.PromptTokens = c, s
			lc.PromptTokensSq = histSquares(fams[vllmPromptHist])
		}
		lc.PromptTokensTotal = counter(vllmPromptTotal)
		if c, s, ok := take(vllmITL); ok {
			lc.DecodeCount, lc.DecodeSeconds = c, s
		} else if c, s, ok := take(vllmITLOld); ok {
			lc.DecodeCount, lc.DecodeSeconds = c, s
		}
	case SGLang:
		tc, ts, tok := take(sglTTFT)
		qc, qs, qok := take(sglQueueTime)
		if tok {
			lc.FirstTokens = tc
		}
		if tok && qok && qc == tc && ts >= qs {
			lc.PrefillCount, lc.PrefillSeconds = tc, ts-qs
		}
		lc.PromptTokensTotal = counter(sglPromptTotal)
		if c, s, ok := take(sglITL); ok {
			lc.DecodeCount, lc.DecodeSeconds = c, s
		} else if c, s, ok := take(sglITLOld); ok {
			lc.DecodeCount, lc.DecodeSeconds = c, s
		}
	}
	if !found {
		return nil
	}
	return lc
}

// Since is what the engine measured between prev and cur (a later
// scrape) as the interval the agent reports: prefill count, seconds and
// prompt tokens (the prompt histogram when its count moved with the
// prefill count, else the prompt token counter), and decode: inter-token
// latencies, the batch as Σ ITL / interval (else batch, the caller's mean
// of the running gauges) and ctxTokens, the mean resident KV tokens. ok is false when nothing was timed, the engine restarted
// (a counter went down), or either scrape lacks the figures.
func (cur *LatencyCounters) Since(prev *LatencyCounters, intervalS, batch, ctxTokens float64) (controller.LatencyInterval, bool) {
	var li controller.LatencyInterval
	if cur == nil || prev == nil || !(intervalS > 0) {
		return li, false
	}
	li.IntervalS = intervalS
	d := func(a, b float64) (float64, bool) {
		if a < 0 || b < 0 || a < b {
			return 0, false
		}
		return a - b, true
	}
	ok := false
	if n, ok1 := d(cur.PrefillCount, prev.PrefillCount); ok1 && n >= 1 {
		s, ok2 := d(cur.PrefillSeconds, prev.PrefillSeconds)
		pr, ok3 := d(cur.PromptRequests, prev.PromptRequests)
		pt, ok4 := d(cur.PromptTokens, prev.PromptTokens)
		switch {
		case !ok2:
		case ok3 && ok4 && pr == n && pt > 0:
			li.PrefillCount, li.PrefillSeconds, li.PrefillTokens = n, s, pt
			if sq := cur.PromptTokensSq - prev.PromptTokensSq; sq > 0 && cur.PromptTokensSq > 0 && prev.PromptTokensSq >= 0 {
				li.PrefillTokensSq = max(sq, pt*pt/n)
			}
			ok = true
		default:
			if tt, ok5 := d(cur.PromptTokensTotal, prev.PromptTokensTotal); ok5 && tt > 0 {
				li.PrefillCount, li.PrefillSeconds, li.PrefillTokens = n, s, tt
				ok = true
			}
		}
	}
	if n, ok1 := d(cur.DecodeCount, prev.DecodeCount); ok1 && n >= 1 {
		if s, ok2 := d(cur.DecodeSeconds, prev.DecodeSeconds); ok2 && s > 0 {
			// Every decoding sequence adds its inter-token time in
			// parallel, so Σ ITL over the interval is the time-averaged
			// number of decoding sequences (Little's law); the running
			// gauges sample two instants only and stand in when the
			// interval is shorter than one step.
			if b := s / intervalS; b >= 1 || batch <= 0 {
				batch = max(b, 1)
			}
			li.DecodeCount, li.DecodeSeconds, li.DecodeBatch, li.DecodeCtxTokens = n, s, batch, max(ctxTokens, 0)
			ok = true
		}
	}
	if ok && li.Validate() != nil {
		return controller.LatencyInterval{}, false
	}
	return li, ok
}
