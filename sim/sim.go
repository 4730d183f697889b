package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
)

// ErrBadMove is returned by the simulator's actuator for a move it cannot
// carry out (unknown engine, engine not serving, same role).
var ErrBadMove = errors.New("bad move")

// policy decides roles; the simulator routes from its role lists.
type policy interface {
	name() string
	// init registers the engines (initial roles already set on them).
	init(s *simulator) error
	// prefill and decode list the engines that take new work now.
	prefill(s *simulator) []int
	decode(s *simulator) []int
	// step runs one control step at now; returns the moves it started.
	step(s *simulator, now int64) int
	// moveDone reports a finished switch.
	moveDone(s *simulator, e *engine, now int64)
	// request lifecycle notifications (the router's calls to the core).
	offer(s *simulator, r *reqState, now int64)
	admitted(s *simulator, r *reqState, e *engine, now int64)
	tokenized(s *simulator, r *reqState, now int64)
	firstToken(s *simulator, r *reqState, now int64)
	completed(s *simulator, r *reqState, now int64)
	expired(s *simulator, r *reqState, now int64)
	stepNs() int64
	close() error
}

type simulator struct {
	cfg  Config
	o    options
	prof Profile
	pol  policy
	eng  []engine
	byID map[string]int
	reqs []reqState
	heap eventHeap
	seq  uint64
	now  int64 // absolute Unix ns (virtual)
	base int64 // virtual Unix ns of workload offset 0
	next int   // next arrival index
	// router state
	backlog  []int32 // requests waiting for any prefill engine
	bhead    int
	transfer []int32 // prompts done, waiting for decode KV
	thead    int
	// accounting
	outstanding int
	moves       int
	reversals   int
	quickRevs   int // reversals within quickReversalNs of the move they reverse
	lastMoveTo  controller.Role
	lastMoveNs  int64
	stats       stats
	events      uint64
	tokenizeNs  int64
	switchNs    int64
	timeoutNs   int64 // Config.ClientTimeoutS; 0 none
	xferLatNs   int64
	xferNsPerTk float64
}

func newSimulator(cfg Config, reqs []Request, o options, pol policy) (*simulator, error) {
	prof, err := LookupProfile(cfg.Profile)
	prof.Slowdown = cfg.EngineSlowdown
	if err != nil {
		return nil, err
	}
	if cfg.KVCapacityTokens > 0 {
		prof.KVCapacityTokens = cfg.KVCapacityTokens
	}
	s := &simulator{cfg: cfg, o: o, prof: prof, pol: pol, byID: make(map[string]int, cfg.Engines)}
	s.base = cfg.StartUnixNs
	s.now = s.base
	s.tokenizeNs = int64(cfg.TokenizeDelayS * 1e9)
	s.switchNs = int64(cfg.SwitchS * 1e9)
	s.timeoutNs = int64(cfg.ClientTimeoutS * 1e9)
	s.xferLatNs = int64(cfg.TransferLatencyS * 1e9)
	s.xferNsPerTk = float64(prof.KVBytesPerToken) / (cfg.TransferGBps * 1e9) * 1e9
	s.reqs = make([]reqState, len(reqs))
	for i := range reqs {
		s.reqs[i] = reqState{Request: reqs[i], prefillEng: -1, decodeEng: -1}
	}
	s.eng = make([]engine, cfg.Engines)
	for i := range s.eng {
		e := &s.eng[i]
		e.idx = i
		e.id = fmt.Sprintf("e%02d", i)
		e.role = controller.RoleDecode
		if i < cfg.InitialPrefill {
			e.role = controller.RolePrefill
		}
		s.byID[e.id] = i
	}
	s.stats.init(cfg, prof, len(reqs), reqs[len(reqs)-1].ArrivalNs)
	if err := pol.init(s); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *simulator) push(t int64, kind uint8, eng, req int32) {
	s.seq++
	s.heap.push(event{t: t, seq: s.seq, kind: kind, eng: eng, req: req})
}

