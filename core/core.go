package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/profile"
)

// Errors callers act on (compare with errors.Is).
var (
	ErrUnknownEngine = controller.ErrUnknownEngine
	ErrInvalidInput  = errors.New("invalid input")
	// ErrAheadOfClock (wrapped with ErrInvalidInput): evidence stamped
	// further ahead of the core's clock than future_tolerance_s. It is
	// not recorded, and counted in narwhal_core_evidence_ahead_refused_total.
	ErrAheadOfClock = errors.New("timestamp ahead of the core's clock")
)

// Pre-built errors keep the per-request calls allocation-free even when
// they refuse input.
var (
	errTokens      = fmt.Errorf("%w: token counts must be in [0, %d]", ErrInvalidInput, buckets.MaxTokens)
	errTime        = fmt.Errorf("%w: timestamps must be > 0 and ordered (arrival <= first token <= now)", ErrInvalidInput)
	errTooOld      = fmt.Errorf("%w: timestamp outside the retained history", ErrInvalidInput)
	errEngine      = fmt.Errorf("admitted: %w", ErrUnknownEngine)
	errEngineEmpty = fmt.Errorf("%w: engine id is empty", ErrInvalidInput)
)

// Option configures New.
type Option func(*options)

type options struct {
	actuator  controller.Actuator
	sink      controller.Sink
	stateFile string
	profiles  *controller.ProfileSet
	logger    *slog.Logger
	history   []controller.Decision
	arrivals  controller.HistoryReader
	outputs   controller.HistoryReader
	noPrior   bool
	noCalib   bool
	clock     func() int64
}

// WithActuator sets who carries moves out (default: the journal-only dry
// run, which completes every move at once in the role table).
func WithActuator(a controller.Actuator) Option { return func(o *options) { o.actuator = a } }

// WithJournalSink sets the journal sink, e.g. controller.NewJSONLinesSink.
// Close closes it.
func WithJournalSink(s controller.Sink) Option { return func(o *options) { o.sink = s } }

// WithStateFile saves the controller state atomically to path after every
// decision and restores it in New.
func WithStateFile(path string) Option { return func(o *options) { o.stateFile = path } }

// WithProfiles sets the latency profiles (default: the built-in ones).
func WithProfiles(p *controller.ProfileSet) Option { return func(o *options) { o.profiles = p } }

// WithoutPrior stops the core from pricing an engine whose (model, GPU,
// TP) the profiles lack with the geometry prior (package profile); such
// an engine is then scored on observed pressure only
// (controller.BasisUnprofiled).
func WithoutPrior() Option { return func(o *options) { o.noPrior = true } }

