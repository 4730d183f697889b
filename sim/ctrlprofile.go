package sim

import (
	"fmt"

	"github.com/narwhal-io/narwhal/core/controller"
)

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
