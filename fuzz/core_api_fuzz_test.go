package fuzz

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

// The call kinds FuzzCoreAPISequence draws: a router's request lifecycle,
// an agent's engine calls, the controller loop, the actuator's answers,
// reads, and the state's save and restore.
const (
	opOfferStarted = iota
	opOfferAbandoned
	opOfferSized
	opTokenized
	opAdmitted
	opRefused
	opFirstToken
	opCompleted
	opFailed
	opExpired
	opUpsertEngine
	opRemoveEngine
	opUpdateEngine
	opObserveLatency
	opMoveDone
	opStep
	opClock    // the fake clock moves (forward, back, anywhere)
	opActuator // the actuator's behaviour for the next moves
	opRead     // State, Decisions, NewestDecisions, Unprofiled
	opRestore  // Controller().Restore of the saved state, maybe corrupted
	opRestart  // a new core from the saved state (JSON), engines re-registered
	opScrape   // Prometheus collection of Collectors()
	opSetClock // install the clock on a core built without one
	opSink     // the journal sink writes, or fails (a full disk)
	numAPIOps
)

var apiOpNames = [numAPIOps]string{"offer_started", "offer_abandoned", "offer_sized", "tokenized", "admitted", "refused",
	"first_token", "completed", "failed", "expired", "upsert_engine", "remove_engine", "update_engine", "observe_latency",
	"move_done", "step", "clock", "actuator", "read", "restore", "restart", "scrape", "set_clock", "sink"}

// apiIDs are the engine ids a sequence draws from: four registered at the
// start, two more valid ones, the empty id and one too long for the table.
var apiIDs = [...]string{"p0", "p1", "d0", "d1", "x4", "ghost", "", strings.Repeat("z", 254)}

// apiValidIDs: the engine table can never hold more than these.
const apiValidIDs = 6

var (
	apiModels = [...]string{"facebook/opt-13b", "meta-llama/Llama-3.1-8B-Instruct", "no-such-model", "", strings.Repeat("m", 257)}
	apiGPUs   = [...]string{"A100-80GB", "H100", "", "TPU?"}
)

// apiProfiles: the built-in profiles, fitted once (New copies them).
var apiProfiles = controller.BuiltinProfiles()

// apiMaxOps bounds one input's sequence (an iteration stays well under a
// millisecond).
const apiMaxOps = 48

// apiConfig is the core's small fixed configuration: a 6 s window of
// 1 s buckets and gates that let the controller move at once, so that
// sequences reach moves, MoveDone and moves in flight.
func apiConfig(closedForm bool) core.Config {
	cfg := core.DefaultConfig()
	cfg.DemandWindowS = 6 // few buckets: a core is built per input
	cfg.MinEvidenceSpanS = 2
	cfg.MonitorIntervalS = 1
	cfg.PendingTimeoutS = 3
	cc := &cfg.Controller
	cc.CooldownS, cc.DwellS = 0, 0
	cc.ConfirmSteps, cc.ReversalConfirmSteps = 1, 1
	cc.MinEvidenceArrivals = 2
	cc.MinObservations = 1
	cc.PredictionArrivals = 0
	cc.MaxMovesPerStep = 2
	cc.JournalRing = 8
	if closedForm {
		cc.Scoring = controller.ScoringClosedForm
	}
	return cfg
}

// apiReader hands out the fuzz input (0 once exhausted).
type apiReader struct {
	b []byte
	i int
}

func (r *apiReader) more() bool { return r.i < len(r.b) }

func (r *apiReader) u8() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *apiReader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }

func (r *apiReader) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.u8())
	}
	return v
}

// tokens: a token count, valid or hostile.
func (r *apiReader) tokens() int64 {
	switch r.u8() % 12 {
	case 1:
		return -1
	case 2:
		return buckets.MaxTokens
	case 3:
		return buckets.MaxTokens + 1
	case 4:
		return math.MinInt64
	case 5:
		return math.MaxInt64
	case 6:
		return int64(r.u64())
	default:
		return int64(r.u16())
	}
}

// at: a timestamp around now, or a hostile one.
func (r *apiReader) at(now int64) int64 {
	switch r.u8() % 16 {
	case 0, 1, 2:
		return now - int64(r.u8())*1e7 // up to 2.55 s before
	case 3:
		return now + int64(r.u8())*1e7 // up to 2.55 s ahead
	case 4:
		return now - int64(r.u16())*1e8 // up to 1.8 h before
	case 5:
		return now + int64(r.u16())*1e8 // up to 1.8 h ahead
	case 6:
		return 0
	case 7:
		return -1
	case 8:
		return 1
	case 9:
		return math.MinInt64
	case 10:
		return math.MaxInt64
	case 11:
		return int64(r.u64())
	case 12:
		return now - 400*24*3600e9 // more than a year back
	case 13:
		return now + 2*24*3600e9 // two days ahead
	default:
		return now - int64(r.u8())*1e9
	}
}

// float: a residency or latency figure, valid or hostile.
func (r *apiReader) float() float64 {
	switch r.u8() % 12 {
	case 1:
		return -1
	case 2:
		return math.NaN()
	case 3:
		return math.Inf(1)
	case 4:
		return math.Inf(-1)
	case 5:
		return 1e15
	case 6:
		return 2e15
	case 7:
		return math.MaxFloat64
	case 8:
		return 5e-324
	case 9:
		return math.Float64frombits(r.u64())
	default:
		return float64(r.u16()) / 64
	}
}

func (r *apiReader) id() string { return apiIDs[int(r.u8())%len(apiIDs)] }

func (r *apiReader) role() controller.Role {
	switch k := r.u8() % 8; k {
	case 6:
		return 3
	case 7:
		return 255
	default:
		return controller.Role(k % 3)
	}
}

func (r *apiReader) state() controller.EngineState {
	if k := r.u8() % 8; k < 5 {
		return controller.StateServing
	} else if k < 7 {
		return controller.EngineState(k - 4) // draining, switching
	}
	return 9
}

func (r *apiReader) resident() controller.Resident {
	if r.u8()%4 != 0 {
		return controller.Resident{QueuedPrefillS: float64(r.u8()) / 16, RunningPrefillS: float64(r.u8()) / 64,
			DecodeSeqs: int64(r.u8()), KVTokens: int64(r.u16())}
	}
	return controller.Resident{QueuedPrefillS: r.float(), RunningPrefillS: r.float(), DecodeSeqs: r.tokens(), KVTokens: r.tokens()}
}