// run processes events until every request has ended.
func (s *simulator) run(ctx context.Context) error {
	step := s.pol.stepNs()
	s.push(s.base, evTick, -1, -1)
	lastArrival := s.base + s.reqs[len(s.reqs)-1].ArrivalNs
	deadline := lastArrival + int64(s.cfg.DrainLimitS*1e9)
	wallStart := time.Now()
	lastProgress := wallStart
	for {
		// next event: the earlier of the next arrival and the heap top
		var ev event
		if s.next < len(s.reqs) && (s.heap.len() == 0 || s.base+s.reqs[s.next].ArrivalNs <= s.heap.a[0].t) {
			ev = event{t: s.base + s.reqs[s.next].ArrivalNs, kind: evArrival, req: int32(s.next)}
			s.next++
		} else if s.heap.len() > 0 {
			ev = s.heap.pop()
		} else {
			break
		}
		if ev.t > deadline {
			s.now = deadline
			s.expireAll()
			break
		}
		s.events++
		if s.o.pace > 0 {
			target := wallStart.Add(time.Duration(float64(ev.t-s.base) / s.o.pace))
			if d := time.Until(target); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
		if s.events&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.o.progress != nil {
				if w := time.Now(); w.Sub(lastProgress) >= time.Second {
					lastProgress = w
					fmt.Fprintf(s.o.progress, "sim %s: t=%.0fs arrived=%d/%d outstanding=%d moves=%d\n",
						s.pol.name(), float64(ev.t-s.base)/1e9, s.next, len(s.reqs), s.outstanding, s.moves)
				}
			}
		}
		s.now = ev.t
		switch ev.kind {
		case evArrival:
			s.arrive(ev.req)
		case evTokenized:
			s.pol.tokenized(s, &s.reqs[ev.req], s.now)
		case evPrefillDone:
			s.prefillDone(&s.eng[ev.eng])
		case evTransferDone:
			s.transferDone(&s.eng[ev.eng], ev.req)
		case evStepDone:
			s.stepDone(&s.eng[ev.eng])
		case evSwitchDone:
			s.switchDone(&s.eng[ev.eng])
		case evClientTimeout:
			s.clientTimeout(ev.req)
		case evTick:
			s.stats.sample(s, s.now)
			s.moves += s.pol.step(s, s.now)
			s.afterRoleChange()
			if s.next < len(s.reqs) || s.outstanding > 0 {
				s.push(s.now+step, evTick, -1, -1)
			}
		}
	}
	s.stats.wallNs = time.Since(wallStart).Nanoseconds()
	return nil
}

// noteMove counts a started move and whether it reverses the previous one
// (a move towards the role the previous move took an engine from).
func (s *simulator) noteMove(to controller.Role) {
	if s.lastMoveTo != controller.RoleNone && to != s.lastMoveTo {
		s.reversals++
		if s.now-s.lastMoveNs < quickReversalNs {
			s.quickRevs++
		}
	}
	s.lastMoveTo, s.lastMoveNs = to, s.now
}

// quickReversalNs: a reversal within this of the move it reverses is
// quick (one dwell of the controller's defaults: the same engine cannot
// have come back, so it is another engine undoing the last move).
const quickReversalNs = int64(60e9)

// expireAll ends every request still in the system at the drain limit.
func (s *simulator) expireAll() {
	for i := range s.reqs {
		r := &s.reqs[i]
		if i >= s.next || r.ended {
			continue
		}
		r.ended = true
		r.expired = true
		s.outstanding--
		s.pol.expired(s, r, s.now)
	}
}

func (s *simulator) arrive(ri int32) {
	r := &s.reqs[ri]
	s.outstanding++
	s.pol.offer(s, r, s.now)
	s.stats.arrival(s, r)
	if s.tokenizeNs >= 0 {
		s.push(s.now+s.tokenizeNs, evTokenized, -1, ri)
	}
	if s.timeoutNs > 0 {
		s.push(s.now+s.timeoutNs, evClientTimeout, -1, ri)
	}
	// FIFO: while older requests wait for a prefill engine, newer ones
	// queue behind them.
	s.trimBacklog()
	if s.bhead < len(s.backlog) || !s.routePrefill(ri) {
		s.backlog = append(s.backlog, ri)
	}
}

// routePrefill places a request on the serving prefill engine with the
// least outstanding prefill work; false when there is none.
func (s *simulator) routePrefill(ri int32) bool {
	best := -1
	var bestW int64
	for _, i := range s.pol.prefill(s) {
		e := &s.eng[i]
		if !e.serves(controller.RolePrefill) {
			continue
		}
		w := e.outstandingPrefillNs(s.now)
		if best < 0 || w < bestW {
			best, bestW = i, w
		}
	}
	if best < 0 {
		return false
	}
	e := &s.eng[best]
	r := &s.reqs[ri]
	r.prefillEng = int32(best)
	r.admitted = true
	s.pol.admitted(s, r, e, s.now)
	e.queue = append(e.queue, ri)
	l := float64(r.InputTokens)
	e.queuedNs += s.prof.PrefillNs(l, l*l)
	s.tryPrefill(e)
	return true
}

