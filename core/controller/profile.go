package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
)

// ErrInvalidProfile is returned (wrapped) for profile data that cannot be
// fitted or used.
var ErrInvalidProfile = errors.New("invalid profile")

// Profile origins (Profile.Origin).
const (
	OriginMeasured = "measured"
	OriginPrior    = "prior"
)

// PrefillPoint is one measured prefill: a single prompt of InputTokens
// took Seconds.
type PrefillPoint struct {
	InputTokens int64   `json:"input_tokens"`
	Seconds     float64 `json:"seconds"`
}

// DecodePoint is one measured decode iteration: Batch sequences holding
// CtxTokens context tokens in all took Seconds for one step (one output
// token each).
type DecodePoint struct {
	Batch     int64   `json:"batch"`
	CtxTokens int64   `json:"ctx_tokens"`
	Seconds   float64 `json:"seconds"`
}

// PrefillFit is prefill seconds = A + B·L + C·L² for one prompt of L
// tokens, fitted by least squares, and the input range its points cover.
type PrefillFit struct {
	A        float64 `json:"a"`
	B        float64 `json:"b"`
	C        float64 `json:"c"`
	MinInput int64   `json:"min_input"`
	MaxInput int64   `json:"max_input"`
	Points   int     `json:"points"`
	RMSES    float64 `json:"rmse_s"`
}

// Seconds evaluates the fit (never below 0).
func (f PrefillFit) Seconds(inputTokens float64) float64 {
	s := f.A + f.B*inputTokens + f.C*inputTokens*inputTokens
	if s < 0 {
		return 0
	}
	return s
}

// DecodeFit is decode step seconds = A + PerSeq·batch + PerCtxToken·ctx
// (ctx: context tokens resident over the whole batch), fitted by least
// squares, and the ranges its points cover.
type DecodeFit struct {
	A            float64 `json:"a"`
	PerSeq       float64 `json:"per_seq"`
	PerCtxToken  float64 `json:"per_ctx_token"`
	MaxBatch     int64   `json:"max_batch"`
	MaxCtxPerSeq int64   `json:"max_ctx_per_seq"`
	Points       int     `json:"points"`
	RMSES        float64 `json:"rmse_s"`
}

// StepSeconds evaluates the fit (never below 0).
func (f DecodeFit) StepSeconds(batch, ctxTokens float64) float64 {
	s := f.A + f.PerSeq*batch + f.PerCtxToken*ctxTokens
	if s < 0 {
		return 0
	}
	return s
}

// Profile is the latency model of one (model, GPU kind): what the
// controller knows about how fast an engine serves each phase.
type Profile struct {
	Model string `json:"model"`
	GPU   string `json:"gpu"`
	// Aliases are other model names this profile answers to.
	Aliases []string `json:"aliases,omitempty"`
	TP      int      `json:"tp"`
	// Source names where the measured points come from.
	Source string `json:"source"`
	// Origin is the kind of source: OriginMeasured (points from a file,
	// the built-in tables or the simulator) or OriginPrior (geometry and
	// datasheet).
	Origin     string     `json:"origin,omitempty"`
	HasPrefill bool       `json:"has_prefill"`
	Prefill    PrefillFit `json:"prefill"`
	HasDecode  bool       `json:"has_decode"`
	Decode     DecodeFit  `json:"decode"`
	// Calibration is set once online calibration has learned intervals
	// for this profile (the coefficients above include it); never
	// changed in place.
	Calibration *ProfileCalibration `json:"calibration,omitempty"`
}

// CoversPrefill reports whether the profile models prefill for prompts up
// to maxInput tokens.
func (p *Profile) CoversPrefill(maxInput int64) bool {
	return p.HasPrefill && maxInput <= p.Prefill.MaxInput
}

// CoversDecode reports whether the profile models decode for sequences
// of up to maxCtxPerSeq context tokens.
func (p *Profile) CoversDecode(maxCtxPerSeq int64) bool {
	return p.HasDecode && maxCtxPerSeq <= p.Decode.MaxCtxPerSeq
}