func (r *apiReader) latency() controller.LatencyInterval {
	li := controller.LatencyInterval{IntervalS: 1 + float64(r.u8()%16), PrefillCount: float64(r.u8() % 32),
		PrefillSeconds: float64(r.u8()) / 64, PrefillTokens: float64(r.u16()) * 4,
		DecodeCount: float64(r.u8()) * 8, DecodeSeconds: float64(r.u8()) / 32, DecodeBatch: float64(r.u8() % 64),
		DecodeCtxTokens: float64(r.u16()) * 8}
	k := r.u8()
	if k&1 != 0 {
		b := float64(r.u8()) / 16
		li.BusyS = &b
	}
	if k&2 != 0 { // one figure hostile
		v := r.float()
		switch r.u8() % 6 {
		case 0:
			li.IntervalS = v
		case 1:
			li.PrefillSeconds = v
		case 2:
			li.PrefillTokens = v
		case 3:
			li.DecodeSeconds = v
		case 4:
			li.DecodeCtxTokens = v
		default:
			li.BusyS = &v
		}
	}
	return li
}

// apiActuator carries moves out as the sequence says: held until a
// MoveDone call, refused at Start, or done at once.
type apiActuator struct {
	c       *core.Core
	mode    byte // 0 hold, 1 fail, 2 done at once
	held    []controller.Move
	bad     []string // moves that should not have been handed over
	started int
}

// apiSink is the journal sink: it writes, or fails while fail is set.
type apiSink struct{ fail bool }

func (s *apiSink) Write(*controller.Decision) error {
	if s.fail {
		return errors.New("fuzz sink: disk full")
	}
	return nil
}

func (s *apiSink) Close() error { return nil }

func (a *apiActuator) Start(m controller.Move) error {
	// A move reaches the actuator only for an engine the core holds,
	// draining toward the move's role.
	es := a.c.Engines()
	if i := slices.IndexFunc(es, func(e controller.Engine) bool { return e.ID == m.EngineID }); i < 0 {
		a.bad = append(a.bad, fmt.Sprintf("move %+v handed over for an engine the core does not hold", m))
	} else if e := es[i]; e.State == controller.StateServing || e.TargetRole != m.To || e.Role != m.From {
		a.bad = append(a.bad, fmt.Sprintf("move %+v handed over for engine %+v", m, e))
	}
	a.started++
	switch a.mode {
	case 1:
		return errors.New("fuzz actuator: start refused")
	case 2:
		a.c.MoveDone(m.EngineID, m.AtNs, nil)
	default:
		if len(a.held) < 64 {
			a.held = append(a.held, m)
		}
	}
	return nil
}

// apiView is the core's observable state, compared around a refused call.
type apiView struct {
	roles     *controller.RoleTable // a refused call publishes no new table
	engines   []controller.Engine
	demand    buckets.DemandHistory
	totals    [buckets.NumOutcomes]buckets.TotalCounts
	ahead     uint64
	expired   uint64
	behind    int64
	latest    uint64
	persisted *controller.PersistedState // full views only
}

func viewOf(c *core.Core, full bool) apiView {
	v := apiView{roles: c.Roles(), engines: c.Engines(), demand: c.Demand().Snapshot(), totals: c.Attainment().Totals().Read(),
		ahead: c.AheadRefused(), expired: c.PendingExpired(), behind: c.ClockBehindNs()}
	if d, ok := c.Controller().Latest(); ok {
		v.latest = d.Seq
	}
	if full {
		st := c.Controller().State()
		v.persisted = &st
	}
	return v
}

// apiRun is one sequence's state: the core, the fake clock and what the
// sequence knows the core must show.
type apiRun struct {
	t          *testing.T
	cfg        core.Config
	closedForm bool
	hasClock   bool
	clk        int64
	c          *core.Core
	act        *apiActuator
	sink       *apiSink
	reg        *prometheus.Registry

	pending    int64                 // offers started and not ended (model)
	lastStep   int64                 // the latest Step's time (0: none on this core)
	prevSeq    uint64                // the latest decision's sequence
	prevVer    uint64                // the role table's version on this core
	prevTable  *controller.RoleTable // the role table the last check read on this core
	prevAhead  uint64
	prevExp    uint64
	prevTotals [buckets.NumOutcomes]buckets.TotalCounts
	tolNs      int64
	trace      []string
}

func (a *apiRun) newCore() *core.Core {
	opts := []core.Option{core.WithLogger(slog.New(slog.DiscardHandler)), core.WithActuator(a.act), core.WithProfiles(apiProfiles), core.WithJournalSink(a.sink)}
	if a.hasClock {
		opts = append(opts, core.WithClock(func() int64 { return a.clk }))
	}
	c, err := core.New(a.cfg, opts...)
	if err != nil {
		a.t.Fatalf("core.New: %v", err)
	}
	a.act.c, a.act.held = c, a.act.held[:0]
	a.reg, a.pending, a.lastStep, a.prevVer, a.prevAhead, a.prevExp = nil, 0, 0, 0, 0, 0
	a.prevTable = nil
	a.prevTotals = [buckets.NumOutcomes]buckets.TotalCounts{}
	return c
}

func (a *apiRun) fatalf(format string, args ...any) {
	a.t.Helper()
	a.t.Fatalf("after %s:\n"+format, append([]any{strings.Join(a.trace, "\n  ")}, args...)...)
}

