package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// PersistedEngine is one engine's controller-owned state.
type PersistedEngine struct {
	ID         string `json:"id"`
	Role       Role   `json:"role"`
	LastMoveNs int64  `json:"last_move_ns"`
}

// PersistedConfirm is the pending confirmation of a move direction.
type PersistedConfirm struct {
	// Dir: 1 decode to prefill, -1 prefill to decode, 0 none.
	Dir   int    `json:"dir"`
	Count int    `json:"count"`
	Seq   uint64 `json:"seq"`
}

// PersistedState is what survives a restart: roles, last move times,
// pending confirmations, risk events and the journal sequence.
type PersistedState struct {
	Version    int              `json:"version"`
	Seq        uint64           `json:"seq"`
	LastMoveNs int64            `json:"last_move_ns"`
	Confirm    PersistedConfirm `json:"confirm"`
	// LastMoveDir: direction of the last move (1 decode to prefill, -1
	// prefill to decode, 0 none); reversing it needs more confirmations.
	LastMoveDir int               `json:"last_move_dir,omitempty"`
	Engines     []PersistedEngine `json:"engines"`
	Risks       []riskEvent       `json:"risks"`
	// OutputsOverflowUntilNs is no longer written or read: learned output
	// discounts follow the retained outputs history itself. Kept so that
	// older state files load.
	OutputsOverflowUntilNs int64 `json:"outputs_overflow_until_ns,omitempty"`
	// Calibrations: each profile's online calibration (calibrate.go),
	// so that a restart keeps pricing with what the core had learned.
	Calibrations []PersistedCalibration `json:"calibrations,omitempty"`
}

const stateVersion = 1

// State returns the controller's persistent state. An engine in the middle
// of a move is saved in its target role: the actuator carries the move
// out, so after a restart the engine is where the move puts it.
func (c *Controller) State() PersistedState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := PersistedState{Version: stateVersion, Seq: c.seq, LastMoveNs: c.lastMoveNs, LastMoveDir: c.lastMoveDir,
		Confirm: PersistedConfirm{Dir: c.confirmDir, Count: c.confirmCount, Seq: c.confirmSeq},
		Risks:   slices.Clone(c.risks)}
	for i := range c.engines {
		e := &c.engines[i]
		r := e.Role
		if e.State != StateServing && e.TargetRole != RoleNone {
			r = e.TargetRole
		}
		st.Engines = append(st.Engines, PersistedEngine{ID: e.ID, Role: r, LastMoveNs: e.LastMoveNs})
	}
	for id, r := range c.restored {
		st.Engines = append(st.Engines, PersistedEngine{ID: id, Role: r.Role, LastMoveNs: r.LastMoveNs})
	}
	slices.SortFunc(st.Engines, func(a, b PersistedEngine) int { return strings.Compare(a.ID, b.ID) })
	st.Calibrations = c.persistCalibrations()
	return st
}

// Restore applies saved state: sequence, cooldown clock, confirmation,
// risk events, and for each engine its role and last move (engines not
// yet known get them when first upserted). A state Validate refuses
// (without a clock) is refused whole: Restore returns the error and
// changes nothing.
func (c *Controller) Restore(st PersistedState) error {
	if st.Version != stateVersion {
		return fmt.Errorf("%w: state version %d, want %d", ErrInvalidConfig, st.Version, stateVersion)
	}
	// The same checks as LoadState's (no clock here: times after the
	// next step are read as that step's, see clock.go), so a state from
	// any source (a Kubernetes object, a caller's own store) is refused
	// whole with an error naming the field, and nothing is applied.
	if err := st.Validate(0); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq = max(c.seq, st.Seq)
	if st.LastMoveNs >= c.lastMoveNs {
		c.lastMoveDir = st.LastMoveDir
	}
	c.lastMoveNs = max(c.lastMoveNs, st.LastMoveNs)
	c.confirmDir, c.confirmCount, c.confirmSeq = st.Confirm.Dir, st.Confirm.Count, st.Confirm.Seq
	c.risks = append(c.risks[:0], st.Risks...)
	if len(c.risks) > riskCap {
		c.risks = c.risks[len(c.risks)-riskCap:]
	}
	c.restoredUntilNs = 0 // the next step starts restoredTTLNs again
	c.held = c.held[:0]   // the restored state supersedes moves not carried out
	for _, pe := range st.Engines {
		if i, ok := c.index[pe.ID]; ok {
			e := &c.engines[i]
			e.Role, e.LastMoveNs = pe.Role, max(e.LastMoveNs, pe.LastMoveNs)
			e.State, e.TargetRole = StateServing, RoleNone
			continue
		}
		c.restored[pe.ID] = pe
	}
	c.restoreCalibrations(st.Calibrations)
	c.publish()
	return nil
}

