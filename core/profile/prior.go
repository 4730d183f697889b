package profile

import (
	"fmt"
	"math"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Factors are the prior's named efficiency factors: what fraction of a
// datasheet peak real serving engines reach, and the fixed costs a
// roofline leaves out. DefaultFactors were chosen against the published
// measurements in ../shared/profiles (see the README): one set for every
// GPU and model, none per row.
type Factors struct {
	// ComputeEff: fraction of dense peak FLOPS a prefill's matmuls reach
	// (model FLOPs utilisation).
	ComputeEff float64 `json:"compute_eff"`
	// AttnEff: fraction of peak the attention kernels reach on the
	// quadratic term (FlashAttention runs below the matmuls' rate).
	AttnEff float64 `json:"attn_eff"`
	// MemEff: fraction of datasheet HBM bandwidth a decode step's weight
	// and KV reads reach.
	MemEff float64 `json:"mem_eff"`
	// LinkEff: fraction of the GPU link bandwidth an all-reduce reaches.
	LinkEff float64 `json:"link_eff"`
	// LayerOverheadS: fixed seconds per layer per forward pass (kernel
	// launches, norms, rotary, sampling spread over the layers).
	LayerOverheadS float64 `json:"layer_overhead_s"`
	// AllReduceLatencyS: fixed seconds per all-reduce (two per layer)
	// when TP > 1.
	AllReduceLatencyS float64 `json:"allreduce_latency_s"`
	// StepOverheadS: fixed seconds per forward pass (scheduling, input
	// preparation, sampling).
	StepOverheadS float64 `json:"step_overhead_s"`
	// SeqOverheadS: fixed seconds per sequence per decode step
	// (sampling, detokenisation, scheduling bookkeeping).
	SeqOverheadS float64 `json:"seq_overhead_s"`
	// TPEff: parallel efficiency lost per doubling of TP on the matmuls
	// (smaller shards run further from peak): compute time is divided by
	// TPEff^log2(TP).
	TPEff float64 `json:"tp_eff"`
}

// DefaultFactors are the factors the built-in prior uses.
func DefaultFactors() Factors {
	return Factors{ComputeEff: 0.45, AttnEff: 0.5, MemEff: 0.8, LinkEff: 0.6,
		LayerOverheadS: 120e-6, AllReduceLatencyS: 60e-6, StepOverheadS: 3e-3, SeqOverheadS: 50e-6, TPEff: 1}
}

// Prior is the latency model of one model on one GPU kind at one tensor
// parallel degree, derived from geometry and datasheet alone.
type Prior struct {
	Model   Geometry
	GPU     GPU
	TP      int
	Factors Factors
	// FP8: weights and activations in FP8 (DTypeBytes 1 and a GPU with
	// FP8 tensor cores).
	FP8 bool
}

// NewPrior checks its inputs and returns the prior with DefaultFactors.
func NewPrior(g Geometry, gpu GPU, tp int) (*Prior, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if tp < 1 || tp > 64 {
		return nil, fmt.Errorf("%w: %s: tp %d: want 1..64", ErrGeometry, g.Name, tp)
	}
	if gpu.BF16TFLOPS <= 0 || gpu.HBMGBps <= 0 {
		return nil, fmt.Errorf("%w: gpu %q: needs bf16_tflops and hbm_gbps", ErrGeometry, gpu.Name)
	}
	return &Prior{Model: g, GPU: gpu, TP: tp, Factors: DefaultFactors(), FP8: g.DTypeBytes == 1 && gpu.FP8TFLOPS > 0}, nil
}

func (p *Prior) peakFLOPS() float64 {
	if p.FP8 {
		return p.GPU.FP8TFLOPS * 1e12
	}
	return p.GPU.BF16TFLOPS * 1e12
}

// tpCompute is the compute-time multiplier of TP's smaller shards.
func (p *Prior) tpCompute() float64 {
	if p.TP <= 1 || p.Factors.TPEff <= 0 {
		return 1
	}
	return math.Pow(1/p.Factors.TPEff, math.Log2(float64(p.TP)))
}

// allReduceS is one all-reduce of bytes across the TP group: a ring moves
// 2(TP-1)/TP of the data over each GPU's link, plus a fixed latency.
func (p *Prior) allReduceS(bytes float64) float64 {
	if p.TP <= 1 {
		return 0
	}
	bw := p.GPU.LinkGBps * 1e9 * p.Factors.LinkEff
	if bw <= 0 {
		bw = 16e9
	}
	t := float64(p.TP)
	return p.Factors.AllReduceLatencyS + 2*(t-1)/t*bytes/bw
}

// fixedS is a forward pass's fixed cost.
func (p *Prior) fixedS() float64 {
	return p.Factors.StepOverheadS + float64(p.Model.Layers)*p.Factors.LayerOverheadS
}

// PrefillSeconds is one prompt of L tokens: the larger of the compute
// roofline (2·active params·L matmul FLOPs, plus causal attention's
// 2·layers·L²·attention width at AttnEff) and the memory roofline (the
// weights read once), plus two all-reduces of L × hidden activations
// per layer and the fixed cost.
func (p *Prior) PrefillSeconds(l float64) float64 {
	if l <= 0 {
		return 0
	}
	total, active := p.Model.Params()
	g := &p.Model
	t := float64(p.TP)
	peak := p.peakFLOPS() * t
	// The LM head runs on the last token only.
	head := float64(g.Vocab) * float64(g.Hidden)
	// MoE: a prefill of L tokens touches min(E, L·k) experts' weights,
	// but its FLOPs are the active ones per token.
	matmul := 2 * (active - head) * l / (peak * p.Factors.ComputeEff) * p.tpCompute()
	attn := 2 * float64(g.Layers) * l * l * g.attnDim() / (peak * p.Factors.AttnEff)
	wBytes := total * float64(g.DTypeBytes) / t
	mem := wBytes / (p.GPU.HBMGBps * 1e9 * p.Factors.MemEff)
	comm := 2 * float64(g.Layers) * p.allReduceS(l*float64(g.Hidden)*2)
	return max(matmul+attn, mem) + comm + p.fixedS()
}

// DecodeStepSeconds is one decode iteration of batch sequences holding
// ctx context tokens in all: the larger of the memory roofline (the
// weights one step touches, and the batch's KV, read once) and the
// compute roofline (2·active params per sequence plus attention over the
// context), plus two all-reduces of batch × hidden per layer and the
// fixed cost.
func (p *Prior) DecodeStepSeconds(batch, ctx float64) float64 {
	if batch <= 0 {
		return 0
	}
	g := &p.Model
	t := float64(p.TP)
	total, active := p.Model.Params()
	w := total
	if g.Experts > 0 {
		// Routed experts touched: of E experts, each sequence picks k;
		// the expected number distinct is E·(1 − (1 − k/E)^batch).
		_, moe := g.layerCounts()
		e, k := float64(g.Experts), float64(g.ActiveExperts)
		touched := e * (1 - math.Pow(1-k/e, batch))
		w -= float64(moe) * (e - touched) * g.expertParams()
	}
	emb := float64(g.Vocab) * float64(g.Hidden)
	if !g.TiedEmbeddings {
		w -= emb // the input embedding is a lookup, not a read
	}
	kvBytes := ctx * g.KVBytesPerToken()
	mem := (w*float64(g.DTypeBytes) + kvBytes) / t / (p.GPU.HBMGBps * 1e9 * p.Factors.MemEff)
	peak := p.peakFLOPS() * t
	comp := 2*active*batch/(peak*p.Factors.ComputeEff)*p.tpCompute() + 4*float64(g.Layers)*ctx*g.attnDim()/(peak*p.Factors.AttnEff)
	comm := 2 * float64(g.Layers) * p.allReduceS(batch*float64(g.Hidden)*2)
	return max(mem, comp) + comm + p.fixedS() + batch*p.Factors.SeqOverheadS
}

// KVCapacityTokens estimates the engine's KV pool the way vLLM sizes it:
// 0.9 of the TP group's memory less the weights and 5 % for activations,
// over the KV bytes per token.
func (p *Prior) KVCapacityTokens() int64 {
	total, _ := p.Model.Params()
	mem := float64(p.TP) * p.GPU.MemoryGB * 1e9
	free := mem*0.9 - total*float64(p.Model.DTypeBytes) - 0.05*mem
	if free <= 0 {
		return 0
	}
	return int64(free / p.Model.KVBytesPerToken())
}

// PriorCoverTokens is the prompt and context length a prior profile
// covers (profile_coverage gate).
const PriorCoverTokens = 1 << 24

// SourcePrior is the Source prefix of every profile the prior builds.
const SourcePrior = "prior"

// Points evaluates the prior on the grid the controller's fits use:
// prompts from 32 tokens to maxInput (doubling), decode batches 1..256
// with per-sequence contexts from 128 to maxCtx (doubling).
func (p *Prior) Points(modelName, gpuName string, maxInput, maxCtx int64) controller.ProfilePoints {
	pp := controller.ProfilePoints{Model: modelName, GPU: gpuName, TP: p.TP,
		Source: fmt.Sprintf("%s: %s geometry on %s, TP%d (sources: profile.Geometries, profile.GPUs)", SourcePrior, p.Model.Name, p.GPU.Name, p.TP)}
	maxInput, maxCtx = max(maxInput, 256), max(maxCtx, 256)
	for l := int64(32); ; l *= 2 {
		l = min(l, maxInput)
		pp.PrefillPoints = append(pp.PrefillPoints, controller.PrefillPoint{InputTokens: l, Seconds: p.PrefillSeconds(float64(l))})
		if l == maxInput {
			break
		}
	}
	for _, b := range []int64{1, 2, 4, 8, 16, 32, 64, 128, 256} {
		for c := int64(128); ; c *= 2 {
			c = min(c, maxCtx)
			pp.DecodePoints = append(pp.DecodePoints, controller.DecodePoint{Batch: b, CtxTokens: b * c, Seconds: p.DecodeStepSeconds(float64(b), float64(b*c))})
			if c == maxCtx {
				break
			}
		}
	}
	return pp
}

// Profile fits the prior's points (up to the model's context length, at
// least 32k tokens) into a controller profile.
func (p *Prior) Profile(modelName, gpuName string) (controller.Profile, error) {
	maxCtx := int64(max(p.Model.MaxContext, 32768))
	prof, err := p.Points(modelName, gpuName, maxCtx, maxCtx).Fit()
	if err != nil {
		return prof, fmt.Errorf("prior %s on %s: %w", p.Model.Name, p.GPU.Name, err)
	}
	prof.Origin = controller.OriginPrior
	// A model, not a measurement: it covers every length (the engine
	// refuses what exceeds its context, not the profile).
	prof.Prefill.MaxInput, prof.Decode.MaxCtxPerSeq = PriorCoverTokens, PriorCoverTokens
	return prof, nil
}

// Resolve is the controller's profile resolver (controller.Resolver): the
// prior for a built-in model geometry on a built-in GPU kind at TP (1
// when unknown); ok false when either is unknown.
func Resolve(model, gpu string, tp int) (controller.Profile, bool) {
	g, ok := LookupGeometry(model)
	if !ok {
		return controller.Profile{}, false
	}
	return ResolveGeometry(g, model, gpu, tp)
}

// ResolveGeometry is Resolve for a geometry the caller has (e.g. from a
// config.json).
func ResolveGeometry(g Geometry, model, gpu string, tp int) (controller.Profile, bool) {
	d, ok := LookupGPU(gpu)
	if !ok {
		return controller.Profile{}, false
	}
	p, err := NewPrior(g, d, max(tp, 1))
	if err != nil {
		return controller.Profile{}, false
	}
	prof, err := p.Profile(model, gpu)
	if err != nil {
		return controller.Profile{}, false
	}
	return prof, true
}