// FuzzCoreAPISequence decodes its input (a header byte: bit 0 a clock,
// bit 1 closed-form scoring; then per call a kind byte and its
// arguments) as a sequence of calls on one core (four engines, both roles, a fake clock the input moves, an
// actuator that holds, refuses or completes moves) with arguments drawn
// from the input, hostile ones included: token counts outside [0,
// MaxTokens], times far back, far ahead or going backwards, unknown and
// invalid engine ids, duplicate request endings, MoveDone for engines not
// moving, an engine removed mid-move, Step at the same time twice, a
// corrupted saved state, a restart. After every call: no panic; a refused
// call wraps its documented error and leaves the observable state as it
// was (roles, engines, demand history, totals, the saved state; the ends
// a refused offer call still makes and the ahead-of-clock count are
// documented); the role table lists only engines the core knows, each in
// at most one role, and every live serving engine in its role; counters
// never go negative or back; the pending offers match the calls made;
// the engine table, the journal ring and the decisions returned stay
// bounded; the saved state is one a restart accepts.
func FuzzCoreAPISequence(f *testing.F) {
	// Argument encoders for the seeds (see apiReader).
	b := func(xs ...byte) []byte { return xs }
	now := b(0, 0)                                    // at: now
	ago := func(cs byte) []byte { return b(0, cs) }   // at: cs/100 s before
	later := func(cs byte) []byte { return b(3, cs) } // at: cs/100 s after
	tok := func(n uint16) []byte { return b(0, byte(n>>8), byte(n)) }
	const (
		atZero, atNeg, atMin, atMax, atYearBack, atDaysAhead   = 6, 7, 9, 10, 12, 13
		tokNeg, tokTooMany, tokMin, tokMax                     = 1, 3, 4, 5
		idP0, idP1, idD0, idD1, idX4, idGhost, idEmpty, idLong = 0, 1, 2, 3, 4, 5, 6, 7
	)
	op := func(o byte, args ...[]byte) []byte { return slices.Concat(append([][]byte{{o}}, args...)...) }
	// Each call kind once with benign arguments.
	lat := b(4, 8, 8, 0, 16, 8, 8, 8, 0, 64) // a latency interval
	res := b(1, 8, 4, 2, 0, 16)              // a residency
	f.Add(slices.Concat(b(1), op(opOfferStarted), op(opOfferAbandoned, now), op(opOfferStarted), op(opOfferSized, now, tok(256), tok(16)),
		op(opTokenized, now, tok(256), tok(300), tok(16)), op(opAdmitted, now, b(idP0), tok(300), tok(16)), op(opRefused, now),
		op(opFirstToken, now, ago(10)), op(opCompleted, now, ago(30), ago(10), b(1), tok(16), tok(16)), op(opFailed, now, ago(30), b(1)),
		op(opExpired, now, ago(30), b(0), ago(10)), op(opUpsertEngine, b(idX4, 1, 0, 0, 1, 0, 0), tok(60000), res, b(0), b(0)),
		op(opRemoveEngine, b(idX4)), op(opUpdateEngine, b(idD0), now, res, tok(60000), b(1)), op(opObserveLatency, b(idD0), now, lat, b(0)),
		op(opMoveDone, b(idP0), now, b(0)), op(opStep, b(0)), op(opClock, b(0, 10)), op(opActuator, b(2)),
		op(opRead, now, b(0, 0, 0, 0, 0, 0, 0, 0), b(0), b(1)), op(opRestore, b(0)), op(opRestart), op(opScrape), op(opSetClock),
		op(opSink, b(0)), op(opStep, b(0))))
	// A request's life, a duplicate completion, failed, expired, refused
	// and abandoned requests, then the clock far back and a step at the
	// same time twice.
	life := op(opCompleted, now, ago(30), ago(20), b(1), tok(16), tok(12))
	f.Add(slices.Concat(b(1), op(opOfferStarted), op(opOfferSized, now, tok(256), tok(16)),
		op(opTokenized, now, tok(256), tok(320), tok(16)), op(opAdmitted, now, b(idP0), tok(320), tok(16)),
		op(opFirstToken, now, ago(20)), life, life, op(opFailed, now, ago(30), b(0), ago(20)), op(opExpired, now, ago(30), b(1)),
		op(opRefused, now), op(opOfferStarted), op(opOfferAbandoned, now), op(opStep, b(0)),
		op(opClock, b(5, 1, 0)), op(opStep, b(0)), op(opStep, b(1)), op(opOfferSized, now, tok(256), tok(16))))
	// Hostile per-request values on a core without a clock: times at the
	// extremes, ahead, behind and out of order; token counts negative or
	// too large; empty, too long and unknown engines.
	f.Add(slices.Concat(b(0), op(opOfferSized, b(atMin), b(tokNeg), b(tokMax)), op(opOfferSized, b(atMax), tok(16), tok(16)),
		op(opOfferAbandoned, b(atNeg)), op(opRefused, b(atDaysAhead)), op(opStep, b(0)), op(opRefused, b(atDaysAhead)),
		op(opAdmitted, now, b(idEmpty), tok(1), tok(1)), op(opAdmitted, now, b(idLong), tok(1), tok(1)),
		op(opAdmitted, now, b(idGhost), tok(1), tok(1)), op(opFirstToken, b(5, 0x20, 0), now),
		op(opFailed, b(atMin), now, b(1)), op(opExpired, now, later(10), b(1)), op(opTokenized, now, b(tokMin), tok(1), tok(1)),
		op(opCompleted, now, ago(10), later(10), b(1), tok(1), tok(1)), op(opCompleted, now, ago(10), now, b(0), b(tokTooMany), tok(1)),
		op(opCompleted, b(atYearBack), ago(10), ago(5), b(1), tok(1), tok(1)), op(opFirstToken, b(atZero), now)))
	// Offers left pending time out at a step; then the clock is installed
	// and a record two days ahead is refused.
	f.Add(slices.Concat(b(0), op(opOfferStarted), op(opOfferStarted), op(opOfferStarted), op(opStep, b(0)),
		op(opClock, b(0, 20)), op(opStep, b(0)), op(opClock, b(0, 20)), op(opStep, b(0)), op(opOfferAbandoned, now),
		op(opRefused, now), op(opStep, b(0)), op(opSetClock), op(opRefused, b(atDaysAhead))))
	// Engines: valid and refused rows, one registered draining with no
	// move, updates, latency intervals, MoveDone for engines not moving or
	// unknown, a removal, and a restart.
	f.Add(slices.Concat(b(1), op(opUpsertEngine, b(idX4, 2, 0, 0, 1, 1, 1), tok(1000), res, b(1, 3), b(0)),
		op(opUpsertEngine, b(idLong, 1, 0, 0, 1, 0, 0), tok(0), b(1, 0, 0, 0, 0, 0), b(0), b(0)),
		op(opUpsertEngine, b(idGhost, 0, 5, 1, 1, 0, 0), tok(0), b(1, 0, 0, 0, 0, 0), b(2), b(0, 0, 0, 0, 0, 0, 0, 8), b(0)),
		op(opUpsertEngine, b(idX4, 0, 0, 0, 1, 0, 0), b(tokNeg), b(1, 0, 0, 0, 0, 0), b(0), b(1, atNeg)),
		op(opUpdateEngine, b(idP0), now, b(0, 2, 1, b(tokNeg)[0], tok(1)[0], 0, 0), tok(0), b(1)),
		op(opUpdateEngine, b(idP0), now, res, tok(1000), b(0)),
		op(opObserveLatency, b(idD0), now, lat, b(1, 16)),
		op(opObserveLatency, b(idD0), now, lat, b(2, 2, 1)),
		op(opMoveDone, b(idEmpty), now, b(0)), op(opMoveDone, b(idP1), now, b(0)), op(opMoveDone, b(idGhost), now, b(1)),
		op(opRemoveEngine, b(idD0)), op(opMoveDone, b(idD0), now, b(0)), op(opRemoveEngine, b(idD0)),
		op(opRestart), op(opStep, b(0)), op(opRead, now, b(0, 0, 0, 0, 0, 0, 0, 0), b(3), b(0))))
	// Completions far past the TPOT SLO while an offer is pending:
	// observed decode pressure moves prefill engines, held by the
	// actuator, then done, failed, removed mid-move; a restart, restores
	// of corrupted states, reads and a scrape.
	slow := op(opCompleted, now, b(4, 0, 0x20), ago(255), b(1), tok(64), tok(2))
	f.Add(slices.Concat(b(1), op(opActuator, b(0)), op(opOfferStarted), slow, slow, slow, op(opStep, b(0)),
		op(opClock, b(0, 10)), slow, slow, op(opStep, b(0)), op(opStep, b(1)),
		op(opMoveDone, b(8), now, b(0)), op(opMoveDone, b(9), now, b(1)), op(opRemoveEngine, b(idD1)), op(opMoveDone, b(10), now, b(0)),
		op(opRestart), op(opStep, b(0)), op(opRestore, b(0)), op(opRestore, b(4), b(atNeg)), op(opRestore, b(6, idX4, 2), now),
		op(opRestore, b(1)), op(opRestore, b(13), b(atNeg)), op(opRestore, b(7)),
		op(opRead, now, b(0, 0, 0, 0, 0, 0, 0, 3), b(4), b(1)), op(opScrape)))
	// A full disk holds a move; its engine is removed and registered
	// again, the disk recovers; the next move is refused by the actuator,
	// the one after done at once by it.
	f.Add(slices.Concat(b(1), op(opActuator, b(0)), op(opSink, b(1)), op(opOfferStarted), slow, slow, slow, op(opStep, b(0)),
		op(opRemoveEngine, b(idP0)), op(opUpsertEngine, b(idP0, 1, 0, 0, 1, 0, 0), tok(0), b(1, 0, 0, 0, 0, 0), b(0), b(0)),
		op(opSink, b(0)), op(opActuator, b(1)), op(opStep, b(0)), op(opActuator, b(2)), op(opClock, b(0, 10)), slow, slow,
		op(opStep, b(0)), op(opRead, now, b(0, 0, 0, 0, 0, 0, 0, 0), b(0), b(1))))
	// A full disk holds a move of p0 off prefill; p0 is registered in
	// place as decode and not live, and the disk recovers: the held move
	// (from a role p0 no longer holds) is dropped, not handed over (found
	// by this fuzzer in CI).
	f.Add(slices.Concat(b(1), op(opActuator, b(0)), op(opSink, b(1)), op(opOfferStarted), slow, slow, slow, op(opStep, b(0)),
		op(opUpsertEngine, b(idP0, 2, 0, 0, 0, 0, 0), tok(0), b(1, 0, 0, 0, 0, 0), b(0), b(0)),
		op(opSink, b(0)), op(opStep, b(0)), op(opRead, now, b(0, 0, 0, 0, 0, 0, 0, 0), b(0), b(1))))
	f.Fuzz(apiSequence)
}