// FitPrefill fits prefill seconds = A + B·L + C·L² to the points by least
// squares on relative error. It needs at least three distinct input lengths.
func FitPrefill(pts []PrefillPoint) (PrefillFit, error) {
	var f PrefillFit
	if len(pts) < 3 {
		return f, fmt.Errorf("%w: prefill fit needs >= 3 points, got %d", ErrInvalidProfile, len(pts))
	}
	const scale = 1000.0 // work in thousands of tokens for conditioning
	var m [3][4]float64
	distinct := map[int64]bool{}
	f.MinInput = math.MaxInt64
	for i, p := range pts {
		if p.InputTokens <= 0 || !(p.Seconds >= 0) || math.IsInf(p.Seconds, 0) {
			return PrefillFit{}, fmt.Errorf("%w: prefill point %d: input_tokens must be > 0 and seconds >= 0, got %d, %v", ErrInvalidProfile, i, p.InputTokens, p.Seconds)
		}
		distinct[p.InputTokens] = true
		x := float64(p.InputTokens) / scale
		w := relWeight(p.Seconds)
		row := [3]float64{w, w * x, w * x * x}
		for r := 0; r < 3; r++ {
			for c := 0; c < 3; c++ {
				m[r][c] += row[r] * row[c]
			}
			m[r][3] += row[r] * p.Seconds * w
		}
		f.MinInput = min(f.MinInput, p.InputTokens)
		f.MaxInput = max(f.MaxInput, p.InputTokens)
	}
	if len(distinct) < 3 {
		return PrefillFit{}, fmt.Errorf("%w: prefill fit needs >= 3 distinct input lengths, got %d", ErrInvalidProfile, len(distinct))
	}
	sol, ok := solve3(m)
	if !ok {
		return PrefillFit{}, fmt.Errorf("%w: prefill points are degenerate", ErrInvalidProfile)
	}
	f.A, f.B, f.C = sol[0], sol[1]/scale, sol[2]/(scale*scale)
	// Where the fit is used (1 to max_input tokens) a longer prompt must
	// not cost less: points out of order bend the quadratic down, and a
	// fit from them priced 16 tokens at 0 s after 1 token at 0.89 s (the
	// fuzz target FuzzProfileFile). The slope is linear in the length, so
	// both ends decide.
	if lo, hi := f.B+2*f.C, f.B+2*f.C*float64(f.MaxInput); lo < 0 || hi < 0 {
		return PrefillFit{}, fmt.Errorf("%w: prefill points fit a time that falls as the prompt grows (%.3g s at 1 token, %.3g s at %d): check each point's input_tokens and seconds",
			ErrInvalidProfile, f.Seconds(1), f.Seconds(float64(f.MaxInput)), f.MaxInput)
	}
	f.Points = len(pts)
	var se float64
	for _, p := range pts {
		d := f.A + f.B*float64(p.InputTokens) + f.C*float64(p.InputTokens)*float64(p.InputTokens) - p.Seconds
		se += d * d
	}
	f.RMSES = math.Sqrt(se / float64(len(pts)))
	return f, nil
}

