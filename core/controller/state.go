package controller

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	return st
}

// Restore applies saved state: sequence, cooldown clock, confirmation,
// risk events, and for each engine its role and last move (engines not
// yet known get them when first upserted).
func (c *Controller) Restore(st PersistedState) error {
	if st.Version != stateVersion {
		return fmt.Errorf("%w: state version %d, want %d", ErrInvalidConfig, st.Version, stateVersion)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq = max(c.seq, st.Seq)
	if st.LastMoveNs >= c.lastMoveNs && st.LastMoveDir >= -1 && st.LastMoveDir <= 1 {
		c.lastMoveDir = st.LastMoveDir
	}
	c.lastMoveNs = max(c.lastMoveNs, st.LastMoveNs)
	c.confirmDir, c.confirmCount, c.confirmSeq = st.Confirm.Dir, st.Confirm.Count, st.Confirm.Seq
	c.risks = append(c.risks[:0], st.Risks...)
	if len(c.risks) > riskCap {
		c.risks = c.risks[len(c.risks)-riskCap:]
	}
	for _, pe := range st.Engines {
		if pe.Role != RolePrefill && pe.Role != RoleDecode {
			continue
		}
		if i, ok := c.index[pe.ID]; ok {
			e := &c.engines[i]
			e.Role, e.LastMoveNs = pe.Role, max(e.LastMoveNs, pe.LastMoveNs)
			e.State, e.TargetRole = StateServing, RoleNone
			continue
		}
		c.restored[pe.ID] = pe
	}
	c.publish()
	return nil
}

// SaveState writes st to path atomically: a temporary file in the same
// directory, synced, then renamed over path.
func SaveState(path string, st PersistedState) error {
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save state %s: %w", path, err)
	}
	return nil
}

// LoadState reads a state file written by SaveState. A missing file gives
// an error wrapping os.ErrNotExist.
func LoadState(path string) (PersistedState, error) {
	var st PersistedState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("load state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("load state %s: %w", path, err)
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