// WithCalibration switches online calibration of the profiles from the
// engines' latency intervals (ObserveLatency) on (default) or off.
func WithCalibration(on bool) Option { return func(o *options) { o.noCalib = !on } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithJournalHistory seeds the in-memory journal with earlier decisions
// (e.g. controller.LoadJournal of the journal file) so that sequence
// numbers and Decisions continue across a restart.
func WithJournalHistory(ds []controller.Decision) Option {
	return func(o *options) { o.history = ds }
}

// WithClock sets the core's clock (Unix ns): evidence stamped more than
// future_tolerance_s after it is refused (ErrAheadOfClock). Default: none
// until Run, which uses the wall clock; without a clock the bound is the
// latest Step's time plus one step (the next step's due time). The clock is
// read only when a timestamp passes the last reading plus the tolerance.
func WithClock(now func() int64) Option { return func(o *options) { o.clock = now } }

// WithDemandReaders makes the controller step on other arrivals and
// outputs histories than the core's own (e.g. the Kubernetes leader's
// merged demand of every router). Both must be set; the core keeps
// recording its own demand (Demand, State, Collectors), and everything
// else a step reads (pending unsized offers, observed pressure, engines)
// stays local.
func WithDemandReaders(arrivals, outputs controller.HistoryReader) Option {
	return func(o *options) { o.arrivals, o.outputs = arrivals, outputs }
}

// Core is the embeddable Narwhal core: demand and attainment history fed
// by a router's request lifecycle, the engine table fed by agents, and the
// controller that moves engines between roles. Safe for concurrent use.
type Core struct {
	cfg      Config
	demand   *buckets.Demand
	arrivals *buckets.History
	resid    *buckets.History
	outputs  *buckets.History
	att      *buckets.Attainment
	prefillP *buckets.Pressure
	decodeP  *buckets.Pressure
	ctrl     *controller.Controller
	log      *slog.Logger
	// stepArrivals and stepOutputs are what Step reads: the own
	// histories, or WithDemandReaders's.
	stepArrivals, stepOutputs controller.HistoryReader
	sink                      controller.Sink

	stepNs, windowNs, shortNs int64
	ttftNs, tpotNs            float64

	stepMu    sync.Mutex
	stateFile string
	closeOnce sync.Once

	// The core's clock (see the package documentation, Time): clock is
	// the function given by WithClock or SetClock (nil: none; Run
	// installs the wall clock), lastStepNs the latest Step's time.
	// okUntil is the latest timestamp known to be within the tolerance,
	// the fast path of ahead; aheadRefused counts refusals.
	clock        atomic.Pointer[func() int64]
	lastStepNs   atomic.Int64
	okUntil      atomic.Int64
	aheadRefused atomic.Uint64
	behindNs     atomic.Int64 // noteClock
	tolNs        int64
	errAhead     error

	// Pending offers time out after pendingTimeoutNs: marks holds, per
	// Step, how many offers had been started by then (see expirePending).
	pendingTimeoutNs int64
	marks            []pendingMark
	pendingExpired   atomic.Uint64
}

// pendingMark: by the step at atNs, started offers had been started;
// minPending is the fewest offers pending at that step and every step
// since (less those expired since).
type pendingMark struct {
	atNs       int64
	started    uint32
	minPending int64
}

// maxPendingMarks bounds the marks kept (steps more frequent than
// step_s keep the oldest marks, which only delays expiry).
const maxPendingMarks = 4096

// New builds a core. With WithStateFile, saved controller state is
// restored (a missing file is a fresh start).
func New(cfg Config, opts ...Option) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if (o.arrivals == nil) != (o.outputs == nil) {
		return nil, fmt.Errorf("%w: WithDemandReaders needs both an arrivals and an outputs reader", ErrInvalidConfig)
	}
	c := &Core{cfg: cfg, log: o.logger, sink: o.sink, stateFile: o.stateFile,
		stepNs: secNs(cfg.StepS), windowNs: secNs(cfg.DemandWindowS), shortNs: secNs(cfg.MinEvidenceSpanS),
		ttftNs: cfg.TTFTSLOS * 1e9, tpotNs: cfg.TPOTSLOS * 1e9}
	width := buckets.BucketWidth(c.stepNs, c.shortNs)
	c.tolNs = cfg.futureToleranceNs()
	c.errAhead = fmt.Errorf("%w: %w by more than future_tolerance_s (%v s); nothing was recorded", ErrInvalidInput, ErrAheadOfClock, float64(c.tolNs)/1e9)
	c.pendingTimeoutNs = secNs(cfg.PendingTimeoutS)
	c.okUntil.Store(math.MaxInt64)
	if o.clock != nil {
		c.SetClock(o.clock)
	}
	var err error
	if c.demand, err = buckets.NewDemand(buckets.DemandConfig{BucketWidthNs: width, DemandWindowNs: c.windowNs}); err != nil {
		return nil, fmt.Errorf("core: demand history: %w", err)
	}
	c.arrivals = c.demand.History(buckets.KindArrivals)
	c.resid = c.demand.History(buckets.KindResidency)
	c.outputs = c.demand.History(buckets.KindOutputs)
	c.stepArrivals, c.stepOutputs = c.arrivals, c.outputs
	if o.arrivals != nil {
		c.stepArrivals, c.stepOutputs = o.arrivals, o.outputs
	}
	if c.att, err = buckets.NewAttainment(secNs(cfg.MonitorIntervalS), 4*c.windowNs); err != nil {
		return nil, fmt.Errorf("core: attainment: %w", err)
	}
	if c.prefillP, err = buckets.NewPressure(width, c.windowNs); err != nil {
		return nil, fmt.Errorf("core: prefill pressure: %w", err)
	}
	if c.decodeP, err = buckets.NewPressure(width, c.windowNs); err != nil {
		return nil, fmt.Errorf("core: decode pressure: %w", err)
	}
	copts := []controller.Option{controller.WithLogger(o.logger)}
	if o.actuator != nil {
		copts = append(copts, controller.WithActuator(o.actuator))
	}
	if o.sink != nil {
		copts = append(copts, controller.WithSink(o.sink))
	}
	if o.history != nil {
		copts = append(copts, controller.WithHistory(o.history))
	}
	if !o.noPrior {
		copts = append(copts, controller.WithResolver(profile.Resolve))
	}
	copts = append(copts, controller.WithCalibration(!o.noCalib))
	tm := controller.Timing{StepNs: c.stepNs, ShortNs: c.shortNs, LongNs: c.windowNs, TTFTSLOS: cfg.TTFTSLOS, TPOTSLOS: cfg.TPOTSLOS}
	if c.ctrl, err = controller.New(cfg.Controller, tm, o.profiles, copts...); err != nil {
		return nil, fmt.Errorf("core: controller: %w", err)
	}
	if c.stateFile != "" {
		st, err := controller.LoadState(c.stateFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("core: %w", err)
		default:
			if err := c.ctrl.Restore(st); err != nil {
				return nil, fmt.Errorf("core: restore %s: %w", c.stateFile, err)
			}
		}
	}
	return c, nil
}

