package sim

import "testing"

// TestDistServeEnginesFindTheirPublishedFit: every DistServe engine kind
// the simulator offers is built from its entry in controller.DistServeFits
// (a model/TP pair missing there would silently drop the profile).
func TestDistServeEnginesFindTheirPublishedFit(t *testing.T) {
	for _, e := range distServeEngines {
		p, err := LookupProfile(e.name)
		if err != nil {
			t.Errorf("profile %s: %v", e.name, err)
			continue
		}
		if p.Model != e.model || p.TP != e.tp || p.PrefillMs[1] <= 0 || p.DecodeLargeBatch != 95 || p.KVCapacityTokens <= 0 {
			t.Errorf("profile %s: got %+v; want model %s TP %d with its published coefficients and KV capacity", e.name, p, e.model, e.tp)
		}
	}
}
