package sim

import (
	"fmt"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
)

// Controller profile modes (Config.ControllerProfile); anything else is
// a profile file's path.
const (
	ProfileExact   = "exact"
	ProfileNominal = "nominal"
	ProfilePrior   = "prior"
	ProfileNone    = "none"
)

// controllerStart returns the profile set and core options the narwhal
// policy starts from in mode (Config.ControllerProfile); profErr (0: 1)
// multiplies the exact and nominal profiles' times
// (Config.ControllerProfileError).
//   - exact: ControllerProfiles of the engines' true profile (slowdown included).
//   - nominal: the same without the slowdown.
//   - prior: the built-in measured profiles less any of the engines'
//     model, so that the core prices the engines with its geometry prior.
//   - none: the same set, and no prior (observed pressure only).
//   - a path: profile.LoadFile, with the prior for what it lacks.
func controllerStart(mode string, profErr float64, p Profile, maxInput, maxCtxPerSeq int64) (*controller.ProfileSet, []core.Option, error) {
	if profErr <= 0 {
		profErr = 1
	}
	switch mode {
	case ProfileExact, "":
		e := p
		e.Slowdown = max(p.Slowdown, 0)
		if e.Slowdown == 0 {
			e.Slowdown = 1
		}
		e.Slowdown *= profErr
		ps, err := ControllerProfiles(e, maxInput, maxCtxPerSeq)
		return ps, nil, err
	case ProfileNominal:
		n := p
		n.Slowdown = profErr
		ps, err := ControllerProfiles(n, maxInput, maxCtxPerSeq)
		return ps, nil, err
	case ProfilePrior, ProfileNone:
		ps, err := withoutModel(controller.BuiltinProfiles(), p.Model)
		if err != nil {
			return nil, nil, err
		}
		if mode == ProfileNone {
			return ps, []core.Option{core.WithoutPrior()}, nil
		}
		return ps, nil, nil
	}
	ps, err := profile.LoadFile(mode)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: controller profile: %w", err)
	}
	return ps, nil, nil
}

// withoutModel drops the profiles of model (and its aliases) from the set.
func withoutModel(set *controller.ProfileSet, model string) (*controller.ProfileSet, error) {
	m := profile.NormModel(model)
	var keep []controller.Profile
	for _, p := range set.Profiles {
		hit := profile.NormModel(p.Model) == m
		for _, a := range p.Aliases {
			hit = hit || profile.NormModel(a) == m
		}
		if !hit {
			keep = append(keep, p)
		}
	}
	ps, err := controller.NewProfileSet(keep...)
	if err != nil {
		return nil, fmt.Errorf("sim: profiles without %s: %w", model, err)
	}
	return ps, nil
}

// ControllerProfiles is the latency profile the narwhal policy hands to the
// core (core.WithProfiles): the simulated engine's own formulas evaluated on
// a grid of points — prompts from 32 tokens up to maxInput, decode batches
// 1..256 with per-sequence contexts up to maxCtxPerSeq — and fitted by the
// controller's own fitting code. A real deployment measures its engines;
// the simulator knows its engines exactly, so the controller gets the same
// numbers, over the range the workload uses (the built-in DistServe points
// stop at OPT's 2048-token context and would leave longer prompts outside
// the profile-coverage gate).
func ControllerProfiles(p Profile, maxInput, maxCtxPerSeq int64) (*controller.ProfileSet, error) {
	pp := controller.ProfilePoints{
		Model: p.Model, GPU: p.GPU, TP: p.TP,
		Source: "narwhal sim engine model: " + p.Source,
	}
	maxInput = max(maxInput, 2048)
	maxCtxPerSeq = max(maxCtxPerSeq, 2048)
	for l := int64(32); ; l *= 2 {
		l = min(l, maxInput)
		x := float64(l)
		pp.PrefillPoints = append(pp.PrefillPoints, controller.PrefillPoint{InputTokens: l, Seconds: float64(p.PrefillNs(x, x*x)) / 1e9})
		if l == maxInput {
			break
		}
	}
	for _, b := range []int64{1, 2, 4, 8, 16, 32, 64, 94, 96, 128, 192, 256} {
		for ctx := int64(128); ; ctx *= 2 {
			ctx = min(ctx, maxCtxPerSeq)
			if b*ctx <= p.KVCapacityTokens || b == 1 {
				pp.DecodePoints = append(pp.DecodePoints, controller.DecodePoint{
					Batch: b, CtxTokens: b * ctx, Seconds: float64(p.DecodeStepNs(b, b*ctx)) / 1e9,
				})
			}
			if ctx == maxCtxPerSeq {
				break
			}
		}
	}
	fit, err := pp.Fit()
	if err != nil {
		return nil, fmt.Errorf("sim: controller profile: %w", err)
	}
	ps, err := controller.NewProfileSet(fit)
	if err != nil {
		return nil, fmt.Errorf("sim: controller profile: %w", err)
	}
	return ps, nil
}