// tryPrefill starts the next prefill batch on an idle engine: FIFO, up to
// the batch token budget, as long as the engine's KV can hold the prompts.
func (s *simulator) tryPrefill(e *engine) {
	if e.busy || e.queueLen() == 0 {
		return
	}
	var sumL, sumL2 float64
	e.batch = e.batch[:0]
	var kv int64
	for e.qhead < len(e.queue) {
		ri := e.queue[e.qhead]
		r := &s.reqs[ri]
		if r.cancelled {
			e.qhead++
			e.qdead--
			continue
		}
		need := min(r.InputTokens, s.prof.KVCapacityTokens)
		if len(e.batch) > 0 && int64(sumL)+r.InputTokens > s.prof.MaxBatchTokens {
			break
		}
		if e.heldKV+kv+need > s.prof.KVCapacityTokens {
			break
		}
		l := float64(r.InputTokens)
		sumL += l
		sumL2 += l * l
		kv += need
		r.prefillKV = need
		e.queuedNs -= s.prof.PrefillNs(l, l*l)
		e.batch = append(e.batch, ri)
		e.qhead++
	}
	if e.qhead == len(e.queue) {
		e.queue, e.qhead = e.queue[:0], 0
	}
	if len(e.batch) == 0 {
		return // waiting for prompts held on this engine to move to decode
	}
	if e.queueLen() == 0 {
		e.queuedNs = 0 // no rounding residue
	}
	e.heldKV += kv
	e.busy, e.busyFrom = true, s.now
	d := s.prof.PrefillNs(sumL, sumL2)
	e.busyUntil = s.now + d
	e.lat.PrefillCount++
	e.lat.PrefillSeconds += float64(d) / 1e9
	e.lat.PrefillTokens += sumL
	e.lat.PrefillTokensSq += sumL2
	s.push(e.busyUntil, evPrefillDone, int32(e.idx), -1)
}

func (s *simulator) prefillDone(e *engine) {
	e.busy = false
	e.busyNs += s.now - max(e.busyFrom, e.reportNs)
	for _, ri := range e.batch {
		r := &s.reqs[ri]
		if r.cancelPending {
			// The client is gone: the engine frees the prompt's KV.
			e.heldKV -= r.prefillKV
			r.prefillKV = 0
			s.cancel(r)
			continue
		}
		r.firstNs = s.now
		r.generated = 1
		s.pol.firstToken(s, r, s.now)
		if r.OutputTokens <= 1 {
			e.heldKV -= r.prefillKV
			r.prefillKV = 0
			s.complete(r)
			continue
		}
		s.transfer = append(s.transfer, ri)
	}
	e.batch = e.batch[:0]
	s.dispatchTransfers()
	s.tryPrefill(e)
	s.checkDrained(e)
}

// dispatchTransfers moves finished prompts, in FIFO order, to the serving
// decode engine with the most free KV; the head waits while none has room.
func (s *simulator) dispatchTransfers() {
	for s.thead < len(s.transfer) {
		ri := s.transfer[s.thead]
		r := &s.reqs[ri]
		need := min(r.InputTokens+r.OutputTokens, s.prof.KVCapacityTokens)
		best := -1
		var bestFree int64
		for _, i := range s.pol.decode(s) {
			e := &s.eng[i]
			if !e.serves(controller.RoleDecode) {
				continue
			}
			if free := s.prof.KVCapacityTokens - e.reserved; free >= need && (best < 0 || free > bestFree) {
				best, bestFree = i, free
			}
		}
		if best < 0 {
			return
		}
		s.thead++
		e := &s.eng[best]
		e.reserved += need
		e.incoming++
		e.incomingKV += r.InputTokens
		r.decodeKV = need
		r.decodeEng = int32(best)
		d := s.xferLatNs + int64(float64(r.InputTokens)*s.xferNsPerTk)
		s.push(s.now+d, evTransferDone, int32(best), ri)
	}
	if s.thead == len(s.transfer) {
		s.transfer, s.thead = s.transfer[:0], 0
	}
}

func (s *simulator) transferDone(e *engine, ri int32) {
	r := &s.reqs[ri]
	pe := &s.eng[r.prefillEng]
	pe.heldKV -= r.prefillKV
	r.prefillKV = 0
	e.incoming--
	e.incomingKV -= r.InputTokens
	e.seqs = append(e.seqs, ri)
	e.sumCtx += r.InputTokens + r.generated
	if !e.stepping {
		s.startStep(e)
	}
	s.tryPrefill(pe)
	s.checkDrained(pe)
}