// Errors of LoadState, comparable with errors.Is.
var (
	// ErrStateTorn: the state file is empty or not one whole JSON
	// object (a write cut short); the journal is the fallback.
	ErrStateTorn = errors.New("state file empty or torn")
	// ErrInvalidState: the state file parses but says something
	// impossible (an unknown role, a time in the future).
	ErrInvalidState = errors.New("invalid saved state")
)

// stateFutureSlackNs is how far ahead of the loading clock a saved time
// may lie: a day, the ring's far-future bound. Within it a time ahead is
// a clock that stepped back between runs, or a leader whose clock ran
// ahead, and the first step reads it as its own time (clock.go); beyond
// it the file is corrupt (last_move_ns = max int64 would hold its engine
// for ever).
const stateFutureSlackNs = int64(24 * time.Hour)

// maxStateSeq bounds a saved sequence: 2^53, exact in every JSON reader
// and 285 million years of one-second steps; a larger one is corrupt
// (at 2^64 − 1 the next decision's sequence would wrap to 0, and the
// journal's replay would skip every record after it).
const maxStateSeq = 1 << 53

// Validate checks st; nowNs > 0 also refuses times more than a day
// after nowNs (stateFutureSlackNs). The error names the field and the
// value.
func (st *PersistedState) Validate(nowNs int64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidState}, args...)...)
	}
	future := func(v int64) bool { return nowNs > 0 && v > nowNs+stateFutureSlackNs }
	if st.Version != stateVersion {
		return bad("version %d, want %d", st.Version, stateVersion)
	}
	if st.Seq > maxStateSeq {
		return bad("seq %d beyond 2^53 (the next decision's would not follow it)", st.Seq)
	}
	if st.LastMoveNs < 0 || future(st.LastMoveNs) {
		return bad("last_move_ns %d is negative or in the future (now %d)", st.LastMoveNs, nowNs)
	}
	if st.LastMoveDir < -1 || st.LastMoveDir > 1 {
		return bad("last_move_dir %d, want -1, 0 or 1", st.LastMoveDir)
	}
	if st.Confirm.Dir < -1 || st.Confirm.Dir > 1 || st.Confirm.Count < 0 || st.Confirm.Seq > st.Seq {
		return bad("confirm %+v: dir in [-1, 1], count >= 0, seq <= %d", st.Confirm, st.Seq)
	}
	seen := make(map[string]bool, len(st.Engines))
	for i, e := range st.Engines {
		switch {
		case e.ID == "" || seen[e.ID]:
			return bad("engines[%d].id %q is empty or repeated", i, e.ID)
		case e.Role != RolePrefill && e.Role != RoleDecode:
			return bad("engines[%d] (%s) role %q, want prefill or decode", i, e.ID, e.Role)
		case e.LastMoveNs < 0 || future(e.LastMoveNs):
			return bad("engines[%d] (%s) last_move_ns %d is negative or in the future (now %d)", i, e.ID, e.LastMoveNs, nowNs)
		}
		seen[e.ID] = true
	}
	for i, r := range st.Risks {
		if r.AtNs < 0 || future(r.AtNs) {
			return bad("risks[%d].at_ns %d is negative or in the future (now %d)", i, r.AtNs, nowNs)
		}
	}
	if err := validateCalibrations(st.Calibrations, future); err != nil {
		return bad("%v", err)
	}
	if st.OutputsOverflowUntilNs < 0 || (nowNs > 0 && st.OutputsOverflowUntilNs > nowNs+int64(24*time.Hour)) {
		return bad("outputs_overflow_until_ns %d is negative or more than a day ahead (now %d)", st.OutputsOverflowUntilNs, nowNs)
	}
	return nil
}

