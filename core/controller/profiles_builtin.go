package controller

// Built-in latency profiles, derived from ../shared/profiles (see its
// SOURCES.md). Nothing here is invented: the DistServe entries evaluate
// DistServe's own published fits on a grid and refit them with our model
// (one coefficient set instead of DistServe's two, switched at batch 95);
// the Splitwise entries are the medians of the measured rows.

import "fmt"

const (
	sourceDistServe = "DistServe simdistserve/estimators/profile_data/profiler-a100-80g.json " +
		"(github.com/LLMServe/DistServe@82831f1604cc6b10bebd360f6c437a07790dde9f, Apache-2.0): " +
		"published fits evaluated on a grid and refitted"
	sourceSplitwise = "Splitwise data/perf_model.csv " +
		"(github.com/Mutinifni/splitwise-sim@8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0, MIT): " +
		"medians of measured rows, TP8"
)

// DistServeFit is one entry of DistServe's published A100-80GB profiler
// fits (profiler-a100-80g.distserve.json, milliseconds): prefill_ms = a +
// b·ΣL + c·ΣL²; decode_ms = a + b·Σ(ctx+1) + c·batch, with the small-batch
// set below LargeBatch and the large-batch set at or above it.
// KVCapacityTokens is max_num_tokens.csv's row for the same model, TP and
// PP 1. The controller's built-in profiles and the simulator's engines read
// the same table (DistServeFits), so the published numbers live once.
type DistServeFit struct {
	Model            string
	TP               int
	PrefillMs        [3]float64
	DecodeSmallMs    [3]float64
	DecodeLargeMs    [3]float64
	LargeBatch       int64
	KVCapacityTokens int64
	// builtin: the controller ships a profile for it (one per model, so
	// that the model's alias stays unambiguous); aliases name it.
	builtin bool
	aliases []string
}

var distServeFits = []DistServeFit{
	{
		Model: "facebook/opt-13b", TP: 1, LargeBatch: 95, KVCapacityTokens: 66144,
		PrefillMs:     [3]float64{18.10254647486372, 0.1019122572698738, 7.122264314252114e-06},
		DecodeSmallMs: [3]float64{19.934702624895458, 0.0006269356524350583, 0.03850697740828398},
		DecodeLargeMs: [3]float64{7.1661889468253595, 0.0005798000403396046, 0.15831096191764046},
		builtin:       true, aliases: []string{"opt-13b"},
	},
	{
		Model: "facebook/opt-66b", TP: 4, LargeBatch: 95, KVCapacityTokens: 78496,
		PrefillMs:     [3]float64{29.441636037717455, 0.151352180625198, 8.317450765979451e-06},
		DecodeSmallMs: [3]float64{30.760284619429587, 0.000451947603788462, 0.063284195750671},
		DecodeLargeMs: [3]float64{27.47082137429487, 0.0004046845541646486, 0.12480667738300383},
		builtin:       true, aliases: []string{"opt-66b"},
	},
	{
		Model: "facebook/opt-66b", TP: 8, LargeBatch: 95, KVCapacityTokens: 212304,
		PrefillMs:     [3]float64{25.490662375045222, 0.10659177664763161, 3.3910502518615973e-06},
		DecodeSmallMs: [3]float64{23.15511135047022, 0.00022691488497826264, 0.04800638397272423},
		DecodeLargeMs: [3]float64{21.71772781576609, 0.0003758089655762475, 0.08978614175851013},
	},
}

// DistServeFits returns DistServe's published fits (a fresh copy).
func DistServeFits() []DistServeFit {
	out := make([]DistServeFit, len(distServeFits))
	copy(out, distServeFits)
	return out
}

// distServePoints evaluates DistServe's formulas (time_estimator.py):
// prefill_ms = a + b·L + c·L²; decode_ms = a + b·Σ(ctx+1) + c·batch with
// the small-batch set below the threshold and the large-batch set above.
// OPT's context limit is 2048 tokens, so the grid stops there.
func distServePoints(f DistServeFit) ProfilePoints {
	pp := ProfilePoints{Model: f.Model, GPU: "A100-80GB", Aliases: f.aliases, TP: f.TP,
		Source: fmt.Sprintf("%s; %s TP%d", sourceDistServe, f.Model, f.TP)}
	for _, l := range []int64{32, 64, 128, 256, 512, 768, 1024, 1536, 2048} {
		x := float64(l)
		ms := f.PrefillMs[0] + f.PrefillMs[1]*x + f.PrefillMs[2]*x*x
		pp.PrefillPoints = append(pp.PrefillPoints, PrefillPoint{InputTokens: l, Seconds: ms / 1000})
	}
	for _, b := range []int64{1, 2, 4, 8, 16, 32, 64, 94, 96, 128, 192, 256} {
		for _, ctx := range []int64{128, 256, 512, 1024, 2048} {
			c := f.DecodeSmallMs
			if b >= f.LargeBatch {
				c = f.DecodeLargeMs
			}
			ms := c[0] + c[1]*float64(b*(ctx+1)) + c[2]*float64(b)
			pp.DecodePoints = append(pp.DecodePoints, DecodePoint{Batch: b, CtxTokens: b * ctx, Seconds: ms / 1000})
		}
	}
	return pp
}