// FitDecode fits step seconds = A + PerSeq·batch + PerCtxToken·ctx to the
// points by least squares on relative error. It needs three points that are not collinear
// in (batch, ctx).
func FitDecode(pts []DecodePoint) (DecodeFit, error) {
	var f DecodeFit
	if len(pts) < 3 {
		return f, fmt.Errorf("%w: decode fit needs >= 3 points, got %d", ErrInvalidProfile, len(pts))
	}
	const bScale, cScale = 100.0, 100000.0
	var m [3][4]float64
	for i, p := range pts {
		if p.Batch <= 0 || p.CtxTokens < 0 || !(p.Seconds >= 0) || math.IsInf(p.Seconds, 0) {
			return DecodeFit{}, fmt.Errorf("%w: decode point %d: batch must be > 0, ctx_tokens >= 0, seconds >= 0, got %d, %d, %v", ErrInvalidProfile, i, p.Batch, p.CtxTokens, p.Seconds)
		}
		w := relWeight(p.Seconds)
		row := [3]float64{w, w * float64(p.Batch) / bScale, w * float64(p.CtxTokens) / cScale}
		for r := 0; r < 3; r++ {
			for c := 0; c < 3; c++ {
				m[r][c] += row[r] * row[c]
			}
			m[r][3] += row[r] * p.Seconds * w
		}
		f.MaxBatch = max(f.MaxBatch, p.Batch)
		f.MaxCtxPerSeq = max(f.MaxCtxPerSeq, (p.CtxTokens+p.Batch-1)/p.Batch)
	}
	sol, ok := solve3(m)
	if !ok {
		return DecodeFit{}, fmt.Errorf("%w: decode points are degenerate (need variation in batch and context)", ErrInvalidProfile)
	}
	f.A, f.PerSeq, f.PerCtxToken = sol[0], sol[1]/bScale, sol[2]/cScale
	// Likewise a step must not get cheaper with more sequences, each
	// holding any context the fit covers (0 to max_ctx_per_seq): the
	// slope along the batch is per_seq + per_ctx_token × that context,
	// so both ends decide. (A sweep whose context grows with its batch
	// can fit a slightly negative per_ctx_token, as the shipped example
	// does; that alone is not refused.)
	if lo, hi := f.PerSeq, f.PerSeq+f.PerCtxToken*float64(f.MaxCtxPerSeq); lo < 0 || hi < 0 {
		return DecodeFit{}, fmt.Errorf("%w: decode points fit a step that gets cheaper with more sequences (per_seq %.3g s, per_ctx_token %.3g s, up to %d tokens each): check each point's batch, ctx_tokens and seconds",
			ErrInvalidProfile, f.PerSeq, f.PerCtxToken, f.MaxCtxPerSeq)
	}
	f.Points = len(pts)
	var se float64
	for _, p := range pts {
		d := f.StepSeconds(float64(p.Batch), float64(p.CtxTokens)) - p.Seconds
		se += d * d
	}
	f.RMSES = math.Sqrt(se / float64(len(pts)))
	return f, nil
}

// relWeight weights a point by 1/seconds, so that the least squares
// minimise relative error: latencies span two orders of magnitude and an
// unweighted fit would serve the longest prompts only.
func relWeight(seconds float64) float64 {
	if seconds <= 1e-9 {
		return 1e9
	}
	return 1 / seconds
}

// solve3 solves the 3x3 augmented system by Gaussian elimination with
// partial pivoting.
func solve3(m [3][4]float64) ([3]float64, bool) {
	var x [3]float64
	for col := 0; col < 3; col++ {
		p := col
		for r := col + 1; r < 3; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[p][col]) {
				p = r
			}
		}
		if math.Abs(m[p][col]) < 1e-12 {
			return x, false
		}
		m[col], m[p] = m[p], m[col]
		for r := 0; r < 3; r++ {
			if r == col {
				continue
			}
			k := m[r][col] / m[col][col]
			for c := col; c < 4; c++ {
				m[r][c] -= k * m[col][c]
			}
		}
	}
	for i := 0; i < 3; i++ {
		x[i] = m[i][3] / m[i][i]
	}
	return x, true
}

// ProfileSet is an immutable-by-convention list of profiles with lookup by
// (model, GPU kind). The controller copies the coefficients it uses into
// every decision snapshot, so changing a set after a snapshot was taken
// does not change that snapshot's scores.
type ProfileSet struct {
	Profiles []Profile `json:"profiles"`
	// Default is the index of the profile an engine without one of its
	// own points at (its HasProfile is false, which puts the decision on
	// observed_pressure_unprofiled: measured pressures, no prediction),
	// and the reference profile when no prefill engine has one.
	Default int `json:"default"`
}

// NewProfileSet checks the profiles and returns a set whose default is the
// first profile.
func NewProfileSet(ps ...Profile) (*ProfileSet, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: a profile set needs at least one profile", ErrInvalidProfile)
	}
	for i := range ps {
		p := &ps[i]
		if p.Model == "" || p.GPU == "" {
			return nil, fmt.Errorf("%w: profile %d: model and gpu must be set", ErrInvalidProfile, i)
		}
		if !p.HasPrefill && !p.HasDecode {
			return nil, fmt.Errorf("%w: profile %d (%s on %s): no prefill and no decode fit", ErrInvalidProfile, i, p.Model, p.GPU)
		}
	}
	return &ProfileSet{Profiles: ps}, nil
}