// apiSequence runs one input (FuzzCoreAPISequence).
func apiSequence(t *testing.T, data []byte) {
	r := &apiReader{b: data}
	hdr := r.u8()
	a := &apiRun{t: t, closedForm: hdr&2 != 0, hasClock: hdr&1 != 0, clk: fuzzBase, act: &apiActuator{}, sink: &apiSink{}}
	a.cfg = apiConfig(a.closedForm)
	width := buckets.BucketWidth(int64(a.cfg.StepS*1e9), int64(a.cfg.MinEvidenceSpanS*1e9))
	a.tolNs = width // future_tolerance_s 0: one demand bucket
	a.c = a.newCore()
	defer func() { a.c.Close() }()
	for i, id := range apiIDs[:4] {
		role := controller.RolePrefill
		if i >= 2 {
			role = controller.RoleDecode
		}
		if err := a.c.UpsertEngine(controller.Engine{ID: id, Node: "n", Model: apiModels[0], GPU: apiGPUs[0], Role: role,
			Live: true, KVCapacityTokens: 66144}); err != nil {
			t.Fatal(err)
		}
	}
	a.check(false)
	for n := 0; n < apiMaxOps && r.more(); n++ {
		a.call(r)
		a.check(true)
	}
}

// perRequest checks a per-request call's answer: an error wraps
// ErrInvalidInput or ErrUnknownEngine, ahead-of-clock refusals name a
// time past the clock, and a refusal leaves the view as it was (less one
// pending offer for the calls documented to end one whatever they
// return, plus the ahead-of-clock count). mustRefuse: the arguments
// break a documented rule.
func (a *apiRun) perRequest(before apiView, err error, endsPending bool, ts int64, mustRefuse bool) {
	a.t.Helper()
	if endsPending && a.pending > 0 {
		a.pending--
	}
	if mustRefuse && err == nil {
		a.fatalf("accepted arguments a documented rule refuses")
	}
	if err == nil {
		return
	}
	if !errors.Is(err, core.ErrInvalidInput) && !errors.Is(err, core.ErrUnknownEngine) {
		a.fatalf("error %q wraps neither ErrInvalidInput nor ErrUnknownEngine", err)
	}
	ahead := errors.Is(err, core.ErrAheadOfClock)
	if ahead {
		before.ahead++
		lim := int64(math.MaxInt64)
		if a.hasClock {
			lim = satAdd(a.clk, a.tolNs)
		} else if a.lastStep != 0 {
			lim = satAdd(a.lastStep, int64(a.cfg.StepS*1e9)+a.tolNs)
		}
		if ts <= lim {
			a.fatalf("time %d refused as ahead of the clock, limit %d", ts, lim)
		}
	}
	if endsPending {
		before.demand.Unsized.Pending = max(0, before.demand.Unsized.Pending-1)
	}
	a.unchanged(before, fmt.Sprintf("refused (%v)", err))
}

func satAdd(x, y int64) int64 {
	if y > 0 && x > math.MaxInt64-y {
		return math.MaxInt64
	}
	return x + y
}

// unchanged fails when the core's observable state differs from before.
func (a *apiRun) unchanged(before apiView, why string) {
	a.t.Helper()
	after := viewOf(a.c, before.persisted != nil)
	if before.roles != after.roles {
		a.fatalf("%s, yet the role table was republished: %+v -> %+v", why, *before.roles, *after.roles)
	}
	if !reflect.DeepEqual(before, after) {
		a.fatalf("%s, yet the state changed:\nbefore %+v\nafter  %+v", why, before, after)
	}
}

