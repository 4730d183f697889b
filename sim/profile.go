package sim

import (
	"fmt"
	"sort"
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
}

// PrefillNs is the time of one prefill batch whose prompts sum to sumL
// tokens and whose squared lengths sum to sumL2.
func (p *Profile) PrefillNs(sumL, sumL2 float64) int64 {
	ms := p.PrefillMs[0] + p.PrefillMs[1]*sumL + p.PrefillMs[2]*sumL2
	return int64(ms * 1e6)
}

// DecodeStepNs is the time of one decode iteration over batch sequences
// whose contexts (prompt + generated) sum to sumCtx tokens.
func (p *Profile) DecodeStepNs(batch, sumCtx int64) int64 {
	c := &p.DecodeSmallMs
	if batch >= p.DecodeLargeBatch {
		c = &p.DecodeLargeMs
	}
	ms := c[0] + c[1]*float64(sumCtx+batch) + c[2]*float64(batch)
	return int64(ms * 1e6)
}

const distserveSource = "DistServe profiler-a100-80g.distserve.json + max_num_tokens.csv (LLMServe/DistServe 82831f16, Apache-2.0)"

var builtinProfiles = map[string]Profile{
	"opt-13b-tp1-a100": {
		Name: "opt-13b-tp1-a100", Model: "facebook/opt-13b", GPU: "A100-80G", TP: 1,
		PrefillMs:        [3]float64{18.10254647486372, 0.1019122572698738, 7.122264314252114e-06},
		DecodeSmallMs:    [3]float64{19.934702624895458, 0.0006269356524350583, 0.03850697740828398},
		DecodeLargeMs:    [3]float64{7.1661889468253595, 0.0005798000403396046, 0.15831096191764046},
		DecodeLargeBatch: 95,
		KVCapacityTokens: 66144,
		KVBytesPerToken:  2 * 40 * 5120 * 2,
		MaxBatchTokens:   8192,
		Source:           distserveSource,
	},
	"opt-66b-tp8-a100": {
		Name: "opt-66b-tp8-a100", Model: "facebook/opt-66b", GPU: "A100-80G", TP: 8,
		PrefillMs:        [3]float64{25.490662375045222, 0.10659177664763161, 3.3910502518615973e-06},
		DecodeSmallMs:    [3]float64{23.15511135047022, 0.00022691488497826264, 0.04800638397272423},
		DecodeLargeMs:    [3]float64{21.71772781576609, 0.0003758089655762475, 0.08978614175851013},
		DecodeLargeBatch: 95,
		KVCapacityTokens: 212304,
		KVBytesPerToken:  2 * 64 * 9216 * 2,
		MaxBatchTokens:   16384,
		Source:           distserveSource,
	},
	"opt-66b-tp4-a100": {
		Name: "opt-66b-tp4-a100", Model: "facebook/opt-66b", GPU: "A100-80G", TP: 4,
		PrefillMs:        [3]float64{29.441636037717455, 0.151352180625198, 8.317450765979451e-06},
		DecodeSmallMs:    [3]float64{30.760284619429587, 0.000451947603788462, 0.063284195750671},
		DecodeLargeMs:    [3]float64{27.47082137429487, 0.0004046845541646486, 0.12480667738300383},
		DecodeLargeBatch: 95,
		KVCapacityTokens: 78496,
		KVBytesPerToken:  2 * 64 * 9216 * 2,
		MaxBatchTokens:   16384,
		Source:           distserveSource,
	},
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