// Config returns the configuration the core runs with.
func (c *Core) Config() Config { return c.cfg }

// Demand returns the core's own demand histories (arrivals, residency,
// outputs), e.g. for an exporter that ships them to a leader. Safe for
// concurrent use with the request calls.
func (c *Core) Demand() *buckets.Demand { return c.demand }

// Attainment returns the core's own SLO attainment history.
func (c *Core) Attainment() *buckets.Attainment { return c.att }

// Controller returns the controller (for tools and tests).
func (c *Core) Controller() *controller.Controller { return c.ctrl }

func badTokens(xs ...int64) bool {
	for _, x := range xs {
		if x < 0 || x > buckets.MaxTokens {
			return true
		}
	}
	return false
}

// OfferStarted: a request body is being read (demand_history.unsized.pending).
// It stays pending until OfferSized (accepted or refused), OfferAbandoned,
// Refused, or pending_timeout_s later (see the package documentation).
func (c *Core) OfferStarted(nowNs int64) { c.demand.OfferStarted() }

// OfferAbandoned: an offer ended before it was sized. It ends a pending
// offer and records an unsized observation at nowNs; a refused timestamp
// still ends the pending offer but records nothing.
func (c *Core) OfferAbandoned(nowNs int64) error {
	c.demand.EndPending()
	if nowNs <= 0 {
		return errTime
	}
	if c.ahead(nowNs) {
		return c.errAhead
	}
	if !c.demand.Arrivals.RecordUnsized(nowNs) {
		return errTooOld
	}
	return nil
}

