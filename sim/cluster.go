package sim

import (
	"fmt"

	"github.com/narwhal-io/narwhal/core/controller"
)

// reqState is one request's progress through the simulated cluster.
type reqState struct {
	Request
	firstNs    int64 // first token (prefill done); 0 none
	doneNs     int64 // last token; 0 not done
	prefillEng int32
	decodeEng  int32
	generated  int64
	decodeKV   int64 // KV tokens reserved on the decode engine
	prefillKV  int64 // KV tokens held on the prefill engine
	admitted   bool
	ended      bool
	expired    bool
	// cancelled: its client gave up before the first token
	// (Config.ClientTimeoutS); also expired and ended.
	cancelled bool
	// cancelPending: the client gave up while the prompt's prefill batch
	// was running; it is dropped when the batch ends.
	cancelPending bool
}

// engine is one simulated inference engine.
type engine struct {
	idx    int
	id     string
	role   controller.Role
	state  controller.EngineState
	target controller.Role
	// prefill side
	queue     []int32 // FIFO of request indices, from qhead
	qhead     int
	qdead     int   // cancelled requests still in queue, skipped when reached
	queuedNs  int64 // Σ single-request prefill time of the queue
	busy      bool
	busyUntil int64
	batch     []int32
	heldKV    int64 // prompts being computed or waiting for their KV transfer
	// decode side
	seqs       []int32
	sumCtx     int64 // Σ (prompt + generated) over seqs
	reserved   int64 // KV tokens reserved by resident and incoming sequences
	incoming   int   // transfers in flight to this engine
	incomingKV int64 // their prompt tokens
	stepping   bool
	// lat accumulates the engine's latency figures since the last report
	// (decode batch and context as sums over the steps; latencyInterval
	// turns them into means).
	lat controller.LatencyInterval
	// busyFrom: when the running prefill batch started; busyNs: prefill
	// time spent since the last report (reportNs); busyS: the last
	// report's figure (LatencyInterval.BusyS points at it).
	busyFrom, busyNs, reportNs int64
	busyS                      float64
}

// latencyInterval returns the figures since the last call and resets
// them: what the engine's own metrics would report over the interval.
func (e *engine) latencyInterval(intervalS float64, nowNs int64) controller.LatencyInterval {
	li := e.lat
	e.lat = controller.LatencyInterval{}
	li.IntervalS = intervalS
	if e.busy {
		e.busyNs += nowNs - max(e.busyFrom, e.reportNs)
	}
	e.busyS, e.busyNs, e.reportNs = float64(e.busyNs)/1e9, 0, nowNs
	li.BusyS = &e.busyS
	if li.DecodeCount > 0 {
		li.DecodeBatch /= li.DecodeCount
		li.DecodeCtxTokens /= li.DecodeCount
	}
	return li
}

func (e *engine) queueLen() int { return len(e.queue) - e.qhead - e.qdead }

func (e *engine) empty() bool {
	return e.queueLen() == 0 && !e.busy && e.heldKV == 0 && len(e.seqs) == 0 && e.incoming == 0 && e.reserved == 0
}

func (e *engine) serves(r controller.Role) bool {
	return e.role == r && e.state == controller.StateServing
}

// outstandingPrefillNs is the prefill work queued or running on e at now.
func (e *engine) outstandingPrefillNs(now int64) int64 {
	w := e.queuedNs
	if e.busy && e.busyUntil > now {
		w += e.busyUntil - now
	}
	return w
}

func (e *engine) resident(now int64) controller.Resident {
	res := controller.Resident{QueuedPrefillS: float64(e.queuedNs) / 1e9}
	if e.busy && e.busyUntil > now {
		res.RunningPrefillS = float64(e.busyUntil-now) / 1e9
	}
	res.DecodeSeqs = int64(len(e.seqs) + e.incoming)
	// What an agent reads from the engine: KV tokens in use now (resident
	// contexts, prompts arriving or held for transfer), not the simulator's
	// reservation of the final context.
	res.KVTokens = e.sumCtx + e.incomingKV + e.heldKV
	return res
}

// startMove marks e draining towards to; the simulator switches it once
// drained. It is the Actuator's body, shared by every policy.
func (e *engine) startMove(to controller.Role) error {
	if e.state != controller.StateServing {
		return fmt.Errorf("sim: engine %s is %s, not serving: %w", e.id, e.state, ErrBadMove)
	}
	if to != controller.RolePrefill && to != controller.RoleDecode || to == e.role {
		return fmt.Errorf("sim: engine %s: move %s -> %s: %w", e.id, e.role, to, ErrBadMove)
	}
	e.state = controller.StateDraining
	e.target = to
	return nil
}