// normModel lowercases a model name and drops an org prefix.
func normModel(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return modelSeparators.Replace(s)
}

// modelSeparators drops what model spellings differ by (built once: a
// Replacer builds its tables on first use).
var modelSeparators = strings.NewReplacer("-", "", "_", "", ".", "", " ", "")

// normGPU lowercases a GPU kind and drops separators and a trailing "b"
// of "gb" ("A100-80GB" and "a100-80g" match).
func normGPU(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.NewReplacer("-", "", "_", "", " ", "", "nvidia", "", "sxm", "").Replace(s)
	s = strings.TrimSuffix(s, "b")
	return s
}

// Lookup returns the index of the profile for (model, gpu), matching model
// names and aliases without case, org prefix or separators, and GPU kinds
// without case or separators ("H100" matches a profile "H100-80GB" when no
// exact kind matches).
func (s *ProfileSet) Lookup(model, gpu string) (int, bool) {
	if s == nil {
		return -1, false
	}
	m, g := normModel(model), normGPU(gpu)
	best := -1
	for i := range s.Profiles {
		p := &s.Profiles[i]
		hit := normModel(p.Model) == m
		for _, a := range p.Aliases {
			hit = hit || normModel(a) == m
		}
		if !hit || g == "" {
			continue
		}
		pg := normGPU(p.GPU)
		if pg == g {
			return i, true
		}
		if best < 0 && strings.HasPrefix(pg, g) {
			best = i
		}
	}
	return best, best >= 0
}

// ProfileFile is the JSON layout of a profile file: measured points per
// (model, GPU), fitted when loaded.
type ProfileFile struct {
	Profiles []ProfilePoints `json:"profiles"`
}

// ProfilePoints is one profile as measured points.
type ProfilePoints struct {
	Model         string         `json:"model"`
	GPU           string         `json:"gpu"`
	Aliases       []string       `json:"aliases,omitempty"`
	TP            int            `json:"tp"`
	Source        string         `json:"source"`
	PrefillPoints []PrefillPoint `json:"prefill_points"`
	DecodePoints  []DecodePoint  `json:"decode_points"`
}

// Fit fits the points into a Profile; a phase without points is left out.
func (pp ProfilePoints) Fit() (Profile, error) {
	p := Profile{Model: pp.Model, GPU: pp.GPU, Aliases: pp.Aliases, TP: pp.TP, Source: pp.Source, Origin: OriginMeasured}
	if len(pp.PrefillPoints) > 0 {
		f, err := FitPrefill(pp.PrefillPoints)
		if err != nil {
			return p, fmt.Errorf("profile %s on %s: %w", pp.Model, pp.GPU, err)
		}
		p.Prefill, p.HasPrefill = f, true
	}
	if len(pp.DecodePoints) > 0 {
		f, err := FitDecode(pp.DecodePoints)
		if err != nil {
			return p, fmt.Errorf("profile %s on %s: %w", pp.Model, pp.GPU, err)
		}
		p.Decode, p.HasDecode = f, true
	}
	return p, nil
}

// LoadProfiles reads a ProfileFile (JSON) and fits every profile.
func LoadProfiles(path string) (*ProfileSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	var pf ProfileFile
	if err := json.Unmarshal(b, &pf); err != nil {
		return nil, fmt.Errorf("load profiles %s: %w", path, err)
	}
	ps := make([]Profile, 0, len(pf.Profiles))
	for i, pp := range pf.Profiles {
		p, err := pp.Fit()
		if err != nil {
			return nil, fmt.Errorf("load profiles %s: entry %d: %w", path, i, err)
		}
		ps = append(ps, p)
	}
	set, err := NewProfileSet(ps...)
	if err != nil {
		return nil, fmt.Errorf("load profiles %s: %w", path, err)
	}
	return set, nil
}
