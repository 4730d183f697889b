package sim

import (
	"fmt"
	"sort"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Profile is the latency and capacity model of one engine kind (model, GPU,
// tensor parallelism). The formulas are DistServe's
// (simdistserve/estimators/time_estimator.py, results in milliseconds):
//
//	prefill_ms = a + b·ΣL + c·ΣL²                (over the prompts L of a batch)
//	decode_ms  = a + b·Σ(ctx+1) + c·batch        (small-batch set below the threshold, large-batch set at or above)
//
// The coefficients are the published fits copied from
// ../shared/profiles/profiler-a100-80g.distserve.json (LLMServe/DistServe
// commit 82831f16, Apache-2.0); KVCapacityTokens is the published
// max_num_tokens.csv row for the same model, TP and PP=1.
type Profile struct {
	Name  string // e.g. "opt-66b-tp8-a100"
	Model string // engine table Model (selects the controller's profile)
	GPU   string // engine table GPU kind
	TP    int

	PrefillMs        [3]float64 // a, b, c
	DecodeSmallMs    [3]float64 // a, b, c for batch < DecodeLargeBatch
	DecodeLargeMs    [3]float64 // a, b, c for batch ≥ DecodeLargeBatch
	DecodeLargeBatch int64
	KVCapacityTokens int64
	KVBytesPerToken  int64 // 2 × layers × hidden × 2 bytes (fp16), for the transfer time
	MaxBatchTokens   int64 // prefill batch token budget
	Source           string
	// Slowdown multiplies every prefill and decode time (0 or 1: none):
	// engines slower or faster than their published profile.
	Slowdown float64
}

func (p *Profile) slow(ms float64) int64 {
	if p.Slowdown > 0 {
		ms *= p.Slowdown
	}
	return int64(ms * 1e6)
}

// PrefillNs is the time of one prefill batch whose prompts sum to sumL
// tokens and whose squared lengths sum to sumL2.
func (p *Profile) PrefillNs(sumL, sumL2 float64) int64 {
	ms := p.PrefillMs[0] + p.PrefillMs[1]*sumL + p.PrefillMs[2]*sumL2
	return p.slow(ms)
}

// DecodeStepNs is the time of one decode iteration over batch sequences
// whose contexts (prompt + generated) sum to sumCtx tokens.
func (p *Profile) DecodeStepNs(batch, sumCtx int64) int64 {
	c := &p.DecodeSmallMs
	if batch >= p.DecodeLargeBatch {
		c = &p.DecodeLargeMs
	}
	ms := c[0] + c[1]*float64(sumCtx+batch) + c[2]*float64(batch)
	return p.slow(ms)
}

const distserveSource = "DistServe profiler-a100-80g.distserve.json + max_num_tokens.csv (LLMServe/DistServe 82831f16, Apache-2.0)"

// distServeEngine is what the simulator adds to one published DistServe
// fit (controller.DistServeFits, the one copy of the published numbers):
// the KV bytes per token for the transfer time (2 × layers × hidden × 2
// bytes, fp16) and the prefill batch token budget.
type distServeEngine struct {
	model           string
	tp              int
	name            string
	kvBytesPerToken int64
	maxBatchTokens  int64
}

var distServeEngines = []distServeEngine{
	{"facebook/opt-13b", 1, "opt-13b-tp1-a100", 2 * 40 * 5120 * 2, 8192},
	{"facebook/opt-66b", 8, "opt-66b-tp8-a100", 2 * 64 * 9216 * 2, 16384},
	{"facebook/opt-66b", 4, "opt-66b-tp4-a100", 2 * 64 * 9216 * 2, 16384},
}

// builtinProfiles holds the DistServe engines (here) and the Splitwise
// Llama2-70B ones (splitwise.go).
var builtinProfiles = distServeProfiles()

func distServeProfiles() map[string]Profile {
	out := map[string]Profile{}
	for _, f := range controller.DistServeFits() {
		for _, e := range distServeEngines {
			if e.model != f.Model || e.tp != f.TP {
				continue
			}
			out[e.name] = Profile{
				Name: e.name, Model: f.Model, GPU: "A100-80G", TP: f.TP,
				PrefillMs: f.PrefillMs, DecodeSmallMs: f.DecodeSmallMs, DecodeLargeMs: f.DecodeLargeMs,
				DecodeLargeBatch: f.LargeBatch, KVCapacityTokens: f.KVCapacityTokens,
				KVBytesPerToken: e.kvBytesPerToken, MaxBatchTokens: e.maxBatchTokens,
				Source: distserveSource,
			}
		}
	}
	return out
}

// DefaultProfile is the engine kind used when Config.Profile is empty.
const DefaultProfile = "opt-66b-tp8-a100"

// LookupProfile returns a built-in profile by name.
func LookupProfile(name string) (Profile, error) {
	if name == "" {
		name = DefaultProfile
	}
	p, ok := builtinProfiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("sim: profile %q: %w (known: %v)", name, ErrUnknownProfile, ProfileNames())
	}
	return p, nil
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	out := make([]string, 0, len(builtinProfiles))
	for k := range builtinProfiles {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
