package sim

import (
	"github.com/narwhal-io/narwhal/core/controller"
)

// rolesFromEngines lists serving engines by role (static and threshold
// policies route from the simulator's own engine table).
type rolesFromEngines struct {
	p, d []int
}

func (r *rolesFromEngines) refresh(s *simulator) {
	r.p, r.d = r.p[:0], r.d[:0]
	for i := range s.eng {
		e := &s.eng[i]
		if e.state != controller.StateServing {
			continue
		}
		switch e.role {
		case controller.RolePrefill:
			r.p = append(r.p, i)
		case controller.RoleDecode:
			r.d = append(r.d, i)
		}
	}
}

// noCore is the router side of the policies that drive no core.
type noCore struct{}

func (noCore) offer(*simulator, *reqState, int64)             {}
func (noCore) admitted(*simulator, *reqState, *engine, int64) {}
func (noCore) tokenized(*simulator, *reqState, int64)         {}
func (noCore) firstToken(*simulator, *reqState, int64)        {}
func (noCore) completed(*simulator, *reqState, int64)         {}
func (noCore) expired(*simulator, *reqState, int64)           {}
func (noCore) close() error                                   { return nil }

// staticPolicy keeps the first p engines in prefill, the rest in decode.
type staticPolicy struct {
	noCore
	rolesFromEngines
	split   int
	stepNsV int64
}

func (sp *staticPolicy) name() string                        { return "static" }
func (sp *staticPolicy) init(s *simulator) error             { sp.refresh(s); return nil }
func (sp *staticPolicy) prefill(*simulator) []int            { return sp.rolesFromEngines.p }
func (sp *staticPolicy) decode(*simulator) []int             { return sp.d }
func (sp *staticPolicy) step(*simulator, int64) int          { return 0 }
func (sp *staticPolicy) moveDone(*simulator, *engine, int64) {}
func (sp *staticPolicy) stepNs() int64                       { return sp.stepNsV }

// thresholdPolicy is a utilization-threshold reactive baseline in the style
// of load-based planners. Every step, with no move in flight and its
// cooldown passed, it makes at most one move:
//
//   - prefill queue ratio = outstanding prefill seconds (queued + running +
//     router backlog) / (prefill engines × TTFT SLO); ≥ 1 adds a prefill
//     engine (the decode engine with the least KV in use), unless the
//     decode pool left would be over 90 % KV;
//   - decode KV use = (reserved + waiting-for-transfer KV) / decode pool
//     capacity; > 90 % adds a decode engine (the prefill engine with the
//     least queued work), unless prefill would then be at ratio ≥ 1;
//   - release under 60 %: a role whose utilization is under 60 % gives an
//     engine to the other role when that one is over 60 %.
type thresholdPolicy struct {
	noCore
	rolesFromEngines
	stepNsV    int64
	cooldownNs int64
	lastMove   int64
	moving     int
}

func (tp *thresholdPolicy) name() string { return "threshold" }
func (tp *thresholdPolicy) init(s *simulator) error {
	tp.refresh(s)
	tp.lastMove = -1 << 62
	return nil
}
func (tp *thresholdPolicy) prefill(*simulator) []int { return tp.p }
func (tp *thresholdPolicy) decode(*simulator) []int  { return tp.d }
func (tp *thresholdPolicy) stepNs() int64            { return tp.stepNsV }

func (tp *thresholdPolicy) moveDone(s *simulator, _ *engine, _ int64) {
	tp.moving--
	tp.refresh(s)
}