// splitwiseMedian is one measured configuration: prompt size, batch size,
// generated tokens, median prompt_time ms and median token_time ms.
type splitwiseMedian struct {
	prompt, batch, tokens int64
	promptMs, tokenMs     float64
}

// Llama2-70B TP8, medians over the repeats in perf_model.csv.
var splitwiseA100 = []splitwiseMedian{
	{128, 1, 128, 65.347, 43.031}, {256, 1, 128, 66.757, 43.483}, {512, 1, 128, 94.31, 44.852},
	{512, 1, 256, 92.834, 45.903}, {512, 1, 512, 92.828, 44.987}, {512, 1, 1024, 93.278, 44.761},
	{512, 1, 2048, 92.641, 45.355}, {512, 1, 4096, 92.634, 45.98}, {512, 1, 8192, 93.016, 45.033},
	{512, 2, 128, 165.941, 44.559}, {512, 4, 128, 292.284, 45.792}, {512, 8, 128, 767.618, 46.465},
	{512, 16, 128, 2084.405, 50.435}, {512, 32, 128, 3524.541, 53.017}, {512, 64, 128, 7553.993, 71.605},
	{1024, 1, 128, 154.458, 44.966}, {2048, 1, 128, 274.222, 45.437}, {4096, 1, 128, 661.222, 46.482},
	{8192, 1, 128, 1549.82, 46.51},
}

var splitwiseH100 = []splitwiseMedian{
	{128, 1, 128, 58.185, 29.873}, {256, 1, 128, 51.659, 28.267}, {512, 1, 128, 53.386, 29.762},
	{512, 1, 256, 53.95, 31.513}, {512, 1, 512, 53.829, 30.658}, {512, 1, 1024, 54.776, 31.857},
	{512, 1, 2048, 54.633, 30.764}, {512, 1, 4096, 53.858, 30.562}, {512, 1, 8192, 53.289, 30.806},
	{512, 2, 128, 76.887, 30.262}, {512, 4, 128, 132.641, 31.786}, {512, 8, 128, 371.63, 32.504},
	{512, 16, 128, 811.928, 34.166}, {512, 32, 128, 1551.726, 38.619}, {512, 64, 128, 2936.33, 50.161},
	{1024, 1, 128, 77.913, 29.74}, {2048, 1, 128, 136.797, 31.048}, {4096, 1, 128, 390.291, 30.561},
	{8192, 1, 128, 844.885, 31.412},
}

// splitwisePoints turns the medians into points: batch-1 rows give
// prefill points (prompt_time of one prompt); every row gives a decode
// point whose resident context is batch × (prompt + tokens/2), the mean
// context over the generation.
func splitwisePoints(gpu string, rows []splitwiseMedian) ProfilePoints {
	pp := ProfilePoints{Model: "meta-llama/Llama-2-70b-hf", GPU: gpu,
		Aliases: []string{"llama2-70b", "llama-2-70b", "llama-2-70b-chat-hf"}, TP: 8,
		Source: fmt.Sprintf("%s; llama2-70b on %s", sourceSplitwise, gpu)}
	seen := map[int64]bool{}
	for _, r := range rows {
		if r.batch == 1 && r.tokens == 128 && !seen[r.prompt] {
			seen[r.prompt] = true
			pp.PrefillPoints = append(pp.PrefillPoints, PrefillPoint{InputTokens: r.prompt, Seconds: r.promptMs / 1000})
		}
		pp.DecodePoints = append(pp.DecodePoints, DecodePoint{Batch: r.batch, CtxTokens: r.batch * (r.prompt + r.tokens/2), Seconds: r.tokenMs / 1000})
	}
	return pp
}

// BuiltinProfilePoints returns the measured points of the built-in
// profiles (a fresh copy each call). The first is the default profile:
// OPT-13B TP1 on A100-80GB, DistServe's chat setting.
func BuiltinProfilePoints() []ProfilePoints {
	out := make([]ProfilePoints, 0, 4)
	for _, f := range distServeFits {
		if f.builtin {
			out = append(out, distServePoints(f))
		}
	}
	out = append(out, splitwisePoints("A100-80GB", splitwiseA100), splitwisePoints("H100-80GB", splitwiseH100))
	return out
}

// BuiltinProfiles fits the built-in points and returns a new set (callers
// may keep and change it; the controller snapshots what it uses).
func BuiltinProfiles() *ProfileSet {
	pts := BuiltinProfilePoints()
	ps := make([]Profile, 0, len(pts))
	for _, pp := range pts {
		p, err := pp.Fit()
		if err != nil {
			panic(fmt.Sprintf("BUG: built-in profile %s on %s does not fit: %v", pp.Model, pp.GPU, err))
		}
		ps = append(ps, p)
	}
	set, err := NewProfileSet(ps...)
	if err != nil {
		panic(fmt.Sprintf("BUG: built-in profiles: %v", err))
	}
	return set
}