func badTok(xs ...int64) bool {
	for _, x := range xs {
		if x < 0 || x > buckets.MaxTokens {
			return true
		}
	}
	return false
}

func (a *apiRun) call(r *apiReader) {
	t := a.t
	t.Helper()
	op := int(r.u8()) % numAPIOps
	c := a.c
	note := func(format string, args ...any) {
		a.trace = append(a.trace, apiOpNames[op]+" "+fmt.Sprintf(format, args...))
	}
	switch op {
	case opOfferStarted:
		note("")
		c.OfferStarted(a.clk)
		a.pending++
	case opOfferAbandoned:
		ts := r.at(a.clk)
		note("%d", ts)
		v := viewOf(c, false)
		a.perRequest(v, c.OfferAbandoned(ts), true, ts, ts <= 0)
	case opOfferSized:
		ts, est, out := r.at(a.clk), r.tokens(), r.tokens()
		note("%d %d %d", ts, est, out)
		v := viewOf(c, false)
		a.perRequest(v, c.OfferSized(ts, est, out), true, ts, ts <= 0 || badTok(est, out))
	case opTokenized:
		ts, est, exact, out := r.at(a.clk), r.tokens(), r.tokens(), r.tokens()
		note("%d %d %d %d", ts, est, exact, out)
		v := viewOf(c, false)
		a.perRequest(v, c.Tokenized(ts, est, exact, out), false, ts, ts <= 0 || badTok(est, exact, out))
	case opAdmitted:
		ts, id, in, out := r.at(a.clk), r.id(), r.tokens(), r.tokens()
		note("%d %q %d %d", ts, id, in, out)
		v := viewOf(c, false)
		err := c.Admitted(ts, id, in, out)
		a.perRequest(v, err, false, ts, ts <= 0 || badTok(in, out) || !c.Roles().Known(id))
		if id != "" && !c.Roles().Known(id) && err != nil && !errors.Is(err, core.ErrUnknownEngine) && !badTok(in, out) && ts > 0 {
			a.fatalf("admitted on unknown engine %q: %v does not wrap ErrUnknownEngine", id, err)
		}
	case opRefused:
		ts := r.at(a.clk)
		if r.u8()%2 == 1 { // refused after sizing: ends no pending offer
			arr := r.at(ts)
			note("%d sized at %d", ts, arr)
			v := viewOf(c, false)
			a.perRequest(v, c.RefusedSized(ts, arr), false, ts, ts <= 0 || arr <= 0 || arr > ts)
			break
		}
		note("%d", ts)
		v := viewOf(c, false)
		a.perRequest(v, c.Refused(ts), true, ts, ts <= 0)
	case opFirstToken:
		ts := r.at(a.clk)
		arr := r.at(ts)
		note("%d %d", ts, arr)
		v := viewOf(c, false)
		a.perRequest(v, c.FirstToken(ts, arr), false, ts, arr <= 0 || ts < arr)
	case opCompleted:
		ts := r.at(a.clk)
		arr := r.at(ts)
		ft := r.at(ts)
		if r.u8()%4 == 0 {
			ft = 0 // the first token came at now
		}
		req, out := r.tokens(), r.tokens()
		note("%d %d %d %d %d", ts, arr, ft, req, out)
		v := viewOf(c, false)
		eft := ft
		if eft == 0 {
			eft = ts
		}
		a.perRequest(v, c.Completed(ts, arr, ft, req, out), false, ts, badTok(req, out) || arr <= 0 || eft < arr || ts < eft)
	case opFailed, opExpired:
		ts := r.at(a.clk)
		arr := r.at(ts)
		ft := int64(0)
		if r.u8()%2 == 0 {
			ft = r.at(ts)
		}
		note("%d %d %d", ts, arr, ft)
		v := viewOf(c, false)
		var err error
		if op == opFailed {
			err = c.Failed(ts, arr, ft)
		} else {
			err = c.Expired(ts, arr, ft)
		}
		a.perRequest(v, err, false, ts, arr <= 0 || ts < arr || (ft != 0 && (ft < arr || ft > ts)))
	case opUpsertEngine:
		e := controller.Engine{ID: r.id(), Node: "n", Role: r.role(), State: r.state(), TargetRole: r.role(), Live: r.u8()%4 != 0,
			Model: apiModels[int(r.u8())%len(apiModels)], GPU: apiGPUs[int(r.u8())%len(apiGPUs)]}
		e.KVCapacityTokens = r.tokens()
		e.Resident = r.resident()
		switch r.u8() % 4 {
		case 1:
			e.TP = int(r.u8()%9) - 1
		case 2:
			e.TP = int(int64(r.u64()))
		}
		if r.u8()%4 == 1 {
			e.LastMoveNs = r.at(a.clk)
		}
		note("%+v", e)
		v := viewOf(c, true)
		if err := c.UpsertEngine(e); err != nil {
			if !errors.Is(err, controller.ErrInvalidEngine) {
				a.fatalf("upsert refused with %q, not ErrInvalidEngine", err)
			}
			a.unchanged(v, fmt.Sprintf("upsert refused (%v)", err))
			return
		}
		if !c.Roles().Known(e.ID) {
			a.fatalf("engine %q upserted but unknown to the role table", e.ID)
		}
	case opRemoveEngine:
		id := r.id()
		note("%q", id)
		v := viewOf(c, true)
		known := c.Roles().Known(id)
		err := c.RemoveEngine(id)
		switch {
		case err != nil && known:
			a.fatalf("remove of known engine %q refused: %v", id, err)
		case err != nil:
			if !errors.Is(err, core.ErrUnknownEngine) {
				a.fatalf("remove of unknown %q: %v does not wrap ErrUnknownEngine", id, err)
			}
			a.unchanged(v, "remove refused")
		case !known:
			a.fatalf("remove of unknown engine %q accepted", id)
		case c.Roles().Known(id):
			a.fatalf("engine %q removed but still in the role table", id)
		}
	case opUpdateEngine:
		id, ts, res, kv, live := r.id(), r.at(a.clk), r.resident(), r.tokens(), r.u8()%4 != 0
		note("%q %d %+v %d %v", id, ts, res, kv, live)
		v := viewOf(c, true)
		known := c.Roles().Known(id)
		if err := c.UpdateEngine(id, ts, res, kv, live); err != nil {
			if !errors.Is(err, controller.ErrInvalidEngine) && !errors.Is(err, core.ErrUnknownEngine) {
				a.fatalf("update refused with %q, neither ErrInvalidEngine nor ErrUnknownEngine", err)
			}
			a.unchanged(v, fmt.Sprintf("update refused (%v)", err))
			return
		} else if !known {
			a.fatalf("update of unknown engine %q accepted", id)
		}
		i := slices.IndexFunc(c.Engines(), func(e controller.Engine) bool { return e.ID == id })
		if e := c.Engines()[i]; e.Live != live || e.KVCapacityTokens != kv || e.Resident != res {
			a.fatalf("update of %q accepted but the row reads %+v", id, e)
		}
	case opObserveLatency:
		id, ts, li := r.id(), r.at(a.clk), r.latency()
		note("%q %d %+v", id, ts, li)
		v := viewOf(c, true)
		if err := c.ObserveLatency(id, ts, li); err != nil {
			if !errors.Is(err, controller.ErrInvalidLatency) && !errors.Is(err, controller.ErrInvalidEngine) {
				a.fatalf("observe latency refused with %q, neither ErrInvalidLatency nor ErrInvalidEngine", err)
			}
			a.unchanged(v, fmt.Sprintf("observe latency refused (%v)", err))
		}
	case opMoveDone:
		k := r.u8()
		id := apiIDs[int(k)%len(apiIDs)]
		if k >= 8 && len(a.act.held) > 0 { // a move in flight
			id = a.act.held[int(k)%len(a.act.held)].EngineID
		}
		ts := r.at(a.clk)
		var err error
		if r.u8()%3 == 1 {
			err = errors.New("fuzz: move failed")
		}
		note("%q %d %v", id, ts, err)
		v := viewOf(c, true)
		i := slices.IndexFunc(v.engines, func(e controller.Engine) bool { return e.ID == id })
		c.MoveDone(id, ts, err)
		if i < 0 || v.engines[i].State == controller.StateServing {
			// Not moving: MoveDone changes nothing.
			a.unchanged(v, fmt.Sprintf("move done for %q, not moving", id))
			return
		}
		old := v.engines[i]
		now := c.Engines()[slices.IndexFunc(c.Engines(), func(e controller.Engine) bool { return e.ID == id })]
		want := old.Role
		if err == nil && old.TargetRole != controller.RoleNone {
			want = old.TargetRole
		}
		if now.State != controller.StateServing || now.Role != want || now.TargetRole != controller.RoleNone {
			a.fatalf("move done (err %v) for %+v left %+v", err, old, now)
		}
	default:
		a.controlCall(r, op, note)
	}
}