func (tp *thresholdPolicy) step(s *simulator, now int64) int {
	if tp.moving > 0 || now-tp.lastMove < tp.cooldownNs {
		return 0
	}
	var outNs int64
	for _, i := range tp.p {
		outNs += s.eng[i].outstandingPrefillNs(now)
	}
	for k := s.bhead; k < len(s.backlog); k++ {
		if s.reqs[s.backlog[k]].cancelled {
			continue
		}
		l := float64(s.reqs[s.backlog[k]].InputTokens)
		outNs += s.prof.PrefillNs(l, l*l)
	}
	var kvUsed, waiting int64
	minKV, minKVIdx := int64(-1), -1
	for _, i := range tp.d {
		e := &s.eng[i]
		kvUsed += e.reserved
		if minKV < 0 || e.reserved < minKV {
			minKV, minKVIdx = e.reserved, i
		}
	}
	for k := s.thead; k < len(s.transfer); k++ {
		r := &s.reqs[s.transfer[k]]
		waiting += min(r.InputTokens+r.OutputTokens, s.prof.KVCapacityTokens)
	}
	capTok := s.prof.KVCapacityTokens
	np, nd := len(tp.p), len(tp.d)
	ttftNs := float64(s.stats.ttftNs)
	pRatio := func(n int) float64 {
		if n == 0 {
			return 2
		}
		return float64(outNs) / (float64(n) * ttftNs)
	}
	kvUse := func(n int, used int64) float64 {
		if n == 0 {
			return 2
		}
		return float64(used+waiting) / float64(int64(n)*capTok)
	}
	pr, kv := pRatio(np), kvUse(nd, kvUsed)
	minQ, minQIdx := int64(-1), -1
	for _, i := range tp.p {
		if w := s.eng[i].outstandingPrefillNs(now); minQ < 0 || w < minQ {
			minQ, minQIdx = w, i
		}
	}
	toPrefill := func() int {
		if nd <= 1 || minKVIdx < 0 || kvUse(nd-1, kvUsed) > 0.9 {
			return 0
		}
		return tp.start(s, minKVIdx, controller.RolePrefill, now)
	}
	toDecode := func() int {
		if np <= 1 || minQIdx < 0 || pRatio(np-1) >= 1 {
			return 0
		}
		return tp.start(s, minQIdx, controller.RoleDecode, now)
	}
	switch {
	case pr >= 1:
		return toPrefill()
	case kv > 0.9:
		return toDecode()
	case pr < 0.6 && kv > 0.6:
		return toDecode()
	case kv < 0.6 && pr > 0.6:
		return toPrefill()
	}
	return 0
}

func (tp *thresholdPolicy) start(s *simulator, i int, to controller.Role, now int64) int {
	if err := s.eng[i].startMove(to); err != nil {
		return 0
	}
	tp.moving++
	tp.lastMove = now
	s.noteMove(to)
	tp.refresh(s)
	return 1
}

// scheduledPolicy is a timing oracle: it starts at the initial split and,
// at each of its fixed times from the workload start, moves every engine
// needed to reach that move's target split at once (each engine drains,
// then switches like any other move), then holds until the next. With one
// move at the moment a trace's first burst begins and static-best's split
// as the target, it bounds what any reactive controller could attain from
// the same initial split: none can act before the burst is seen, nor move
// more engines at once. With a schedule searched in hindsight (the oracle
// policy, oracle.go) it shows what foresight of the whole workload
// attains.
type scheduledPolicy struct {
	noCore
	rolesFromEngines
	moves   []scheduledMove
	next    int
	stepNsV int64
}

// scheduledMove: at atNs from the workload start, go to target prefill
// engines.
type scheduledMove struct {
	target int
	atNs   int64
}

func (sp *scheduledPolicy) name() string             { return "scheduled" }
func (sp *scheduledPolicy) init(s *simulator) error  { sp.refresh(s); return nil }
func (sp *scheduledPolicy) prefill(*simulator) []int { return sp.p }
func (sp *scheduledPolicy) decode(*simulator) []int  { return sp.d }
func (sp *scheduledPolicy) stepNs() int64            { return sp.stepNsV }

func (sp *scheduledPolicy) moveDone(s *simulator, _ *engine, _ int64) { sp.refresh(s) }

func (sp *scheduledPolicy) step(s *simulator, now int64) int {
	moved := 0
	for sp.next < len(sp.moves) && now-s.base >= sp.moves[sp.next].atNs {
		moved += sp.moveTo(s, sp.moves[sp.next].target)
		sp.next++
	}
	return moved
}

// moveTo starts the moves that bring the engines serving in or bound for
// prefill to target, from the serving engines of the other role (as many
// as serve: engines already moving finish their move first).
func (sp *scheduledPolicy) moveTo(s *simulator, target int) int {
	bound := 0 // serving prefill, or draining / switching towards prefill
	for i := range s.eng {
		e := &s.eng[i]
		if e.state == controller.StateServing && e.role == controller.RolePrefill || e.state != controller.StateServing && e.target == controller.RolePrefill {
			bound++
		}
	}
	from, to := sp.d, controller.RolePrefill
	n := target - bound
	if n < 0 {
		from, to, n = sp.p, controller.RoleDecode, -n
	}
	moved := 0
	for _, i := range from[:min(n, len(from))] { // from is rebuilt only by refresh, below
		if s.eng[i].startMove(to) == nil {
			s.noteMove(to)
			moved++
		}
	}
	sp.refresh(s)
	return moved
}
