package controller

import "fmt"

// One controller, one model. Demand is recorded for the whole fleet and a
// move trades one pool's capacity for the other's: an engine of model A
// moved to decode serves none of model B's decode. A fleet whose live
// engines serve more than one model (engines with no model named are not
// counted; names are compared as the profiles compare them, so aliases of
// one model agree) therefore moves nothing: profile_coverage fails with
// the two models named, until the fleet is split (one release, or one
// embedded core, per model; in Kubernetes an engine selector on the
// model's label).

// modelKeyOf is e's model key: the resolved profile's name, else its own.
func (c *Controller) modelKeyOf(e *Engine, pi int) string {
	if pi >= 0 && pi < len(c.profiles.Profiles) && c.profiles.Profiles[pi].Model != "" {
		return normModel(c.profiles.Profiles[pi].Model)
	}
	if e.Model == "" {
		return ""
	}
	return normModel(e.Model)
}

// liveModels is "" while the live engines serve at most one model, else
// the gate's detail naming two of them. Caller holds mu.
func (c *Controller) liveModels() string {
	first := -1
	for i := range c.engines {
		if !c.engines[i].Live || c.modelKey[i] == "" {
			continue
		}
		if first < 0 {
			first = i
			continue
		}
		if c.modelKey[i] != c.modelKey[first] {
			return fmt.Sprintf("live engines serve more than one model (%s on %s, %s on %s): one controller per model",
				c.engines[first].Model, c.engines[first].ID, c.engines[i].Model, c.engines[i].ID)
		}
	}
	return ""
}