// controlCall: the controller loop's, the actuator's and the operator's
// call kinds (call holds the router's and the agents').
func (a *apiRun) controlCall(r *apiReader, op int, note func(string, ...any)) {
	t := a.t
	t.Helper()
	c := a.c
	switch op {
	case opStep:
		var at int64
		switch r.u8() % 8 {
		case 1:
			at = a.lastStep // the same time twice (0 before the first step)
			if at == 0 {
				at = a.clk
			}
		case 2:
			at = a.clk - int64(r.u8())*1e8
		case 3:
			at = r.at(a.clk)
		default:
			at = a.clk
		}
		note("%d", at)
		engines := c.Engines()
		if at <= 0 {
			// Documented: refused, a hold with sequence 0, nothing changed.
			v := viewOf(c, true)
			if d := c.Step(at); d.Seq != 0 || d.Reason != controller.ReasonStepTime || len(d.Moves) != 0 {
				a.fatalf("step at %d not refused: %+v", at, d)
			}
			a.unchanged(v, "step refused")
			return
		}
		d := c.Step(at)
		a.lastStep = at
		a.trace[len(a.trace)-1] += fmt.Sprintf(" -> seq %d %s %s %s %v", d.Seq, d.Basis, d.Action, d.Blocked, d.Moves)
		if d.Seq <= a.prevSeq || d.AtNs != at {
			a.fatalf("step at %d: decision seq %d at %d after seq %d", at, d.Seq, d.AtNs, a.prevSeq)
		}
		a.prevSeq = d.Seq
		if !slices.Contains(controller.Bases, d.Basis) {
			a.fatalf("decision basis %q not in Bases", d.Basis)
		}
		switch d.Action {
		case controller.ActionHold, controller.ActionBlocked:
			if len(d.Moves) != 0 {
				a.fatalf("%s decision with moves %+v", d.Action, d.Moves)
			}
		case controller.ActionMove:
			if len(d.Moves) == 0 || len(d.Moves) > a.cfg.Controller.MaxMovesPerStep {
				a.fatalf("move decision with %d moves", len(d.Moves))
			}
		default:
			a.fatalf("decision action %q", d.Action)
		}
		seen := map[string]bool{}
		for _, m := range d.Moves {
			i := slices.IndexFunc(engines, func(e controller.Engine) bool { return e.ID == m.EngineID })
			if i < 0 || seen[m.EngineID] || m.From == m.To || m.From != engines[i].Role ||
				(m.To != controller.RolePrefill && m.To != controller.RoleDecode) || m.AtNs != at || m.DecisionSeq != d.Seq {
				a.fatalf("bad move %+v of decision %d (engines %+v)", m, d.Seq, engines)
			}
			seen[m.EngineID] = true
			if a.act.mode == 0 && c.Roles().RoleOf(m.EngineID) != controller.RoleNone {
				a.fatalf("engine %s moving (held by the actuator) still takes %s work", m.EngineID, c.Roles().RoleOf(m.EngineID))
			}
		}
		if s := d.Snapshot; s.Engines < 0 || s.PrefillEngines < 0 || s.DecodeEngines < 0 || s.InTransition < 0 || s.PendingUnsized < 0 ||
			s.Engines > apiValidIDs || s.PrefillEngines+s.DecodeEngines > s.Engines {
			a.fatalf("decision snapshot counts %+v", s)
		}
		if exp := c.PendingExpired(); exp >= a.prevExp {
			a.pending -= int64(exp - a.prevExp)
		}
	case opClock:
		switch r.u8() % 8 {
		case 0, 1, 2:
			a.clk += int64(r.u8()) * 1e8 // forward up to 25.5 s
		case 3:
			a.clk += int64(r.u16()) * 1e9 // forward up to 18 h
		case 4:
			a.clk -= int64(r.u8()) * 1e8 // back up to 25.5 s
		case 5:
			a.clk -= int64(r.u16()) * 1e9 // back up to 18 h
		case 6:
			a.clk = r.at(a.clk) // anywhere, hostile values included
		default:
			a.clk += int64(a.cfg.StepS * 1e9)
		}
		note("%d", a.clk)
	case opActuator:
		a.act.mode = r.u8() % 3
		note("%d", a.act.mode)
	case opRead:
		at := r.at(a.clk)
		since, limit := r.u64()%32, int(int8(r.u8()))
		if r.u8()%8 == 0 {
			since = r.u64()
		}
		note("%d %d %d", at, since, limit)
		v := viewOf(c, true)
		st := c.State(at)
		if st.Roles == nil || len(st.Engines) > apiValidIDs {
			a.fatalf("state at %d: roles %v, %d engines", at, st.Roles, len(st.Engines))
		}
		at2 := st.Attainment
		if !(at2.CoveredS >= 0) || math.IsInf(at2.CoveredS, 0) {
			a.fatalf("state at %d: attainment covered_s %v", at, at2.CoveredS)
		}
		for o, n := range at2.ByOutcome {
			if n.Total < 0 || n.TTFTMet < 0 || n.TPOTMet < 0 || n.TTFTMet > n.Total || n.TPOTMet > n.Total {
				a.fatalf("state at %d: attainment %s counts %+v", at, o, n)
			}
		}
		if _, err := json.Marshal(st); err != nil {
			a.fatalf("state at %d does not marshal: %v", at, err)
		}
		ring := a.cfg.Controller.JournalRing
		ds := c.Decisions(since, limit)
		if len(ds) > ring || (limit > 0 && len(ds) > limit) {
			a.fatalf("decisions(%d, %d): %d records (ring %d)", since, limit, len(ds), ring)
		}
		for i, d := range ds {
			if d.Seq <= since || (i > 0 && d.Seq <= ds[i-1].Seq) {
				a.fatalf("decisions(%d, %d): seqs out of order or not past since: %d", since, limit, d.Seq)
			}
		}
		nd := c.NewestDecisions(limit)
		if len(nd) > ring || (limit > 0 && len(nd) > limit) {
			a.fatalf("newest decisions(%d): %d records (ring %d)", limit, len(nd), ring)
		}
		if len(c.Unprofiled()) > apiValidIDs {
			a.fatalf("unprofiled %v", c.Unprofiled())
		}
		a.unchanged(v, "reads only")
	case opRestore:
		st := c.Controller().State()
		mut := r.u8() % 14
		switch mut {
		case 1:
			st.Version = 2
		case 2:
			st.Seq = 1<<53 + 1
		case 3:
			if len(st.Engines) > 0 {
				st.Engines[0].Role = r.role()
			}
		case 4:
			if len(st.Engines) > 0 {
				st.Engines[len(st.Engines)-1].LastMoveNs = r.at(a.clk)
			}
		case 5:
			if len(st.Engines) > 0 {
				st.Engines = append(st.Engines, st.Engines[0])
			}
		case 6:
			st.Engines = append(st.Engines, controller.PersistedEngine{ID: r.id(), Role: r.role(), LastMoveNs: r.at(a.clk)})
		case 7:
			for i := range st.Engines {
				st.Engines[i].Role = 3 - st.Engines[i].Role
			}
		case 8:
			st.LastMoveNs = r.at(a.clk)
		case 9:
			st.Confirm = controller.PersistedConfirm{Dir: int(int8(r.u8())), Count: int(int8(r.u8())), Seq: r.u64() % 64}
		case 10:
			st.Seq = 0
		case 11:
			st.Engines = nil
		case 12:
			st.LastMoveDir = int(int8(r.u8()))
		case 13:
			// A risk event: the only way in is through saved state.
			var risks []map[string]any
			b, _ := json.Marshal(st)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			risks = append(risks, map[string]any{"at_ns": r.at(a.clk), "kind": "decode_pressure"})
			m["risks"] = risks
			b, _ = json.Marshal(m)
			st = controller.PersistedState{}
			_ = json.Unmarshal(b, &st)
		}
		note("mutation %d: %+v", mut, st)
		v := viewOf(c, true)
		if err := c.Controller().Restore(st); err != nil {
			if mut == 0 {
				a.fatalf("restore of the core's own state refused: %v", err)
			}
			if !errors.Is(err, controller.ErrInvalidState) && !errors.Is(err, controller.ErrInvalidConfig) {
				a.fatalf("restore refused with %q, neither ErrInvalidState nor ErrInvalidConfig", err)
			}
			a.unchanged(v, fmt.Sprintf("restore refused (%v)", err))
			return
		}
		if mut == 1 || mut == 2 {
			a.fatalf("restore accepted a state its documented checks refuse (mutation %d)", mut)
		}
		if st.Seq > a.prevSeq {
			a.prevSeq = st.Seq
		}
	case opRestart:
		note("")
		saved := c.Controller().State()
		b, err := json.Marshal(saved)
		if err != nil {
			a.fatalf("saved state does not marshal: %v", err)
		}
		var st controller.PersistedState
		if err := json.Unmarshal(b, &st); err != nil {
			a.fatalf("saved state does not read back: %v (%s)", err, b)
		}
		if err := st.Validate(0); err != nil {
			a.fatalf("a restart refuses the saved state: %v (%s)", err, b)
		}
		engines := c.Engines()
		c.Close()
		a.c = a.newCore()
		c = a.c
		if err := c.Controller().Restore(st); err != nil {
			a.fatalf("a restart refuses the saved state: %v (%s)", err, b)
		}
		// The agents register their engines again, with the role they
		// last saw; the saved role wins.
		for _, e := range engines {
			e.State, e.TargetRole = controller.StateServing, controller.RoleNone
			if err := c.UpsertEngine(e); err != nil {
				a.fatalf("re-registering %+v after a restart: %v", e, err)
			}
		}
		for _, e := range c.Engines() {
			i := slices.IndexFunc(saved.Engines, func(p controller.PersistedEngine) bool { return p.ID == e.ID })
			if i < 0 || saved.Engines[i].Role != e.Role {
				a.fatalf("after a restart engine %s is %s, saved %+v", e.ID, e.Role, saved.Engines)
			}
		}
	case opScrape:
		note("")
		v := viewOf(c, true)
		if a.reg == nil {
			a.reg = prometheus.NewRegistry()
			for _, col := range c.Collectors() {
				if err := a.reg.Register(col); err != nil {
					a.fatalf("register collector: %v", err)
				}
			}
		}
		mfs, err := a.reg.Gather()
		if err != nil {
			a.fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var x float64
				switch {
				case m.GetCounter() != nil:
					x = m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					x = m.GetGauge().GetValue()
					if strings.Contains(mf.GetName(), "pressure") || strings.Contains(mf.GetName(), "correction") {
						continue // ratios, not counts
					}
				default:
					continue
				}
				if math.IsNaN(x) || x < 0 {
					a.fatalf("metric %s %v = %v", mf.GetName(), m.GetLabel(), x)
				}
			}
		}
		a.unchanged(v, "a scrape")
	case opSink:
		a.sink.fail = r.u8()%2 == 1
		note("fail %v", a.sink.fail)
	case opSetClock:
		note("%v", a.hasClock)
		if !a.hasClock {
			a.hasClock = true
			c.SetClock(func() int64 { return a.clk })
		}
	}
}