// OfferSized records a parsed offer at its arrival time with a local input
// estimate (e.g. body bytes / 4) and its requested output tokens. It ends a
// pending offer even when it refuses the values (the body has been read;
// the refused values are not recorded).
func (c *Core) OfferSized(arrivalNs, estInput, reqOutput int64) error {
	c.demand.EndPending()
	if badTokens(estInput, reqOutput) {
		return errTokens
	}
	if arrivalNs <= 0 {
		return errTime
	}
	if c.ahead(arrivalNs) {
		return c.errAhead
	}
	if !c.demand.Arrivals.Record(arrivalNs, buckets.Shape{Input: estInput, Output: reqOutput}) {
		return errTooOld
	}
	return nil
}

// Tokenized reprices an offer at its original arrival time from the local
// estimate to the exact input. A bucket that is gone is ignored.
func (c *Core) Tokenized(arrivalNs, estInput, exactInput, reqOutput int64) error {
	if badTokens(estInput, exactInput, reqOutput) {
		return errTokens
	}
	if arrivalNs <= 0 {
		return errTime
	}
	if estInput != exactInput {
		c.arrivals.Reprice(arrivalNs, buckets.Shape{Input: estInput, Output: reqOutput}, buckets.Shape{Input: exactInput, Output: reqOutput})
	}
	return nil
}

// Admitted records work placed on an engine (residency history).
func (c *Core) Admitted(nowNs int64, engineID string, input, reqOutput int64) error {
	if badTokens(input, reqOutput) {
		return errTokens
	}
	if nowNs <= 0 {
		return errTime
	}
	if engineID == "" {
		return errEngineEmpty
	}
	if !c.ctrl.Roles().Known(engineID) {
		return errEngine
	}
	if c.ahead(nowNs) {
		return c.errAhead
	}
	if !c.resid.Record(nowNs, buckets.Shape{Input: input, Output: reqOutput}) {
		return errTooOld
	}
	return nil
}

// Refused records a predictive refusal (attainment outcome refused) of a
// request refused before it was sized: it is no longer being read, so it
// ends a pending offer. After OfferSized, use RefusedSized.
func (c *Core) Refused(nowNs int64) error {
	c.demand.EndPending()
	if nowNs <= 0 {
		return errTime
	}
	return c.recordRefused(nowNs)
}

// RefusedSized records a predictive refusal of a request already sized:
// its OfferSized (arrival arrivalNs) ended its pending offer, so this one
// ends none. A refusal decided from the request's size comes after it is
// sized; Refused would end a second, unrelated pending offer and read
// demand as more complete than it is.
func (c *Core) RefusedSized(nowNs, arrivalNs int64) error {
	if nowNs <= 0 || arrivalNs <= 0 || arrivalNs > nowNs {
		return errTime
	}
	return c.recordRefused(nowNs)
}

// recordRefused records the refused outcome at nowNs (> 0).
func (c *Core) recordRefused(nowNs int64) error {
	if c.ahead(nowNs) {
		return c.errAhead
	}
	if !c.att.Record(nowNs, buckets.OutcomeRefused, false, false) {
		return errTooOld
	}
	return nil
}

// FirstToken records an observed TTFT: observed prefill pressure is TTFT
// / TTFT SLO.
func (c *Core) FirstToken(nowNs, arrivalNs int64) error {
	if arrivalNs <= 0 || nowNs < arrivalNs {
		return errTime
	}
	if c.ahead(nowNs) {
		return c.errAhead
	}
	if !c.prefillP.Record(nowNs, float64(nowNs-arrivalNs)/c.ttftNs) {
		return errTooOld
	}
	return nil
}

