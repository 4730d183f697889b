package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/narwhal-io/narwhal/core/buckets"
)

// Errors callers act on.
var (
	ErrUnknownEngine = errors.New("unknown engine")
	ErrInvalidEngine = errors.New("invalid engine")
)

// Option configures a Controller.
type Option func(*Controller)

// WithActuator sets the actuator (default: DryRun, journal only).
func WithActuator(a Actuator) Option { return func(c *Controller) { c.actuator = a } }

// WithSink sets the journal sink (default: none; the ring always keeps
// recent decisions).
func WithSink(s Sink) Option { return func(c *Controller) { c.sink = s } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Controller) { c.log = l } }

// WithHistory seeds the journal ring with earlier decisions (e.g. from
// LoadJournal); sequence numbers continue after the last.
func WithHistory(ds []Decision) Option {
	return func(c *Controller) { c.history = ds }
}

type riskEvent struct {
	AtNs int64  `json:"at_ns"`
	Kind string `json:"kind"`
}

const riskCap = 64

// Controller decides, step by step, which role every engine holds. All
// methods are safe for concurrent use; Roles is lock-free.
type Controller struct {
	mu       sync.Mutex
	cfg      Config
	tm       Timing
	profiles *ProfileSet
	log      *slog.Logger
	actuator Actuator
	sink     Sink
	history  []Decision

	engines []Engine
	profIdx []int // per engine: profile index or -1
	// modelKey per engine: its model, normalized (the profile's name
	// when one resolved, so aliases agree); "" when unknown.
	modelKey []string
	busy     []busyAcc
	index    map[string]int
	restored map[string]PersistedEngine
	// restoredUntilNs: when the restored entries no engine has claimed
	// are dropped (set at the first step after a Restore; see
	// expireRestored).
	restoredUntilNs int64

	table   atomic.Pointer[RoleTable]
	version uint64

	seq          uint64
	lastMoveNs   int64
	lastMoveDir  int
	starveDir    int
	starveSince  int64
	confirmDir   int
	confirmCount int
	confirmSeq   uint64
	risks        []riskEvent // ring, riskCap

	// starveShare: by starveIndex(direction of a move), the share of
	// recent steps (exponential, time constant starvation_s) on which the
	// move's destination measured short and its source spare (the
	// starvation rule's per-step test); starveShareAt: its last update.
	starveShare   [2]float64
	starveShareAt int64
	// kvHist: resident decode KV at each step (ring).
	kvHist [kvHistCap]kvSample
	kvN    int
	// qHist: the prefill queue ratio at each step (ring; recordQueue).
	qHist [qHistCap]qSample
	qN    int

	snap     Snapshot
	cellBuf  []buckets.Cell
	builds   uint64
	journal  journalRing
	latest   Decision
	hasLast  bool
	lastEv   *DemandEvidence
	lastEvAt uint64
	pendMove []Move
	// held: moves of decisions whose journal record the sink has not
	// written yet (Step); their engines stay draining until a later
	// write succeeds.
	held []Move
	// sinkErr: the last sink write error logged ("" after a success), so
	// that a failing disk is logged once per change of error, not per
	// step.
	sinkErr string
	// badStep: the latest step was refused for its time (logged once).
	badStep bool
	memory  moveMemory

	decisions [5]atomic.Uint64 // by basis (index in Bases)
	moves     atomic.Uint64
	// memoryHolds: decisions move memory held.
	memoryHolds atomic.Uint64
	blocked     [9]atomic.Uint64 // by gate (index in Gates)
	lastPref    atomic.Uint64    // float64 bits, current prefill pressure
	lastDec     atomic.Uint64

	// Profiles beyond the set (calibrate.go): online calibration per
	// profile index, the resolver for missing (model, GPU, TP) and what
	// it could not resolve.
	calib      map[int]*calibState
	calibWait  map[string]PersistedCalibration // restored, for profiles not yet resolved
	noCalib    bool
	resolve    Resolver
	resolved   int
	unresolved map[string]bool

	// Measured switch time (the rollout's): per moving engine, when its
	// move began and the drain the snapshot predicted for it; the mean of
	// the last switchKeep measured switches (done − start − drain).
	moveStart map[string]moveStart
	switches  [switchKeep]float64
	switchN   int
}

// moveStart is a move in flight, as its decision saw it.
type moveStart struct {
	atNs   int64
	drainS float64
}

// switchKeep: completed moves whose switch times the rollout averages.
const switchKeep = 8

// switchS is the switch time the rollout assumes: the mean of the last
// measured switches, else the switch_s setting. Caller holds mu.
func (c *Controller) switchS() float64 {
	n := min(c.switchN, switchKeep)
	if n == 0 {
		return c.cfg.SwitchS
	}
	sum := 0.0
	for i := 0; i < n; i++ {
		sum += c.switches[i]
	}
	return sum / float64(n)
}

// New returns a controller with no engines.
func New(cfg Config, tm Timing, profiles *ProfileSet, opts ...Option) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := tm.validate(); err != nil {
		return nil, err
	}
	if profiles == nil {
		profiles = BuiltinProfiles()
	}
	if len(profiles.Profiles) == 0 || profiles.Default < 0 || profiles.Default >= len(profiles.Profiles) {
		return nil, fmt.Errorf("%w: profile set needs a valid default profile", ErrInvalidProfile)
	}
	// A private copy: resolved and calibrated profiles change it.
	own := *profiles
	own.Profiles = slices.Clone(profiles.Profiles)
	c := &Controller{cfg: cfg, tm: tm, profiles: &own, index: map[string]int{}, restored: map[string]PersistedEngine{}}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.actuator == nil {
		c.actuator = DryRun{C: c}
	}
	c.journal.buf = make([]Decision, cfg.JournalRing)
	for _, d := range c.history {
		c.journal.add(d)
		c.seq = max(c.seq, d.Seq)
		c.latest, c.hasLast = d, true
	}
	c.history = nil
	c.publish()
	return c, nil
}

// Config returns the controller's configuration.
func (c *Controller) Config() Config { return c.cfg }

// Roles returns the current role table (lock-free, 0 allocations).
func (c *Controller) Roles() *RoleTable { return c.table.Load() }

// EstimateBuilds counts output-estimate builds (one per step).
func (c *Controller) EstimateBuilds() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds
}

// publish rebuilds and swaps the role table. Caller holds mu (or is New).
func (c *Controller) publish() {
	c.version++
	t := &RoleTable{Version: c.version, Prefill: []string{}, Decode: []string{}, known: make(map[string]Role, len(c.engines)),
		replaced: make(chan struct{})}
	for i := range c.engines {
		e := &c.engines[i]
		r := RoleNone
		if e.Live && e.State == StateServing {
			r = e.Role
		}
		t.known[e.ID] = r
		switch r {
		case RolePrefill:
			t.Prefill = append(t.Prefill, e.ID)
		case RoleDecode:
			t.Decode = append(t.Decode, e.ID)
		}
	}
	slices.Sort(t.Prefill)
	slices.Sort(t.Decode)
	// The new table first, then the old one's channel: a watcher woken by
	// the close reads the new table. Only publish stores tables, so every
	// old one has its channel.
	if old := c.table.Swap(t); old != nil {
		close(old.replaced)
	}
}

func validResident(r Resident) bool {
	ok := func(x float64) bool { return finite(x) && x >= 0 }
	return ok(r.QueuedPrefillS) && ok(r.RunningPrefillS) && r.DecodeSeqs >= 0 && r.KVTokens >= 0
}

// UpsertEngine adds an engine or replaces its row. An engine added with
// RoleNone gets the role saved for it in restored state, else the role
// with fewer engines (prefill on a tie). A known engine keeps its
// controller-side move state (state, target role) unless e carries one,
// except that a known engine registered in another role while its move is
// held (Step: its journal record not yet written) loses that move and
// serves in the role e names.
func (c *Controller) UpsertEngine(e Engine) error {
	if err := validEngine(e); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.upsertLocked(e)
	c.publish()
	return nil
}