// check asserts the invariants that hold after every call.
func (a *apiRun) check(ran bool) {
	a.t.Helper()
	c := a.c
	if len(a.act.bad) > 0 {
		a.fatalf("%s", strings.Join(a.act.bad, "\n"))
	}
	if a.act.started > 4*apiMaxOps*a.cfg.Controller.MaxMovesPerStep {
		a.fatalf("%d moves handed to the actuator", a.act.started)
	}
	rt := c.Roles()
	if rt == nil {
		a.fatalf("no role table")
	}
	if rt.Version < a.prevVer {
		a.fatalf("role table version went back: %d -> %d", a.prevVer, rt.Version)
	}
	a.prevVer = rt.Version
	// A table's Replaced channel is closed once, and only once, a newer
	// one is published.
	select {
	case <-rt.Replaced():
		a.fatalf("the current role table (version %d) reads as replaced", rt.Version)
	default:
	}
	if a.prevTable != nil && a.prevTable != rt {
		select {
		case <-a.prevTable.Replaced():
		default:
			a.fatalf("role table version %d was replaced by %d but its Replaced channel is open", a.prevTable.Version, rt.Version)
		}
	}
	a.prevTable = rt
	for _, l := range [][]string{rt.Prefill, rt.Decode} {
		for i := 1; i < len(l); i++ {
			if l[i] <= l[i-1] {
				a.fatalf("role list not sorted or repeats an engine: %v", l)
			}
		}
	}
	engines := c.Engines()
	if len(engines) > apiValidIDs {
		a.fatalf("%d engines, only %d ids exist", len(engines), apiValidIDs)
	}
	byID := make(map[string]controller.Engine, len(engines))
	for _, e := range engines {
		if _, dup := byID[e.ID]; dup {
			a.fatalf("engine %s twice in the table", e.ID)
		}
		byID[e.ID] = e
		if !rt.Known(e.ID) {
			a.fatalf("engine %s in the table but unknown to the role table", e.ID)
		}
		if e.Role != controller.RolePrefill && e.Role != controller.RoleDecode {
			a.fatalf("engine %s holds role %s", e.ID, e.Role)
		}
		if e.KVCapacityTokens < 0 || e.Resident.DecodeSeqs < 0 || e.Resident.KVTokens < 0 ||
			!(e.Resident.QueuedPrefillS >= 0) || !(e.Resident.RunningPrefillS >= 0) {
			a.fatalf("engine %s has negative or NaN figures: %+v", e.ID, e)
		}
		want := controller.RoleNone
		if e.Live && e.State == controller.StateServing {
			want = e.Role
		}
		if rt.RoleOf(e.ID) != want {
			a.fatalf("engine %+v takes %s work, want %s", e, rt.RoleOf(e.ID), want)
		}
	}
	for _, id := range apiIDs {
		if _, ok := byID[id]; !ok && (rt.Known(id) || rt.RoleOf(id) != controller.RoleNone) {
			a.fatalf("role table knows %q, which the engine table does not hold", id)
		}
	}
	for _, p := range rt.Prefill {
		if slices.Contains(rt.Decode, p) {
			a.fatalf("engine %s listed in both roles", p)
		}
		if e, ok := byID[p]; !ok || e.Role != controller.RolePrefill {
			a.fatalf("prefill lists %s: %+v", p, e)
		}
	}
	for _, d := range rt.Decode {
		if e, ok := byID[d]; !ok || e.Role != controller.RoleDecode {
			a.fatalf("decode lists %s: %+v", d, e)
		}
	}
	dh := c.Demand().Snapshot()
	for _, k := range []buckets.KindStats{dh.Arrivals, dh.Residency, dh.Outputs} {
		if k.Observations < 0 || k.OverflowObservations < 0 || k.OverflowObservations > k.Observations ||
			k.RetainedCells < 0 || k.RetainedCells > k.CellLimit {
			a.fatalf("demand history counts %+v", dh)
		}
	}
	if dh.Unsized.Observations < 0 || dh.Unsized.Pending != a.pending {
		a.fatalf("unsized %+v, pending offers by the calls made %d", dh.Unsized, a.pending)
	}
	tot := c.Attainment().Totals().Read()
	for o := range tot {
		n, p := tot[o], a.prevTotals[o]
		if n.Finished < p.Finished || n.TTFTMet < p.TTFTMet || n.TPOTMet < p.TPOTMet || n.BothMet < p.BothMet ||
			n.TTFTMet > n.Finished || n.TPOTMet > n.Finished || n.BothMet > min(n.TTFTMet, n.TPOTMet) {
			a.fatalf("totals of %s went back or are inconsistent: %+v -> %+v", buckets.Outcome(o), p, n)
		}
	}
	a.prevTotals = tot
	if ah, ex := c.AheadRefused(), c.PendingExpired(); ah < a.prevAhead || ex < a.prevExp {
		a.fatalf("counters went back: ahead %d -> %d, expired %d -> %d", a.prevAhead, ah, a.prevExp, ex)
	} else {
		a.prevAhead, a.prevExp = ah, ex
	}
	if c.ClockBehindNs() < 0 {
		a.fatalf("clock behind %d ns", c.ClockBehindNs())
	}
	if ring := a.cfg.Controller.JournalRing; len(c.NewestDecisions(0)) > ring {
		a.fatalf("%d decisions retained, ring %d", len(c.NewestDecisions(0)), ring)
	}
	if !ran {
		return
	}
	st := c.Controller().State()
	if err := st.Validate(0); err != nil {
		a.fatalf("the saved state is one a restart refuses: %v\n%+v", err, st)
	}
	if len(st.Engines) > apiValidIDs || len(st.Risks) > 64 || len(st.Calibrations) > 2*apiValidIDs {
		a.fatalf("saved state grew: %d engines, %d risks, %d calibrations", len(st.Engines), len(st.Risks), len(st.Calibrations))
	}
}