// Completed records a finished request: attainment (TTFT and TPOT met),
// the outputs history (requested vs actual output tokens) and observed
// decode pressure TPOT / TPOT SLO, where TPOT = (now − first token) /
// (output tokens − 1). firstTokenNs 0 means the first token came at now.
func (c *Core) Completed(nowNs, arrivalNs, firstTokenNs, reqOutput, outputTokens int64) error {
	if badTokens(reqOutput, outputTokens) {
		return errTokens
	}
	if firstTokenNs == 0 {
		firstTokenNs = nowNs
	}
	if arrivalNs <= 0 || firstTokenNs < arrivalNs || nowNs < firstTokenNs {
		return errTime
	}
	if c.ahead(nowNs) {
		return c.errAhead
	}
	ttftMet := float64(firstTokenNs-arrivalNs) <= c.ttftNs
	tpotMet := true
	var ratio float64
	if outputTokens > 1 {
		ratio = float64(nowNs-firstTokenNs) / float64(outputTokens-1) / c.tpotNs
		tpotMet = ratio <= 1
	}
	if !c.att.Record(nowNs, buckets.OutcomeCompleted, ttftMet, tpotMet) {
		return errTooOld
	}
	c.outputs.Record(nowNs, buckets.Shape{Input: reqOutput, Output: outputTokens})
	if outputTokens > 1 {
		c.decodeP.Record(nowNs, ratio)
	}
	return nil
}

func (c *Core) ended(o buckets.Outcome, nowNs, arrivalNs, firstTokenNs int64) error {
	if arrivalNs <= 0 || nowNs < arrivalNs || (firstTokenNs != 0 && (firstTokenNs < arrivalNs || firstTokenNs > nowNs)) {
		return errTime
	}
	if c.ahead(nowNs) {
		return c.errAhead
	}
	ttftMet := firstTokenNs != 0 && float64(firstTokenNs-arrivalNs) <= c.ttftNs
	if !c.att.Record(nowNs, o, ttftMet, false) {
		return errTooOld
	}
	return nil
}

// Failed records a request that failed (firstTokenNs 0 when none came).
func (c *Core) Failed(nowNs, arrivalNs, firstTokenNs int64) error {
	return c.ended(buckets.OutcomeFailed, nowNs, arrivalNs, firstTokenNs)
}

// Expired records a request that ran past its deadline (its client's
// included). One that got no first token and waited longer than the TTFT
// SLO is also a prefill observation of at least its wait: observed
// prefill pressure records (now − arrival) / TTFT SLO for it, so that
// requests whose clients gave up still count where the queue was
// (otherwise only the requests that were served would).
func (c *Core) Expired(nowNs, arrivalNs, firstTokenNs int64) error {
	if err := c.ended(buckets.OutcomeExpired, nowNs, arrivalNs, firstTokenNs); err != nil {
		return err
	}
	if firstTokenNs == 0 && float64(nowNs-arrivalNs) > c.ttftNs {
		c.prefillP.Record(nowNs, float64(nowNs-arrivalNs)/c.ttftNs)
	}
	return nil
}

// UpsertEngine adds or replaces an engine.
func (c *Core) UpsertEngine(e controller.Engine) error { return c.ctrl.UpsertEngine(e) }

// RemoveEngine drops an engine.
func (c *Core) RemoveEngine(id string) error { return c.ctrl.RemoveEngine(id) }

// UpdateEngine records an engine's residency, KV capacity and liveness.
func (c *Core) UpdateEngine(id string, nowNs int64, res controller.Resident, kvCapacityTokens int64, live bool) error {
	return c.ctrl.UpdateEngine(id, nowNs, res, kvCapacityTokens, live)
}

// ObserveLatency learns one engine's latency interval (the agent's
// wire.EngineReport.Latency) into the profile that prices the engine.
func (c *Core) ObserveLatency(engineID string, nowNs int64, li controller.LatencyInterval) error {
	return c.ctrl.ObserveLatency(engineID, nowNs, li)
}

// Unprofiled names "model on GPU" of every engine without a latency
// profile (moved on observed pressure only), sorted.
func (c *Core) Unprofiled() []string { return c.ctrl.Unprofiled() }

// MoveDone completes a move started through the actuator.
func (c *Core) MoveDone(engineID string, nowNs int64, err error) {
	c.ctrl.MoveDone(engineID, nowNs, err)
}

// Engines returns the engine table sorted by id.
func (c *Core) Engines() []controller.Engine { return c.ctrl.Engines() }