// UpsertEngines upserts several engines as UpsertEngine does, under one
// lock and with one role-table rebuild (registering n engines costs one
// rebuild, not n). An invalid engine refuses the whole call and changes
// nothing.
func (c *Controller) UpsertEngines(es []Engine) error {
	for _, e := range es {
		if err := validEngine(e); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range es {
		c.upsertLocked(e)
	}
	c.publish()
	return nil
}

// maxEngineText bounds an engine's node, model and GPU names (the wire
// format bounds only the body): the engine table keeps them, every
// decision's profiles and unprofiled lists repeat them, and /metrics and
// /readyz show them. A Kubernetes node name is at most 253 bytes.
const maxEngineText = 256

func validEngine(e Engine) error {
	if e.ID == "" || len(e.ID) > 253 {
		return fmt.Errorf("%w: id must be 1..253 bytes, got %q", ErrInvalidEngine, e.ID)
	}
	if len(e.Node) > maxEngineText || len(e.Model) > maxEngineText || len(e.GPU) > maxEngineText {
		return fmt.Errorf("%w: engine %s: node, model and gpu must be at most %d bytes, got %d, %d, %d",
			ErrInvalidEngine, e.ID, maxEngineText, len(e.Node), len(e.Model), len(e.GPU))
	}
	if e.KVCapacityTokens < 0 || !validResident(e.Resident) || e.Role > RoleDecode || e.State > StateSwitching || e.TargetRole > RoleDecode {
		return fmt.Errorf("%w: engine %s: negative or non-finite residency or capacity, or bad role/state", ErrInvalidEngine, e.ID)
	}
	// A negative last move would be saved as is, and the saved state
	// refused by every restart (PersistedState.Validate).
	if e.LastMoveNs < 0 {
		return fmt.Errorf("%w: engine %s: last_move_ns must be >= 0 (0: never), got %d", ErrInvalidEngine, e.ID, e.LastMoveNs)
	}
	return nil
}

// upsertLocked adds or replaces e. Caller holds mu and publishes.
func (c *Controller) upsertLocked(e Engine) {
	pi := c.lookupEngine(&e)
	if i, ok := c.index[e.ID]; ok {
		old := &c.engines[i]
		if e.Role == RoleNone {
			e.Role = old.Role
		}
		oldState, oldTarget := old.State, old.TargetRole
		if e.Role != old.Role && oldState != StateServing && c.dropHeld(e.ID) {
			// The engine is registered in another role while its move
			// waits for its journal record: the caller's role stands and
			// the move, never handed to the actuator, is void (handing it
			// over later would start a move from a role the engine no
			// longer holds).
			c.log.Warn("held move dropped: the engine was registered in another role",
				"engine", e.ID, "role", e.Role.String(), "was", old.Role.String())
			delete(c.moveStart, e.ID)
			oldState, oldTarget = StateServing, RoleNone
		}
		if e.State == StateServing && oldState != StateServing {
			e.State, e.TargetRole = oldState, oldTarget
		}
		e.LastMoveNs = max(e.LastMoveNs, old.LastMoveNs)
		c.engines[i], c.profIdx[i], c.modelKey[i] = e, pi, c.modelKeyOf(&e, pi)
	} else {
		if r, ok := c.restored[e.ID]; ok {
			// Saved state wins over the role a caller registers the
			// engine with (a configured or agent-reported role is only an
			// initial role), exactly as Restore treats engines it already
			// knows: otherwise a restart would undo the controller's moves.
			e.Role = r.Role
			e.LastMoveNs = max(e.LastMoveNs, r.LastMoveNs)
			delete(c.restored, e.ID)
		}
		if e.Role == RoleNone {
			np, nd := 0, 0
			for i := range c.engines {
				switch c.engines[i].Role {
				case RolePrefill:
					np++
				case RoleDecode:
					nd++
				}
			}
			e.Role = RolePrefill
			if nd < np {
				e.Role = RoleDecode
			}
		}
		c.index[e.ID] = len(c.engines)
		c.engines = append(c.engines, e)
		c.profIdx = append(c.profIdx, pi)
		c.modelKey = append(c.modelKey, c.modelKeyOf(&e, pi))
		c.busy = append(c.busy, busyAcc{})
	}
}

// RemoveEngine drops an engine.
func (c *Controller) RemoveEngine(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[id]
	if !ok {
		return fmt.Errorf("remove %q: %w", id, ErrUnknownEngine)
	}
	last := len(c.engines) - 1
	c.engines[i], c.profIdx[i], c.busy[i], c.modelKey[i] = c.engines[last], c.profIdx[last], c.busy[last], c.modelKey[last]
	c.index[c.engines[i].ID] = i
	c.engines, c.profIdx, c.busy, c.modelKey = c.engines[:last], c.profIdx[:last], c.busy[:last], c.modelKey[:last]
	delete(c.index, id)
	delete(c.moveStart, id)
	c.publish()
	return nil
}

// UpdateEngine records an engine's residency, KV capacity and liveness.
// The role table is republished only when liveness changes.
func (c *Controller) UpdateEngine(id string, nowNs int64, res Resident, kvCapacityTokens int64, live bool) error {
	if !validResident(res) || kvCapacityTokens < 0 {
		return fmt.Errorf("%w: engine %s: negative or non-finite residency or capacity", ErrInvalidEngine, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[id]
	if !ok {
		return fmt.Errorf("update %q: %w", id, ErrUnknownEngine)
	}
	e := &c.engines[i]
	e.Resident, e.KVCapacityTokens = res, kvCapacityTokens
	if e.Live != live {
		e.Live = live
		c.publish()
	}
	return nil
}

// Engines returns a copy of the engine table, sorted by id.
func (c *Controller) Engines() []Engine {
	c.mu.Lock()
	out := slices.Clone(c.engines)
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Engine) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// MoveDone completes a move: with err == nil the engine takes its target
// role, otherwise it returns to its old role. Either way it serves again.
func (c *Controller) MoveDone(engineID string, nowNs int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[engineID]
	if !ok {
		c.log.Warn("move done for unknown engine", "engine", engineID)
		return
	}
	e := &c.engines[i]
	if e.State == StateServing {
		return
	}
	if ms, ok := c.moveStart[engineID]; ok {
		delete(c.moveStart, engineID)
		if err == nil && nowNs > ms.atNs {
			c.switches[c.switchN%switchKeep] = max(0, min(3600, float64(nowNs-ms.atNs)/1e9-ms.drainS))
			c.switchN++
		}
	}
	if err == nil && e.TargetRole != RoleNone {
		e.Role = e.TargetRole
		e.LastMoveNs = max(e.LastMoveNs, nowNs)
	} else if err != nil {
		c.log.Warn("move failed", "engine", engineID, "err", err)
	}
	e.State, e.TargetRole = StateServing, RoleNone
	c.publish()
}

// Snapshot freezes the inputs as a step would and returns a copy that is
// independent of the controller and its live inputs. It counts as an
// output-estimate build.
func (c *Controller) Snapshot(nowNs int64, in Inputs) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.freeze(nowNs, in)
	return c.snap.clone()
}

// freeze fills c.snap with values. Caller holds mu.
func (c *Controller) freeze(nowNs int64, in Inputs) {
	s := &c.snap
	s.AtNs, s.Timing, s.Config = nowNs, c.tm, c.cfg
	s.SwitchS = c.switchS()
	s.Profiles = append(s.Profiles[:0], c.profiles.Profiles...)
	s.Engines = s.Engines[:0]
	for i := range c.engines {
		e := &c.engines[i]
		v := EngineView{ID: e.ID, Role: e.Role, TargetRole: e.TargetRole, State: e.State, Live: e.Live, KVCapacityTokens: e.KVCapacityTokens,
			Resident: e.Resident, LastMoveNs: e.LastMoveNs, Profile: c.profIdx[i], HasProfile: c.profIdx[i] >= 0}
		if !v.HasProfile {
			v.Profile = c.profiles.Default
		}
		s.Engines = append(s.Engines, v)
	}
	// Output estimates: built once, used by both horizons. The discount
	// is learned from the completions of the last demand window. Overflow
	// anywhere in the retained outputs history keeps learning off until
	// those observations expire (they expire only as newer completions are
	// recorded), whatever the controller saw before: a new leader, a
	// stopped loop and a restart read the same history and agree.
	var w buckets.Window
	c.cellBuf = c.cellBuf[:0]
	overflowRetained := false
	if in.Outputs != nil {
		overflowRetained = retainedOverflow(in.Outputs, &c.cellBuf)
		c.cellBuf, w = in.Outputs.Window(nowNs-c.tm.LongNs, nowNs, c.cellBuf[:0])
	}
	s.Out = buildOutputEstimate(c.cellBuf, w, overflowRetained, c.cfg.DefaultOutputTokens)
	c.builds++
	s.EstimateBuild = c.builds
	// Arrivals: the short horizon, then the rest of the long one (the
	// long horizon is their union: each bucket read once).
	// Requests that can meet the TTFT SLO at all on the reference profile.
	s.refProfile = c.profiles.Default
	for i := range s.Engines {
		if s.Engines[i].Role == RolePrefill && s.Engines[i].HasProfile {
			s.refProfile = s.Engines[i].Profile
			break
		}
	}
	m := moments{feasibleMax: feasibleMaxInput(&s.Profiles[s.refProfile], c.tm.TTFTSLOS)}
	shortFrom, longFrom := nowNs-c.tm.ShortNs, nowNs-c.tm.LongNs
	if in.Arrivals != nil {
		c.cellBuf, w = in.Arrivals.Window(shortFrom, nowNs, c.cellBuf[:0])
		if w.Buckets > 0 && w.FromNs < shortFrom {
			shortFrom = w.FromNs
		}
		m.addWindow(c.cellBuf, w, &s.Out)
	}
	m.fill(&s.Short, shortFrom, nowNs)
	if in.Arrivals != nil && longFrom < shortFrom {
		c.cellBuf, w = in.Arrivals.Window(longFrom, shortFrom-1, c.cellBuf[:0])
		if w.Buckets > 0 && w.FromNs < longFrom {
			longFrom = w.FromNs
		}
		m.addWindow(c.cellBuf, w, &s.Out)
	}
	m.fill(&s.Long, min(longFrom, shortFrom), nowNs)
	s.ObservedPrefill, s.ObservedDecode, s.PendingUnsized = in.ObservedPrefill, in.ObservedDecode, in.PendingUnsized
	s.prefillWork = c.measuredPrefillWork()
	// Consolidation evidence: arrivals wholly after the latest risk.
	s.riskNow = in.ObservedDecode.past(1, c.cfg)
	s.EvidenceCutoffNs = c.riskCutoff(nowNs, s.riskNow)
	s.Evidence = buckets.Evidence{}
	if in.Arrivals != nil && s.EvidenceCutoffNs < nowNs {
		s.Evidence = in.Arrivals.Evidence(s.EvidenceCutoffNs, nowNs)
	}
	// Decode corrections at the current residency of the decode engines:
	// observed TPOT over the modelled step (DecodeCorrection), and the
	// observed over the modelled per-sequence part of the step
	// (DecodeLoadCorrection, once the engines hold min_load_seqs each).
	s.DecodeCorrection, s.DecodeLoadCorrection = 1, 1
	if in.ObservedDecode.past(0, c.cfg) {
		var sum, sumA, seqs float64
		var n int
		for i := range s.Engines {
			e := &s.Engines[i]
			if e.serving() && e.Role == RoleDecode && e.Resident.DecodeSeqs > 0 {
				p := &s.Profiles[e.Profile]
				if p.HasDecode {
					sum += p.Decode.StepSeconds(float64(e.Resident.DecodeSeqs), float64(e.Resident.KVTokens))
					sumA += p.Decode.A
					seqs += float64(e.Resident.DecodeSeqs)
					n++
				}
			}
		}
		obs := in.ObservedDecode.Mean * c.tm.TPOTSLOS
		if n > 0 && sum > 0 {
			s.DecodeCorrection = max(0.5, min(2, obs/(sum/float64(n))))
		}
		if n > 0 && seqs/float64(n) >= minLoadSeqs && sum > sumA {
			s.DecodeLoadCorrection = max(0.5, min(2, (obs-sumA/float64(n))/((sum-sumA)/float64(n))))
			s.DecodeCorrection = 1
		}
	}
	s.prepare()
}

// kvSample is the decode pool's resident KV at one step.
type kvSample struct {
	atNs int64
	kv   float64
}

// The resident-KV history: a sample per step, at least kvSlopeNs/8 apart
// (recordKV; the newest is always this step's); the growth rate is taken
// over the last kvSlopeNs; a projected exhaustion counts only when the
// projected growth is at least kvLeadGrowth of the limit (a pool filling
// up at the onset of a decode-heavy mix, not one running near its
// capacity in steady state, as long-context traffic does).
const (
	kvHistCap    = 16
	kvSlopeNs    = int64(5e9)
	kvLeadGrowth = 0.5
)

// recordKV keeps this step's resident decode KV as the newest sample. The
// samples before the newest are kept at least kvSlopeNs/8 apart (the
// newest replaces its predecessor until it is that far from the one
// before), so that the ring spans more than kvSlopeNs whatever the step.
func (c *Controller) recordKV(nowNs int64, kv float64) {
	smp := kvSample{atNs: nowNs, kv: kv}
	if c.kvN >= 2 && nowNs-c.kvHist[(c.kvN-2)%kvHistCap].atNs < kvSlopeNs/8 {
		c.kvHist[(c.kvN-1)%kvHistCap] = smp
		return
	}
	c.kvHist[c.kvN%kvHistCap] = smp
	c.kvN++
}

// kvExhaustsWithin reports whether resident decode KV, growing at its
// rate over the last kvSlopeNs, reaches limit within leadNs while growing
// by at least kvLeadGrowth of limit.
func (c *Controller) kvExhaustsWithin(nowNs int64, limit float64, leadNs int64) bool {
	if c.kvN < 2 || limit <= 0 {
		return false
	}
	cur := c.kvHist[(c.kvN-1)%kvHistCap]
	for i := 2; i <= min(c.kvN, kvHistCap); i++ {
		old := c.kvHist[(c.kvN-i)%kvHistCap]
		if old.atNs > nowNs-kvSlopeNs {
			continue
		}
		if cur.kv <= old.kv {
			return false
		}
		grow := (cur.kv - old.kv) / float64(cur.atNs-old.atNs) * float64(leadNs)
		return cur.kv+grow >= limit && grow >= kvLeadGrowth*limit
	}
	return false // no sample kvSlopeNs old yet
}

// past: at least min_observations latencies were observed and their mean
// ratio to the SLO exceeds limit.
func (o PhaseObservation) past(limit float64, cfg Config) bool {
	return o.Count >= cfg.MinObservations && o.Mean > limit
}

// kvPastTarget: the decode pool's resident KV is past target_pressure of
// its capacity (cur is the current split; unknown capacity never is).
func (s *Snapshot) kvPastTarget(cur SplitScore, cfg Config) bool {
	return cur.KVCapacityTokens > 0 && s.ResidentDecodeKV > cfg.TargetPressure*cur.KVCapacityTokens
}

// prefillMeasuredShort: a measurement says the prefill pool is short of
// its target: a queue past the TTFT SLO, or observed TTFT past
// target_pressure of it.
func (s *Snapshot) prefillMeasuredShort(cfg Config) bool {
	return s.prefillBehind || s.ObservedPrefill.past(cfg.TargetPressure, cfg)
}

// tailMargin: the share of first tokens past the TTFT SLO, over the
// share of requests no prefill pool can serve in time, that is a
// measured TTFT tail (prefillTail).
const tailMargin = 0.1

// prefillTail: of min_observations first tokens or more in the short
// window, a share past the TTFT SLO that exceeds the infeasible share (1
// − the short horizon's feasible share: prompts whose own prefill
// exceeds the SLO) by tailMargin. The mean can be within target while a
// burst's queue puts a tenth of the first tokens past the SLO (Azure
// code at 14:2: 14–18 % missed at a mean of 0.52–0.58).
func (s *Snapshot) prefillTail(cfg Config) bool {
	o := s.ObservedPrefill
	return o.Count >= cfg.MinObservations && o.MissShare() > 1-s.Short.FeasibleShare+tailMargin
}

// kvWithin: split sc's decode KV need is within limit of its capacity
// (unknown capacity never is).
func (s *Snapshot) kvWithin(sc SplitScore, limit float64) bool {
	return sc.KVCapacityTokens > 0 && sc.KVNeedTokens <= limit*sc.KVCapacityTokens
}

// decodeMeasuredShort: a measurement says the decode pool is short of its
// target: observed TPOT past target_pressure of the SLO, resident KV past
// target_pressure of the capacity, or resident KV projected to run out.
func (s *Snapshot) decodeMeasuredShort(cur SplitScore, kvSoon bool, cfg Config) bool {
	return kvSoon || s.ObservedDecode.past(cfg.TargetPressure, cfg) || s.kvPastTarget(cur, cfg)
}

// measuredPrefill is the prefill pool's measured pressure: observed
// TTFT over its SLO, or the queued prefill (not the running prompts,
// which more engines do not speed up) over engines × TTFT SLO, whichever
// is larger.
func (s *Snapshot) measuredPrefill() float64 {
	m := s.ObservedPrefill.Mean
	if s.PrefillEngines > 0 {
		m = max(m, s.queueShort)
	}
	return m
}

// overflowPriced: a horizon's demand holds an overflow cohort, which the
// reference page prices at its largest shape.
func (s *Snapshot) overflowPriced() bool { return s.Short.Overflow > 0 || s.Long.Overflow > 0 }

// measuredWithin: the pool of the phase (prefill or decode) has
// min_observations latencies and a measured pressure at most limit;
// decode also with its resident KV within target and not projected to
// run out.
func (s *Snapshot) measuredWithin(prefill bool, limit float64, cur SplitScore, kvSoon bool, cfg Config) bool {
	if prefill {
		return s.PrefillEngines > 0 && s.ObservedPrefill.Count >= cfg.MinObservations && s.measuredPrefill() <= limit
	}
	return s.DecodeEngines > 0 && s.ObservedDecode.Count >= cfg.MinObservations && !kvSoon && !s.kvPastTarget(cur, cfg) && s.ObservedDecode.Mean <= limit
}

// measuredAt is the phase's measured pressure carried from the current
// split to sc: times the larger of the engine-count ratio and the
// prediction's own change between the two splits. The model's shape
// knows the queueing cliff near saturation that a count ratio misses
// (e24c: prefill measured 0.33 at 4 engines, linear 0.44 at 3, where
// the pool collapses); the measurement sets the level. Decode is at
// least its resident KV over sc's capacity.
func (s *Snapshot) measuredAt(prefill bool, cur, sc SplitScore) float64 {
	carry := func(m float64, n, nAt int, p, pAt float64) float64 {
		f := float64(n) / float64(max(1, nAt))
		if p > 0 {
			f = max(f, pAt/p)
		}
		return m * f
	}
	if prefill {
		return carry(s.measuredPrefill(), s.PrefillEngines, sc.PrefillEngines, cur.PrefillPressure, sc.PrefillPressure)
	}
	m := carry(s.ObservedDecode.Mean, s.DecodeEngines, sc.DecodeEngines, cur.DecodePressure, sc.DecodePressure)
	if sc.KVCapacityTokens > 0 {
		m = max(m, s.ResidentDecodeKV/sc.KVCapacityTokens)
	}
	return m
}

// unmeasuredDeficit is the hold reason for a move toward best whose
// deficit only a prediction it cannot trust shows, with no measurement
// saying the destination is short; "" when the prediction may move an
// engine on its own.
//   - With overflow in the outputs history, decode is priced at the
//     requested outputs and the default for unbounded ones: an upper
//     bound, not an estimate.
//   - A prediction from fewer than prediction_arrivals requests in the
//     short window is a few requests' sizes (Mooncake's prompts reach
//     126k tokens, its contexts 54k in one short window), on either side.
//
// Prefill is measured short by its queue or observed TTFT; decode by
// observed TPOT, resident KV, or its projected exhaustion.
func (s *Snapshot) unmeasuredDeficit(best, cur SplitScore, kvSoon bool, cfg Config) string {
	few := s.Short.Requests < cfg.PredictionArrivals
	switch {
	case best.Moves > 0 && few && !s.prefillMeasuredShort(cfg):
		return "prefill deficit predicted from few arrivals, not measured"
	case best.Moves >= 0 || s.decodeMeasuredShort(cur, kvSoon, cfg):
		return ""
	case s.Out.Reason == OutputsOverflow:
		return "decode deficit predicted from unlearned outputs, not measured"
	case few:
		return "decode deficit predicted from few arrivals, not measured"
	}
	return ""
}

// minLoadSeqs: resident sequences per decode engine needed before the
// per-sequence cost is calibrated from observed TPOT (below it the fixed
// step cost dominates and the estimate is noise).
const minLoadSeqs = 16

// The prefill-queue history: the queued prefill over prefill engines ×
// TTFT SLO at each step, in a ring of qHistCap samples kept at least
// ShortNs/qHistThin apart (a step closer to the newest sample folds into
// it, keeping the smaller reading and the older time), so the ring spans
// the short window at any step period.
const (
	qHistCap  = 32
	qHistThin = 16
)

type qSample struct {
	atNs int64
	q    float64
}

// recordQueue keeps this step's prefill queue ratio and sets s.queueShort
// to its minimum over the short window (the samples at most ShortNs old,
// this step's included).
func (c *Controller) recordQueue(nowNs int64, s *Snapshot) {
	q := 0.0
	if s.PrefillEngines > 0 {
		q = s.QueuedPrefillS / (float64(s.PrefillEngines) * s.Timing.TTFTSLOS)
	}
	if c.qN >= 2 && nowNs-c.qHist[(c.qN-2)%qHistCap].atNs < c.tm.ShortNs/qHistThin {
		last := &c.qHist[(c.qN-1)%qHistCap]
		last.q = min(last.q, q)
	} else {
		c.qHist[c.qN%qHistCap] = qSample{atNs: nowNs, q: q}
		c.qN++
	}
	s.queueShort = q
	from := nowNs - c.tm.ShortNs
	for i := 1; i <= min(c.qN, qHistCap); i++ {
		smp := c.qHist[(c.qN-i)%qHistCap]
		if smp.atNs < from {
			break
		}
		s.queueShort = min(s.queueShort, smp.q)
	}
}

// kvCorrectionMax bounds kv_correction above 1: a decode pool measured
// past target_pressure of its KV capacity holding up to this many times
// the KV the model predicts at the current split.
const kvCorrectionMax = 3.0

// ReasonStepTime is the Reason of the decision Step returns for a time
// that is not a Unix time (nowNs <= 0), which it refuses.
const ReasonStepTime = "step time must be > 0 Unix ns (a broken clock?); nothing was done"

// Step runs one controller step at nowNs: freeze, score, gate, decide,
// journal; a move is handed to the actuator after the lock is released,
// and only once the sink has written its decision's record: when the
// write fails the move is held (its engine stays draining, taking no new
// work) and handed over after the first later write that succeeds, which
// writes the held records first, in order. A held move whose engine is no
// longer moving toward its role by then (removed, registered again, or
// completed by MoveDone) is dropped.
//
// A step at a time that is not a Unix time (nowNs <= 0: a broken clock)
// is refused: it changes nothing (no decision is journaled, no held time
// moves, so the saved state stays one a restart accepts) and returns a
// hold with sequence 0 whose Reason is ReasonStepTime; the first of a run
// of refused steps is logged as an error.
func (c *Controller) Step(nowNs int64, in Inputs) Decision {
	c.mu.Lock()
	if nowNs <= 0 {
		if !c.badStep {
			c.log.Error("controller step refused: "+ReasonStepTime, "at_ns", nowNs)
			c.badStep = true
		}
		c.mu.Unlock()
		return Decision{AtNs: nowNs, Action: ActionHold, Reason: ReasonStepTime}
	}
	c.badStep = false
	// A held move whose engine was removed, re-registered or completed
	// by MoveDone since is no longer its engine's move: it is dropped,
	// not handed over (held stays within one move per moving engine).
	c.held = slices.DeleteFunc(c.held, func(m Move) bool { return !c.inFlight(m) })
	if n := c.clampFuture(nowNs); n > 0 {
		c.log.Warn("times after this step read as its time (the clock stepped back, or the state was saved under a clock ahead)", "at_ns", nowNs, "times", n)
	}
	c.expireRestored(nowNs)
	c.freeze(nowNs, in)
	d := c.decide(nowNs)
	c.journal.add(d)
	c.latest, c.hasLast = d, true
	if d.DemandEvidence != nil {
		c.lastEv, c.lastEvAt = d.DemandEvidence, d.Seq
	}
	var werr error
	if c.sink != nil {
		if werr = c.sink.Write(&d); werr != nil && werr.Error() != c.sinkErr {
			c.log.Error("journal sink", "err", werr)
			c.sinkErr = werr.Error()
		} else if werr == nil {
			c.sinkErr = ""
		}
	}
	moves := c.pendMove[:0]
	if werr != nil {
		// Write-ahead: a move without its record on disk is not carried
		// out (a crash now would replay a journal that lacks it).
		if len(d.Moves) > 0 {
			c.held = append(c.held, d.Moves...)
			c.log.Warn("moves held until their journal record is written", "seq", d.Seq, "held", len(c.held))
		}
	} else {
		moves = append(append(moves, c.held...), d.Moves...)
		c.held = c.held[:0]
	}
	c.pendMove = moves
	c.mu.Unlock()
	for _, m := range moves {
		if err := c.actuator.Start(m); err != nil {
			c.log.Error("actuator start", "engine", m.EngineID, "err", err)
			c.MoveDone(m.EngineID, nowNs, fmt.Errorf("actuator start: %w", err))
		}
	}
	return d
}

// dropHeld removes the held move of engine id, reporting whether there
// was one. Caller holds mu.
func (c *Controller) dropHeld(id string) bool {
	n := len(c.held)
	c.held = slices.DeleteFunc(c.held, func(m Move) bool { return m.EngineID == id })
	return len(c.held) < n
}

// inFlight reports whether m is still its engine's move: the engine is
// in the table and draining or switching toward m.To. Caller holds mu.
func (c *Controller) inFlight(m Move) bool {
	i, ok := c.index[m.EngineID]
	return ok && c.engines[i].State != StateServing && c.engines[i].TargetRole == m.To
}

func (c *Controller) addRisk(nowNs int64, kind string) {
	if n := len(c.risks); n > 0 && c.risks[n-1].AtNs == nowNs && c.risks[n-1].Kind == kind {
		return
	}
	if len(c.risks) == riskCap {
		copy(c.risks, c.risks[1:])
		c.risks = c.risks[:riskCap-1]
	}
	c.risks = append(c.risks, riskEvent{AtNs: nowNs, Kind: kind})
}

// decide evaluates the frozen snapshot. Caller holds mu.
func (c *Controller) decide(nowNs int64) Decision {
	s := &c.snap
	c.seq++
	d := Decision{Seq: c.seq, AtNs: nowNs, Basis: s.Basis, Action: ActionHold}
	d.Snapshot = SnapshotSummary{
		Engines: len(s.Engines), PrefillEngines: s.PrefillEngines, DecodeEngines: s.DecodeEngines,
		InTransition: s.InTransition, PendingUnsized: s.PendingUnsized, Incomplete: s.Incomplete,
		IncompleteReason: s.IncompleteReason, Short: s.Short.rounded(), Long: s.Long.rounded(),
		Outputs: s.Out, DecodeCorrection: roundJ(s.DecodeCorrection), DecodeLoadCorrection: roundJ(s.DecodeLoadCorrection),
		KVCorrection: roundJ(s.KVCorrection), OutputScale: roundJ(s.OutputScale), ObservedPrefill: s.ObservedPrefill.rounded(), ObservedDecode: s.ObservedDecode.rounded(),
		ResidentDecodeKV: roundJ(s.ResidentDecodeKV), PendingOutputTokens: roundJ(s.PendingOutputTokens), EstimateBuild: s.EstimateBuild,
	}
	d.Snapshot.Outputs.Discount, d.Snapshot.Outputs.UnboundedMean = roundJ(s.Out.Discount), roundJ(s.Out.UnboundedMean)
	d.RecoveryPrefillRatio = roundJ(s.RecoveryRatio)
	d.QueuedPrefillS = roundJ(s.QueuedPrefillS)
	if !math.IsNaN(s.prefillWork) {
		w := roundJ(s.prefillWork)
		d.MeasuredPrefillWork = &w
	}
	d.ObservedPrefillRatio = roundJ(s.ObservedPrefill.Mean)
	d.ObservedDecodeRatio = roundJ(s.ObservedDecode.Mean)
	d.ObservedPrefillMissShare = roundJ(s.ObservedPrefill.MissShare())
	d.ObservedDecodeMissShare = roundJ(s.ObservedDecode.MissShare())
	d.Profiles, d.Unprofiled = c.profileUses()
	defer func() {
		for i, b := range Bases {
			if b == d.Basis {
				c.decisions[i].Add(1)
			}
		}
		for i, g := range Gates {
			if g == d.Blocked {
				c.blocked[i].Add(1)
			}
		}
	}()

	c.recordQueue(nowNs, s)
	c.memory.observe(nowNs, c.tm.ShortNs+int64(c.switchS()*1e9), s)
	if s.Basis == BasisNoEngines {
		d.Reason = "no live serving engine"
		c.confirmDir, c.confirmCount = 0, 0
		return d
	}
	best, cur := s.Best()
	c.lastPref.Store(math.Float64bits(cur.PrefillPressure))
	c.lastDec.Store(math.Float64bits(cur.DecodePressure))
	d.Current, d.Best = cur.rounded(), best.rounded()
	improvement := cur.Score - best.Score
	d.Improvement = roundJ(improvement)

	// Risk events for consolidation evidence: decode breaching its SLO.
	if s.riskNow || cur.DecodePressure > 1 {
		c.addRisk(nowNs, "decode_pressure")
		s.EvidenceCutoffNs = nowNs
	}

	c.recordKV(nowNs, s.ResidentDecodeKV)
	kvSoon := best.Moves < 0 && c.cfg.KVLeadS > 0 && c.kvExhaustsWithin(nowNs, cur.KVCapacityTokens*c.cfg.KVHeadroom, int64(c.cfg.KVLeadS*1e9))
	d.KVExhaustion = kvSoon
	unmeasured := s.unmeasuredDeficit(best, cur, kvSoon, c.cfg)
	dir := 0
	switch {
	case best.Moves == 0:
		d.Reason = "current split scores best"
	case max(cur.PrefillPressure, cur.DecodePressure) <= c.cfg.TargetPressure && !kvSoon:
		d.Reason = "both phases within target pressure"
	case unmeasured != "":
		d.Reason = unmeasured
	case !(improvement > c.cfg.margin(s, cur.Score)) && !(s.prefillBehind && best.Moves > 0 && improvement > 0 && !s.byRollout()):
		d.Reason = "improvement within hysteresis margin"
	default:
		dir = 1
		if best.Moves < 0 {
			dir = -1
		}
	}
	// The starvation rule: a phase measured short for starvation_s while
	// the other measures spare gets one engine where the model holds.
	starved := c.starvation(nowNs, s, cur, kvSoon)
	override := false
	if dir == 0 && starved != 0 {
		dir, override = starved, true
	}
	if dir == 0 {
		c.confirmDir, c.confirmCount = 0, 0
		return d
	}
	if dir == c.confirmDir && c.confirmSeq+1 == d.Seq {
		c.confirmCount++
	} else {
		c.confirmDir, c.confirmCount = dir, 1
	}
	c.confirmSeq = d.Seq
	d.Confirmations = c.confirmCount

	// How many engines this decision moves: up to the best split's
	// distance (at most max_moves_per_step), reduced by each gate that
	// allows fewer; a gate fails when it allows none, and later gates are
	// then judged for one engine.
	k := min(abs(best.Moves), c.cfg.MaxMovesPerStep)
	// More than one engine only when measured latencies confirm the
	// destination is past its SLO (not a prediction from a few arrivals).
	// Engines already moving to the destination land after the
	// measurement was taken: it confirms only the deficit they leave, so
	// its latency (and the prefill queue) is rescaled to the pool with
	// them, as scaleObserved rescales an observation for a split. (The
	// current split's KV capacity counts them already.)
	dstObs, nDst, inDst := s.ObservedPrefill, s.PrefillEngines, s.IncomingPrefill
	if dir < 0 {
		dstObs, nDst, inDst = s.ObservedDecode, s.DecodeEngines, s.IncomingDecode
	}
	obsDst := dstObs.Mean
	if nDst > 0 && inDst > 0 {
		obsDst = scaleObserved(obsDst, nDst, nDst+inDst)
	}
	confirmed := dstObs.Count >= c.cfg.MinObservations && obsDst > 1
	// The prefill queue is measured too: first tokens report a backlog
	// only once it is served, long after it formed.
	if dir > 0 && s.prefillBehind {
		confirmed = true
	}
	// A latency or queue measured past the SLO (not KV alone).
	measuredDeficit := confirmed
	// So is decode KV: resident KV measured past the target pressure of
	// the decode pool's capacity. Observed TPOT reports a KV shortage
	// only once sequences have waited for it, and by then the prefill
	// engines that must move cannot drain (their finished prompts wait
	// for the same decode KV).
	if dir < 0 && (kvSoon || s.kvPastTarget(cur, c.cfg)) {
		confirmed = true
	}
	// Move memory (memory.go): the same move starved its source under
	// this demand, unless the destination has since measured short, the
	// source spare, on most recent steps (memoryReleaseShare).
	if c.starveShare[starveIndex(dir)] < memoryReleaseShare && c.memory.holds(nowNs, s, dir, s.PrefillEngines+s.IncomingPrefill+dir) {
		d.Reason = ReasonMoveMemory
		c.memoryHolds.Add(1)
		c.confirmDir, c.confirmCount = 0, 0
		return d
	}
	if !confirmed || override {
		k = 1
	}
	from, to := RoleDecode, RolePrefill
	srcCount, floor := s.DecodeEngines, c.cfg.MinDecodeEngines
	movers := s.dm
	d.Direction = "decode_to_prefill"
	if dir < 0 {
		from, to = RolePrefill, RoleDecode
		srcCount, floor = s.PrefillEngines, c.cfg.MinPrefillEngines
		movers = s.pm
		d.Direction = "prefill_to_decode"
	}
	srcP := func(sc SplitScore) float64 {
		if dir < 0 {
			return sc.PrefillPressure
		}
		return sc.DecodePressure
	}
	// largest returns the largest j in [1, k] with ok(Split(dir·j)),
	// assuming ok is monotone (true up to some j); 0 when none.
	largest := func(ok func(SplitScore) bool) int {
		for j := k; j >= 1; j-- {
			if ok(s.Split(dir * j)) {
				return j
			}
		}
		return 0
	}
	gates := make([]GateResult, 0, len(Gates))
	gate := func(name string, pass bool, value, limit float64, detail string) {
		gates = append(gates, GateResult{Gate: name, Pass: pass, Value: roundJ(value), Limit: roundJ(limit), Detail: detail})
	}
	// narrow applies a gate's allowance: k becomes allowed, or 1 when the
	// gate fails (so later gates are judged alone on one move).
	narrow := func(allowed int) bool {
		if allowed < 1 {
			k = 1
			return false
		}
		k = min(k, allowed)
		return true
	}
	pass := narrow(srcCount - floor)
	gate(GateRoleFloors, pass, float64(srcCount-k), float64(floor), from.String()+" engines after the move")
	// Engines already moving toward the destination do not block a
	// confirmed deficit (they are scored in their target role); any other
	// transition does.
	incomingTo := s.IncomingPrefill
	if dir < 0 {
		incomingTo = s.IncomingDecode
	}
	liveOK := srcCount > 0 && (s.InTransition == 0 || (confirmed && s.InTransition == incomingTo))
	gate(GateLiveAvailability, liveOK, float64(s.InTransition), float64(incomingTo), "engines draining or switching (limit: those moving to "+to.String()+", when the deficit is confirmed)")
	dstP := func(sc SplitScore) float64 {
		if dir < 0 {
			return sc.DecodePressure
		}
		return sc.PrefillPressure
	}
	// The source keeps headroom (source_limit) unless the destination
	// would still be worse off than the source after the move: when both
	// phases are short, the score's ranking decides (holding would leave
	// the worse phase drowning to keep the better one's margin).
	srcLimit := c.cfg.SourceLimit
	// A TTFT tail no pool size can remove does not count (prefillTail);
	// one that more engines can remove lets an unconfirmed move (one
	// engine) take the decode source up to its own SLO instead of
	// source_limit, while the source's KV need after the move stays
	// within source_limit of its capacity.
	tail := dir > 0 && !confirmed && s.prefillTail(c.cfg) && s.kvWithin(s.Split(1), srcLimit)
	srcOK := func(src, dst float64) bool { return src < srcLimit || (confirmed && src < dst) || (tail && src < 1) }
	allowed := largest(func(sc SplitScore) bool { return srcOK(srcP(sc), dstP(sc)) })
	srcValue, srcDetail := srcP, from.String()+" pressure after the move"
	if tail {
		srcDetail += " (limit 1: a TTFT miss share past the infeasible share, decode KV within source_limit)"
	}
	// A prediction from demand holding an overflow cohort (priced at its
	// largest shape) is an upper bound. Against a latency or queue
	// measured past the destination's SLO it yields to the pools'
	// measurements (measuredAt): a source measured well within
	// source_limit is priced at most at its measurement, and so is a
	// destination measured within its SLO. Where only the measurement
	// lets the move pass, one engine moves (the next decision sees it).
	// The measurements must postdate the last move: the short window
	// begins after its switch time, or it still holds latencies of the
	// pools before that move landed (d02a: decode at 1.05 of its SLO
	// measured while three engines landed, one more moved, and prefill
	// went from 0.34 to 5× its SLO).
	settled := c.settled(nowNs)
	if s.overflowPriced() && measuredDeficit && settled {
		toPrefill := dir > 0
		srcWithin, dstWithin := s.measuredWithin(!toPrefill, srcLimit, cur, kvSoon, c.cfg), s.measuredWithin(toPrefill, 1, cur, kvSoon, c.cfg)
		srcM := func(sc SplitScore) float64 {
			if !srcWithin {
				return srcP(sc)
			}
			return min(srcP(sc), s.measuredAt(!toPrefill, cur, sc))
		}
		dstM := func(sc SplitScore) float64 {
			if !dstWithin {
				return dstP(sc)
			}
			return min(dstP(sc), s.measuredAt(toPrefill, cur, sc))
		}
		byMeasure := largest(func(sc SplitScore) bool { return srcOK(srcM(sc), dstM(sc)) })
		if allowed == 0 {
			allowed = min(byMeasure, 1)
		} else {
			allowed = min(allowed, byMeasure)
		}
		srcValue, srcDetail = srcM, srcDetail+", bounded by the measurements (demand priced with an overflow cohort)"
	}
	// The prefill engines' measured work (their busy share, in engines)
	// bounds a move toward decode on overflow-priced demand, where the
	// prediction is only an upper bound: a pool that keeps up (TTFT
	// measured within its SLO, no queue past it) is not taken to that
	// work or below (its queue would grow without end), and one that is
	// short already loses engines below it one at a time, none while an
	// engine is in transition (the model's stacked moves there emptied
	// the pool: dev draw e29c, 19 to 7 engines and a 600-s queue).
	if dir < 0 && s.overflowPriced() && !math.IsNaN(s.prefillWork) {
		byWork := largest(func(sc SplitScore) bool { return float64(sc.PrefillEngines) > s.prefillWork })
		keepsUp := !s.prefillBehind && !(s.ObservedPrefill.Count >= c.cfg.MinObservations && s.ObservedPrefill.Mean > 1)
		if byWork == 0 && !keepsUp && s.InTransition == 0 {
			byWork = 1
		}
		if byWork < allowed {
			allowed = byWork
			srcDetail += ", bounded by the prefill engines' measured work"
		}
	}
	if override {
		// The source measures within source_limit one engine smaller
		// (starvation): the prediction does not hold the move.
		allowed, srcDetail = 1, srcDetail+"; passed on measurements: the destination starving for starvation_s, the source within source_limit one engine smaller"
	}
	pass = narrow(allowed)
	gate(GateSourcePressure, pass, srcValue(s.Split(dir*k)), srcLimit, srcDetail)
	var ev *DemandEvidence
	if dir > 0 {
		// A move toward prefill must also leave decode room for the
		// prefill backlog it releases (KVSurgeTokens), as long as the
		// current split has that room: when it has not, the backlog
		// overflows decode whatever the split, and the surge does not
		// decide (in overload, holding prefill short for it only kept
		// the queue).
		surge := cur.KVCapacityTokens > 0 && cur.KVSurgeTokens <= c.cfg.KVHeadroom*cur.KVCapacityTokens
		kvNeed := func(sc SplitScore) float64 {
			if surge {
				return max(sc.KVNeedTokens, sc.KVSurgeTokens)
			}
			return sc.KVNeedTokens
		}
		kvOK := func(sc SplitScore) bool {
			return sc.KVCapacityTokens == 0 || kvNeed(sc) <= c.cfg.KVHeadroom*sc.KVCapacityTokens
		}
		kvDetail := "decode KV tokens (with the released prefill backlog) vs headroom × capacity after the move"
		if override && cur.KVCapacityTokens > 0 && cur.KVNeedTokens > c.cfg.KVHeadroom*cur.KVCapacityTokens {
			// The model's KV need is past headroom at the current split,
			// where decode measures spare (starvation): contradicted by
			// the measurement, it does not price the next split either;
			// the resident KV does.
			kvNeed = func(SplitScore) float64 { return s.ResidentDecodeKV }
			kvOK = func(sc SplitScore) bool {
				return sc.KVCapacityTokens == 0 || s.ResidentDecodeKV <= c.cfg.KVHeadroom*sc.KVCapacityTokens
			}
			kvDetail = "resident decode KV tokens vs headroom × capacity after the move (starvation: the model's need is past headroom at the current split, where decode measures spare)"
		}
		pass = narrow(largest(kvOK))
		prop := s.Split(k)
		gate(GateKVLimit, pass, kvNeed(prop), c.cfg.KVHeadroom*prop.KVCapacityTokens, kvDetail)
		ev = c.evidence(nowNs)
		if ev.Closed {
			pass = narrow(s.DecodeEngines - ev.EnvelopeDecodeEngines)
		} else {
			pass = s.prefillBehind || override
			k = 1
		}
		gate(GateDemandEvidence, pass, float64(ev.Arrivals), float64(ev.RequiredArrivals), "consolidation evidence closed and envelope kept")
	} else {
		prop := s.Split(-k)
		gate(GateKVLimit, true, prop.KVNeedTokens, c.cfg.KVHeadroom*prop.KVCapacityTokens, "adds decode capacity")
		gate(GateDemandEvidence, true, 0, 0, "not a consolidation")
	}
	cooldownNs := int64(c.cfg.CooldownS * 1e9)
	sinceMove := float64(nowNs-c.lastMoveNs) / 1e9
	if c.lastMoveNs == 0 {
		sinceMove = math.Inf(1)
	}
	gate(GateCooldown, c.lastMoveNs == 0 || nowNs-c.lastMoveNs >= cooldownNs, sinceMove, c.cfg.CooldownS, "seconds since the last move")
	// Candidates: the cheapest movers passing dwell, then coverage.
	dwellNs := int64(c.cfg.DwellS * 1e9)
	var cands []int
	dwellAny, coveredAny := false, false
	for _, i := range movers {
		e := &s.Engines[i]
		p := &s.Profiles[e.Profile]
		covered := s.Basis == BasisUnprofiled || e.HasProfile && ((to == RolePrefill && p.CoversPrefill(s.Long.MaxInput)) || (to == RoleDecode && p.CoversDecode(s.Long.MaxCtxPerSeq)))
		coveredAny = coveredAny || covered
		dwelt := e.LastMoveNs == 0 || nowNs-e.LastMoveNs >= dwellNs
		dwellAny = dwellAny || dwelt
		if covered && dwelt && len(cands) < k {
			cands = append(cands, int(i))
		}
	}
	gate(GateDwell, dwellAny, 0, c.cfg.DwellS, "a "+from.String()+" engine past its dwell")
	// Coverage is judged on its own when dwell already blocks.
	if models := c.liveModels(); models != "" {
		gate(GateProfileCoverage, false, 2, 1, models)
	} else {
		gate(GateProfileCoverage, len(cands) > 0 || (!dwellAny && coveredAny), 0, 0, "a profile covering "+to.String()+" and the observed shapes")
	}
	needConfirm, confirmDetail := c.cfg.ConfirmSteps, "consecutive steps choosing this move"
	if dir == -c.lastMoveDir {
		needConfirm, confirmDetail = max(needConfirm, c.cfg.ReversalConfirmSteps), "consecutive steps choosing this move (it reverses the last move)"
	}
	gate(GateConfirmation, override || c.confirmCount >= needConfirm, float64(c.confirmCount), float64(needConfirm), confirmDetail)
	d.Gates = gates
	for _, g := range gates {
		if !g.Pass {
			d.Blocked = g.Gate
			break
		}
	}
	k = max(1, min(k, len(cands)))
	pr := s.Split(dir * k).rounded()
	d.Proposed = &pr
	if ev != nil {
		ev.BlockedGate = d.Blocked
		d.DemandEvidence = ev
	}
	if d.Blocked != "" {
		d.Action = ActionBlocked
		d.Reason = "blocked by " + d.Blocked
		return d
	}
	// Move.
	c.lastMoveNs, c.lastMoveDir = nowNs, dir
	c.memory.moved(s, nowNs, dir, s.PrefillEngines+s.IncomingPrefill+dir*k, c.cfg.TargetPressure)
	c.confirmDir, c.confirmCount = 0, 0
	c.addRisk(nowNs, "move")
	d.Moves = make([]Move, 0, k)
	for _, ci := range cands[:k] {
		e := &s.Engines[ci]
		le := &c.engines[c.index[e.ID]]
		le.State, le.TargetRole, le.LastMoveNs = StateDraining, to, nowNs
		if c.moveStart == nil {
			c.moveStart = map[string]moveStart{}
		}
		c.moveStart[e.ID] = moveStart{atNs: nowNs, drainS: e.DrainS}
		d.Moves = append(d.Moves, Move{EngineID: e.ID, From: from, To: to, DecisionSeq: d.Seq, AtNs: nowNs})
		c.moves.Add(1)
	}
	d.Action = ActionMove
	d.Reason = "moving " + d.Moves[0].EngineID
	if k > 1 {
		d.Reason += fmt.Sprintf(" and %d more", k-1)
	}
	d.Reason += " from " + from.String() + " to " + to.String()
	if override {
		d.Reason += fmt.Sprintf(" (starvation: %s measured past its SLO for %.0f s, %s spare)", to, float64(nowNs-c.starveSince)/1e9, from)
	}
	c.publish()
	return d
}

// settled: no move yet, or the last one's switch time plus the short
// horizon have passed (the short window measures the pools after it).
// Caller holds mu.
func (c *Controller) settled(nowNs int64) bool {
	return c.lastMoveNs == 0 || float64(nowNs-c.lastMoveNs)/1e9 > float64(c.tm.ShortNs)/1e9+c.switchS()
}

// starvation tracks a phase measured past its SLO while the other phase
// measures spare: within source_limit even one engine smaller (decode
// also with its resident KV within target_pressure of that smaller
// capacity and not projected to run out; prefill with no TTFT tail and
// its measured work within target_pressure of one engine fewer). Prefill
// is short on a queue past the TTFT SLO (its minimum over the short
// window) or a mean TTFT past the SLO with a tail more engines can
// remove; decode on a mean TPOT past the SLO. It returns the direction
// toward the starving phase (+1 prefill, −1 decode) once that has held
// starvation_s on end (on overflow-priced demand at once), counted from
// when the pools settled after the last move (its switch time plus the
// short horizon), else 0. Caller holds mu.
func (c *Controller) starvation(nowNs int64, s *Snapshot, cur SplitScore, kvSoon bool) int {
	cfg := c.cfg
	if cfg.StarvationS <= 0 {
		return 0
	}
	dir := 0
	nP, nD := s.PrefillEngines, s.DecodeEngines
	if s.InTransition == 0 && nP > 0 && nD > 0 {
		pShort := s.queueShort > 1 || (s.ObservedPrefill.past(1, cfg) && s.prefillTail(cfg))
		dShort := s.ObservedDecode.past(1, cfg)
		dSpare := nD >= 2 && s.ObservedDecode.Count >= cfg.MinObservations && !kvSoon &&
			scaleObserved(s.ObservedDecode.Mean, nD, nD-1) <= cfg.SourceLimit &&
			(cur.KVCapacityTokens <= 0 || s.ResidentDecodeKV <= cfg.TargetPressure*cur.KVCapacityTokens*float64(nD-1)/float64(nD))
		pSpare := nP >= 2 && s.ObservedPrefill.Count >= cfg.MinObservations && !s.prefillTail(cfg) &&
			scaleObserved(s.measuredPrefill(), nP, nP-1) <= cfg.SourceLimit &&
			(math.IsNaN(s.prefillWork) || s.prefillWork <= cfg.TargetPressure*float64(nP-1))
		switch {
		case pShort && dSpare:
			dir = 1
		case dShort && pSpare:
			dir = -1
		}
	}
	if c.starveShareAt != 0 {
		f := 1 - math.Exp(-float64(nowNs-c.starveShareAt)/1e9/cfg.StarvationS)
		for i := range c.starveShare {
			x := 0.0
			if dir != 0 && starveIndex(dir) == i {
				x = 1
			}
			c.starveShare[i] += f * (x - c.starveShare[i])
		}
	}
	c.starveShareAt = nowNs
	settled := c.settled(nowNs)
	if dir == 0 || !settled {
		c.starveDir, c.starveSince = 0, 0
		return 0
	}
	if dir != c.starveDir {
		c.starveDir, c.starveSince = dir, nowNs
	}
	// On demand priced with an overflow cohort the model is an upper
	// bound that cannot refute a measurement: the first settled step
	// that measures the starvation moves, without the count.
	need := cfg.StarvationS
	if s.overflowPriced() {
		need = 0
	}
	if float64(nowNs-c.starveSince)/1e9 >= need {
		return dir
	}
	return 0
}

// riskCutoff is the evidence cutoff: the latest risk event within the max
// span (now when riskNow), else now − max span.
func (c *Controller) riskCutoff(nowNs int64, riskNow bool) int64 {
	if riskNow {
		return nowNs
	}
	cutoff := nowNs - c.tm.LongNs
	for _, r := range c.risks {
		if r.AtNs > cutoff && r.AtNs <= nowNs {
			cutoff = r.AtNs
		}
	}
	return cutoff
}

// evidence builds demand_evidence from the snapshot. Caller holds mu.
func (c *Controller) evidence(nowNs int64) *DemandEvidence {
	s := &c.snap
	ev := &DemandEvidence{
		RequiredSpanS:    float64(c.tm.ShortNs) / 1e9,
		RequiredArrivals: c.cfg.MinEvidenceArrivals,
		MaxSpanS:         float64(c.tm.LongNs) / 1e9,
		RiskKind:         "none",
	}
	if s.EvidenceCutoffNs < nowNs {
		ev.SpanS = float64(s.Evidence.SpanNs) / 1e9
		ev.Arrivals = s.Evidence.Observations
	}
	ev.Closed = ev.SpanS >= ev.RequiredSpanS && ev.Arrivals >= ev.RequiredArrivals
	var latest riskEvent
	for _, r := range c.risks {
		if r.AtNs > nowNs-c.tm.LongNs && r.AtNs <= nowNs {
			ev.RiskEvents++
			if r.AtNs >= latest.AtNs {
				latest = r
			}
		}
	}
	if ev.RiskEvents > 0 {
		ev.RiskKind, ev.RiskAgeS = latest.Kind, roundJ(float64(nowNs-latest.AtNs)/1e9)
	}
	ev.ShortDecodeEngines = s.NeededDecodeEngines(0)
	ev.LongDecodeEngines = s.NeededDecodeEngines(1)
	ev.EnvelopeDecodeEngines = max(ev.ShortDecodeEngines, ev.LongDecodeEngines)
	switch {
	case s.Long.RatePerS > 0:
		ev.TrendRatio = roundJ(s.Short.RatePerS / s.Long.RatePerS)
	case s.Short.RatePerS > 0:
		ev.TrendRatio = roundJ(math.Inf(1))
	default:
		ev.TrendRatio = 1
	}
	ev.SpanS = roundJ(ev.SpanS)
	return ev
}

// feasibleMaxInput is the longest prompt whose own prefill fits in the
// TTFT SLO on p (binary search on the monotone part of the fit).
func feasibleMaxInput(p *Profile, ttftS float64) int64 {
	if !p.HasPrefill || p.Prefill.Seconds(1) > ttftS {
		return 0
	}
	lo, hi := int64(1), int64(buckets.MaxTokens)
	if p.Prefill.Seconds(float64(hi)) <= ttftS {
		return hi
	}
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if p.Prefill.Seconds(float64(mid)) <= ttftS {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// starveIndex is starveShare's index for a move in direction dir
// (toward prefill 0, toward decode 1).
func starveIndex(dir int) int {
	if dir > 0 {
		return 0
	}
	return 1
}