// Apply replays one journal record onto st: the sequence, each move
// (the engine's role and last move time), the cooldown clock and
// direction, and the pending confirmation. It is how a checkpoint plus
// the journal records after it give the controller's state.
//
// A record Validate could not accept in a state is skipped whole (a
// sequence past 2^53) or in part (a move without an engine id, with a
// target other than prefill or decode, or at a negative time): journal
// records are read back from a disk that may have damaged them, and one
// damaged record must not stop the controller from starting.
func (st *PersistedState) Apply(d *Decision) {
	if d.Seq <= st.Seq || d.Seq > maxStateSeq {
		return
	}
	st.Version = stateVersion
	st.Seq = d.Seq
	dir := 0
	switch d.Direction {
	case "decode_to_prefill":
		dir = 1
	case "prefill_to_decode":
		dir = -1
	}
	switch {
	case len(d.Moves) > 0:
		st.Confirm = PersistedConfirm{Seq: d.Seq}
	case d.Confirmations > 0 && dir != 0:
		st.Confirm = PersistedConfirm{Dir: dir, Count: d.Confirmations, Seq: d.Seq}
	default:
		st.Confirm.Dir, st.Confirm.Count = 0, 0
	}
	for _, m := range d.Moves {
		if m.EngineID == "" || (m.To != RolePrefill && m.To != RoleDecode) || m.AtNs < 0 {
			continue
		}
		st.LastMoveNs = max(st.LastMoveNs, m.AtNs)
		if m.To == RolePrefill {
			st.LastMoveDir = 1
		} else {
			st.LastMoveDir = -1
		}
		i := slices.IndexFunc(st.Engines, func(e PersistedEngine) bool { return e.ID == m.EngineID })
		if i < 0 {
			st.Engines = append(st.Engines, PersistedEngine{ID: m.EngineID})
			i = len(st.Engines) - 1
		}
		st.Engines[i].Role, st.Engines[i].LastMoveNs = m.To, max(st.Engines[i].LastMoveNs, m.AtNs)
	}
	if len(d.Moves) > 0 {
		slices.SortFunc(st.Engines, func(a, b PersistedEngine) int { return strings.Compare(a.ID, b.ID) })
	}
}

// SaveState writes st to path atomically: a temporary file in the same
// directory, synced, renamed over path, and the directory synced so that
// the rename survives a power loss.
func SaveState(path string, st PersistedState) error { return saveState(OSFS{}, path, st) }

func saveState(fsys FS, path string, st PersistedState) error {
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err == nil {
		err = fsys.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("save state %s: %w", path, err)
	}
	return nil
}

// LoadState reads and validates (without a clock) a state file written by
// SaveState. A missing file gives an error wrapping os.ErrNotExist, an
// empty or torn one ErrStateTorn, an impossible one ErrInvalidState.
func LoadState(path string) (PersistedState, error) { return loadState(OSFS{}, path, 0) }

func loadState(fsys FS, path string, nowNs int64) (PersistedState, error) {
	var st PersistedState
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return st, fmt.Errorf("load state: %w", err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return st, fmt.Errorf("load state %s: %w", path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return st, fmt.Errorf("load state %s: %w (%d bytes)", path, ErrStateTorn, len(b))
	}
	if err := json.Unmarshal(b, &st); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) {
			return PersistedState{}, fmt.Errorf("load state %s: %w: %v", path, ErrStateTorn, err)
		}
		return PersistedState{}, fmt.Errorf("load state %s: %w: %v", path, ErrInvalidState, err)
	}
	if err := st.Validate(nowNs); err != nil {
		return PersistedState{}, fmt.Errorf("load state %s: %w", path, err)
	}
	return st, nil
}

// Decisions returns up to limit journal records with Seq > sinceSeq,
// oldest first, from the in-memory ring.
func (c *Controller) Decisions(sinceSeq uint64, limit int) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.journal.since(sinceSeq, limit)
}

// Latest returns the latest decision; ok is false before the first step.
func (c *Controller) Latest() (Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest, c.hasLast
}

// LatestEvidence returns the demand_evidence of the latest decision that
// captured one (a decode-to-prefill gate evaluation) and its sequence.
func (c *Controller) LatestEvidence() (DemandEvidence, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastEv == nil {
		return DemandEvidence{}, 0, false
	}
	return *c.lastEv, c.lastEvAt, true
}

// restoredTTLNs is how long after the first step that follows a Restore
// the saved role of an engine that has not been registered since is
// kept. Agents report within seconds and discovery lists every pod at
// once, so an engine still missing after an hour is gone (its pod
// replaced, its node removed); without the bound every pod that died
// around a restart or a failover stayed in the saved state for good, and
// the state grew until it no longer fit its ConfigMap. An engine that
// comes back later starts from the role it is registered with (in a
// cluster, its pod's role label, which a move sets).
const restoredTTLNs = int64(time.Hour)

// expireRestored drops the restored entries no engine has claimed once
// restoredTTLNs has passed since the first step after the Restore
// (caller holds mu).
func (c *Controller) expireRestored(nowNs int64) {
	switch {
	case len(c.restored) == 0:
		c.restoredUntilNs = 0
	case c.restoredUntilNs == 0:
		c.restoredUntilNs = nowNs + restoredTTLNs
	case nowNs >= c.restoredUntilNs:
		c.log.Info("saved roles of engines not registered since the restore dropped", "engines", len(c.restored))
		clear(c.restored)
		c.restoredUntilNs = 0
	}
}