// Roles returns the current role table: a lock-free atomic load, 0
// allocations. Its Replaced channel closes when the next table is
// published, so a router can wait for a move instead of polling.
func (c *Core) Roles() *controller.RoleTable { return c.ctrl.Roles() }

// inputs reads the live histories for one step.
func (c *Core) inputs(nowNs int64) controller.Inputs {
	from := nowNs - c.shortNs
	p, d := c.prefillP.Window(from, nowNs), c.decodeP.Window(from, nowNs)
	return controller.Inputs{
		Arrivals:        c.stepArrivals,
		Outputs:         c.stepOutputs,
		PendingUnsized:  c.demand.Pending(),
		ObservedPrefill: controller.PhaseObservation{Count: p.Count, Over: p.Over, Mean: p.Mean, Max: p.Max},
		ObservedDecode:  controller.PhaseObservation{Count: d.Count, Over: d.Over, Mean: d.Mean, Max: d.Max},
	}
}

// Step runs one controller step at nowNs (virtual or real time) and, with
// a state file, saves the controller state. It expires pending offers
// older than pending_timeout_s and never expires history: buckets expire
// only as newer evidence is recorded, and the step reads windows that end
// at nowNs.
//
// A time that is not a Unix time (nowNs <= 0) is refused and changes
// nothing: see controller.Step (a hold with sequence 0 and Reason
// controller.ReasonStepTime).
func (c *Core) Step(nowNs int64) controller.Decision {
	c.stepMu.Lock()
	defer c.stepMu.Unlock()
	if nowNs <= 0 {
		return c.ctrl.Step(nowNs, controller.Inputs{})
	}
	c.lastStepNs.Store(nowNs)
	c.noteClock(nowNs)
	if c.clock.Load() == nil {
		c.okUntil.Store(sat(nowNs, c.stepNs+c.tolNs))
	}
	c.expirePending(nowNs)
	d := c.ctrl.Step(nowNs, c.inputs(nowNs))
	c.saveState()
	return d
}

// noteClock keeps how far the newest recorded arrivals bucket lies after
// nowNs, and logs when that first passes the demand window (see Stuck).
// Caller holds stepMu.
func (c *Core) noteClock(nowNs int64) {
	var behind int64
	if n, ok := c.demand.Arrivals.NewestNs(); ok && n > nowNs {
		behind = n - nowNs
	}
	prev := c.behindNs.Swap(behind)
	switch {
	case c.stuck(behind) && !c.stuck(prev):
		c.log.Error("the clock is behind the recorded demand history by more than the demand window (it stepped back): every record is refused until it catches up; restart the core to record again (roles and move times are kept in its state)",
			"behind_s", float64(behind)/1e9, "demand_window_s", float64(c.windowNs)/1e9)
	case !c.stuck(behind) && c.stuck(prev):
		c.log.Info("the clock has caught up with the recorded demand history", "behind_s", float64(behind)/1e9)
	}
}

// expirePending ends the offers pending since a step at least
// pending_timeout_s before nowNs and records them as unsized observations
// at nowNs (an offer whose body read outlives the service's read timeout
// is gone). Caller holds stepMu.
func (c *Core) expirePending(nowNs int64) {
	cut := nowNs - c.pendingTimeoutNs
	pending := c.demand.Pending()
	k := -1 // the newest mark at or before the cut
	for i := range c.marks {
		c.marks[i].minPending = min(c.marks[i].minPending, pending)
		if c.marks[i].atNs <= cut {
			k = i
		}
	}
	if k >= 0 {
		// An offer pending at every step of a whole timeout is gone, even
		// when ends of newer offers were matched to it.
		if n := c.demand.ExpirePending(c.marks[k].started, c.marks[k].minPending, nowNs); n > 0 {
			c.pendingExpired.Add(uint64(n))
			for i := range c.marks {
				c.marks[i].minPending = max(0, c.marks[i].minPending-n)
			}
		}
		c.marks = append(c.marks[:0], c.marks[k:]...)
	}
	if n := len(c.marks); (n == 0 || c.marks[n-1].atNs < nowNs) && n < maxPendingMarks {
		c.marks = append(c.marks, pendingMark{atNs: nowNs, started: c.demand.Started(), minPending: c.demand.Pending()})
	}
}