func (s *simulator) startStep(e *engine) {
	e.stepping = true
	d := s.prof.DecodeStepNs(int64(len(e.seqs)), e.sumCtx)
	if len(e.seqs) > 0 {
		e.lat.DecodeCount++
		e.lat.DecodeSeconds += float64(d) / 1e9
		e.lat.DecodeBatch += float64(len(e.seqs))
		e.lat.DecodeCtxTokens += float64(e.sumCtx)
	}
	s.push(s.now+d, evStepDone, int32(e.idx), -1)
}

func (s *simulator) stepDone(e *engine) {
	freed := false
	kept := e.seqs[:0]
	for _, ri := range e.seqs {
		r := &s.reqs[ri]
		r.generated++
		e.sumCtx++
		if r.generated >= r.OutputTokens {
			e.sumCtx -= r.InputTokens + r.generated
			e.reserved -= r.decodeKV
			r.decodeKV = 0
			s.complete(r)
			freed = true
			continue
		}
		kept = append(kept, ri)
	}
	e.seqs = kept
	if len(e.seqs) > 0 {
		s.startStep(e)
	} else {
		e.stepping = false
	}
	if freed {
		s.dispatchTransfers()
	}
	s.checkDrained(e)
}

func (s *simulator) complete(r *reqState) {
	r.doneNs = s.now
	r.ended = true
	s.outstanding--
	s.pol.completed(s, r, s.now)
	s.stats.done(s, r)
}

// checkDrained starts the switch of a draining engine once it holds no work.
func (s *simulator) checkDrained(e *engine) {
	if e.state != controller.StateDraining || !e.empty() {
		return
	}
	e.state = controller.StateSwitching
	s.push(s.now+s.switchNs, evSwitchDone, int32(e.idx), -1)
}

// clientTimeout: the client of request ri gives up unless its first token
// came. Queued anywhere, the request leaves at once; in a running prefill
// batch it is dropped when the batch ends (the engine finishes the batch).
func (s *simulator) clientTimeout(ri int32) {
	r := &s.reqs[ri]
	if r.ended || r.firstNs != 0 {
		return
	}
	if r.prefillKV > 0 { // in the running batch
		r.cancelPending = true
		return
	}
	if r.admitted {
		e := &s.eng[r.prefillEng]
		l := float64(r.InputTokens)
		e.queuedNs -= s.prof.PrefillNs(l, l*l)
		e.qdead++
		if e.queueLen() == 0 { // only cancelled requests left
			e.queue, e.qhead, e.qdead, e.queuedNs = e.queue[:0], 0, 0, 0
		}
		s.cancel(r)
		s.checkDrained(e)
		return
	}
	s.cancel(r) // in the router's backlog; skipped when reached
}

// cancel ends a request its client gave up on: it counts as expired (it
// missed both SLOs) and the router reports it so.
func (s *simulator) cancel(r *reqState) {
	r.ended, r.expired, r.cancelled = true, true, true
	s.outstanding--
	s.pol.expired(s, r, s.now)
}

// trimBacklog drops cancelled requests from the head of the backlog.
func (s *simulator) trimBacklog() {
	for s.bhead < len(s.backlog) && s.reqs[s.backlog[s.bhead]].cancelled {
		s.bhead++
	}
	if s.bhead == len(s.backlog) {
		s.backlog, s.bhead = s.backlog[:0], 0
	}
}

func (s *simulator) switchDone(e *engine) {
	e.role = e.target
	e.target = controller.RoleNone
	e.state = controller.StateServing
	e.sumCtx, e.reserved = 0, 0
	s.pol.moveDone(s, e, s.now)
	s.afterRoleChange()
}

// afterRoleChange retries work that waits for an engine of some role, and
// starts switches of engines that were already empty when asked to move.
func (s *simulator) afterRoleChange() {
	for i := range s.eng {
		s.checkDrained(&s.eng[i])
	}
	for s.trimBacklog(); s.bhead < len(s.backlog); s.trimBacklog() {
		if !s.routePrefill(s.backlog[s.bhead]) {
			break
		}
		s.bhead++
	}
	if s.bhead == len(s.backlog) {
		s.backlog, s.bhead = s.backlog[:0], 0
	}
	s.dispatchTransfers()
}

// actuator is the simulator's controller.Actuator: Start marks the engine
// draining; the event loop switches it once drained and reports back.
type actuator struct{ s *simulator }

func (a actuator) Start(m controller.Move) error {
	i, ok := a.s.byID[m.EngineID]
	if !ok {
		return fmt.Errorf("sim: engine %q: %w", m.EngineID, ErrBadMove)
	}
	return a.s.eng[i].startMove(m.To)
}

var _ controller.Actuator = actuator{}
