package sim

import (
	"fmt"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// narwhalPolicy drives the real core through its public facade, exactly as
// a router and an agent would: the request lifecycle, the engine table with
// residency, Step every controller step, and the simulator as the core's
// Actuator. Routing reads core.Roles(). No controller logic lives here.
type narwhalPolicy struct {
	c         *core.Core
	owned     bool
	table     *controller.RoleTable
	p, d      []int
	stepNsV   int64
	errs      int64
	lastErr   error
	hook      func(controller.Decision)
	lastObsNs int64
}

func (np *narwhalPolicy) name() string { return "narwhal" }

func (np *narwhalPolicy) init(s *simulator) error {
	cc := core.DefaultConfig()
	if s.cfg.Core != nil {
		cc = *s.cfg.Core
	} else {
		cc.TTFTSLOS = s.cfg.TTFTSLOS
		cc.TPOTSLOS = s.cfg.TPOTSLOS
	}
	maxIn, maxCtx := profileRange(s.reqs, cc.Controller.DefaultOutputTokens)
	ps, popts, err := controllerStart(s.cfg.ControllerProfile, s.cfg.ControllerProfileError, s.prof, maxIn, min(maxCtx, s.prof.KVCapacityTokens))
	if err != nil {
		return err
	}
	if s.o.newCore != nil {
		np.c, err = s.o.newCore(actuator{s}, ps)
	} else {
		opts := append([]core.Option{core.WithActuator(actuator{s}), core.WithProfiles(ps), core.WithCalibration(s.cfg.Calibrate)}, popts...)
		np.c, err = core.New(cc, opts...)
		np.owned = true
	}
	if err != nil {
		return fmt.Errorf("sim: narwhal core: %w", err)
	}
	if np.c == nil {
		return fmt.Errorf("sim: narwhal core factory returned nil: %w", ErrBadConfig)
	}
	np.stepNsV = int64(cc.StepS * 1e9)
	if np.stepNsV <= 0 {
		np.stepNsV = int64(s.cfg.StepS * 1e9)
	}
	np.hook = s.o.onDecision
	for i := range s.eng {
		e := &s.eng[i]
		err := np.c.UpsertEngine(controller.Engine{
			ID: e.id, Node: "node-" + e.id, Model: s.prof.Model, GPU: s.prof.GPU, TP: s.prof.TP,
			Role: e.role, State: controller.StateServing, Live: true,
			KVCapacityTokens: s.prof.KVCapacityTokens,
		})
		if err != nil {
			return fmt.Errorf("sim: register engine %s: %w", e.id, err)
		}
		if err := np.c.UpdateEngine(e.id, s.now, e.resident(s.now), s.prof.KVCapacityTokens, true); err != nil {
			return fmt.Errorf("sim: update engine %s: %w", e.id, err)
		}
	}
	if s.o.coreReady != nil {
		s.o.coreReady(np.c)
	}
	return nil
}

// roles refreshes the index lists when the core publishes a new table.
func (np *narwhalPolicy) roles(s *simulator) {
	t := np.c.Roles()
	if t == np.table {
		return
	}
	np.table = t
	np.p, np.d = np.p[:0], np.d[:0]
	if t == nil {
		return
	}
	for _, id := range t.Prefill {
		if i, ok := s.byID[id]; ok {
			np.p = append(np.p, i)
		}
	}
	for _, id := range t.Decode {
		if i, ok := s.byID[id]; ok {
			np.d = append(np.d, i)
		}
	}
}

func (np *narwhalPolicy) prefill(s *simulator) []int { np.roles(s); return np.p }
func (np *narwhalPolicy) decode(s *simulator) []int  { np.roles(s); return np.d }
func (np *narwhalPolicy) stepNs() int64              { return np.stepNsV }

func (np *narwhalPolicy) step(s *simulator, now int64) int {
	intervalS := float64(now-np.lastObsNs) / 1e9
	if np.lastObsNs == 0 {
		intervalS = float64(np.stepNsV) / 1e9
	}
	np.lastObsNs = now
	for i := range s.eng {
		e := &s.eng[i]
		np.check(np.c.UpdateEngine(e.id, now, e.resident(now), s.prof.KVCapacityTokens, true))
		// What the engine's own metrics gained since the last step (the
		// agent's wire.EngineReport.Latency).
		li := e.latencyInterval(intervalS, now)
		np.check(np.c.ObserveLatency(e.id, now, li))
	}
	d := np.c.Step(now)
	if np.hook != nil {
		np.hook(d)
	}
	for _, m := range d.Moves {
		s.noteMove(m.To)
	}
	return len(d.Moves)
}

func (np *narwhalPolicy) moveDone(_ *simulator, e *engine, now int64) {
	np.c.MoveDone(e.id, now, nil)
}

func (np *narwhalPolicy) check(err error) {
	if err != nil {
		np.errs++
		np.lastErr = err
	}
}

func (np *narwhalPolicy) offer(s *simulator, r *reqState, now int64) {
	np.c.OfferStarted(now)
	np.check(np.c.OfferSized(now, r.EstInputTokens, r.ReqOutput))
}

func (np *narwhalPolicy) admitted(s *simulator, r *reqState, e *engine, now int64) {
	np.check(np.c.Admitted(now, e.id, r.EstInputTokens, r.ReqOutput))
}

func (np *narwhalPolicy) tokenized(s *simulator, r *reqState, now int64) {
	np.check(np.c.Tokenized(s.base+r.ArrivalNs, r.EstInputTokens, r.InputTokens, r.ReqOutput))
}

func (np *narwhalPolicy) firstToken(s *simulator, r *reqState, now int64) {
	np.check(np.c.FirstToken(now, s.base+r.ArrivalNs))
}

func (np *narwhalPolicy) completed(s *simulator, r *reqState, now int64) {
	np.check(np.c.Completed(now, s.base+r.ArrivalNs, r.firstNs, r.ReqOutput, r.OutputTokens))
}

func (np *narwhalPolicy) expired(s *simulator, r *reqState, now int64) {
	np.check(np.c.Expired(now, s.base+r.ArrivalNs, r.firstNs))
}

func (np *narwhalPolicy) close() error {
	if np.owned && np.c != nil {
		return np.c.Close()
	}
	return nil
}

// profileRange is the input and per-sequence context range the
// controller's profile must cover for this workload: every context the
// controller can see. Its windows price an overflow cohort at the
// cohort's largest input plus its largest requested output (two
// different requests), and an unbounded request at its input plus the
// output estimate (at most the largest output, or defaultOut before any
// is learned). A narrower range leaves the profile_coverage gate
// blocking every move to decode (Azure code on 32 engines held 30:2 for
// the whole hour at 0.3 % while 29:3 attains 87 %).
func profileRange(reqs []reqState, defaultOut int64) (maxIn, maxCtx int64) {
	var maxOut int64
	for i := range reqs {
		r := &reqs[i]
		maxIn = max(maxIn, r.InputTokens, r.EstInputTokens)
		maxOut = max(maxOut, r.OutputTokens, r.ReqOutput)
	}
	return maxIn, maxIn + max(maxOut, defaultOut)
}