// SetClock sets the core's clock (see WithClock); safe while records run.
func (c *Core) SetClock(now func() int64) {
	if now == nil {
		return
	}
	c.clock.Store(&now)
	c.okUntil.Store(math.MinInt64) // read the new clock on the next record
}

// ahead reports (and counts) a timestamp beyond the core's clock plus
// future_tolerance_s. The fast path is one load and a compare.
func (c *Core) ahead(tsNs int64) bool {
	if tsNs <= c.okUntil.Load() {
		return false
	}
	return c.aheadSlow(tsNs)
}

func (c *Core) aheadSlow(tsNs int64) bool {
	lim := int64(math.MaxInt64)
	if f := c.clock.Load(); f != nil {
		lim = sat((*f)(), c.tolNs)
		for {
			o := c.okUntil.Load()
			if o >= lim || c.okUntil.CompareAndSwap(o, lim) {
				break
			}
		}
	} else if s := c.lastStepNs.Load(); s != 0 {
		lim = sat(s, c.stepNs+c.tolNs)
	}
	if tsNs <= lim {
		return false
	}
	c.aheadRefused.Add(1)
	return true
}

// sat is a+b saturating at MaxInt64 (b >= 0).
func sat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (c *Core) saveState() {
	if c.stateFile == "" {
		return
	}
	if err := controller.SaveState(c.stateFile, c.ctrl.State()); err != nil {
		c.log.Error("core: save state", "err", err)
	}
}

// Run calls Step every StepS on the wall clock until ctx ends; it is the
// only place in the core that reads the wall clock.
func (c *Core) Run(ctx context.Context) error {
	wall := func() int64 { return time.Now().UnixNano() }
	if c.clock.CompareAndSwap(nil, &wall) {
		c.okUntil.Store(math.MinInt64)
	}
	t := time.NewTicker(time.Duration(c.stepNs))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			c.Step(now.UnixNano())
		}
	}
}

// Decisions returns up to limit journal records with Seq > sinceSeq.
func (c *Core) Decisions(sinceSeq uint64, limit int) []controller.Decision {
	return c.ctrl.Decisions(sinceSeq, limit)
}

// Collectors returns the Prometheus collectors (read at scrape time): the
// demand history (narwhal_demand_history_*), the controller
// (narwhal_controller_*, narwhal_engines), SLO attainment over the
// retained window and the monotonic narwhal_requests_*_total counters.
func (c *Core) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		buckets.NewCollector(c.demand),
		&coreCollector{c},
		c.ctrl.Collector(),
		c.ctrl.ProfileCollector(),
		buckets.NewAttainmentCollector(c.att, c.latestNs),
		buckets.NewTotalsCollector(c.att.Totals()),
	}
}

// latestNs is "now" for scrape-time attainment: the last step's time (the
// core never reads the wall clock outside Run).
func (c *Core) latestNs() int64 {
	if d, ok := c.ctrl.Latest(); ok {
		return d.AtNs
	}
	return 0
}

// Close saves the state and flushes and closes the journal sink.
func (c *Core) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.stepMu.Lock()
		defer c.stepMu.Unlock()
		if c.stateFile != "" {
			if e := controller.SaveState(c.stateFile, c.ctrl.State()); e != nil {
				err = fmt.Errorf("core close: %w", e)
			}
		}
		if c.sink != nil {
			if e := c.sink.Close(); e != nil {
				err = errors.Join(err, fmt.Errorf("core close: %w", e))
			}
		}
	})
	return err
}
