package controller

// RoleTable is the routing view routers read on every request. Once
// published it is never changed: the controller builds a new table and
// swaps it in with an atomic.Pointer, so a reader needs no lock and no
// allocation.
type RoleTable struct {
	Version uint64 `json:"version"`
	// Prefill lists live serving engines that take new prefill work,
	// sorted by id.
	Prefill []string `json:"prefill"`
	// Decode lists live serving engines that take new decode work, sorted
	// by id.
	Decode []string        `json:"decode"`
	known  map[string]Role // every engine in the table; RoleNone when it takes no new work
	// replaced is closed when the controller publishes the table after
	// this one (nil: a table no controller published).
	replaced chan struct{}
}

// Replaced returns a channel closed once a newer table has been published
// (Roles then returns it), so that a watcher waits for a change instead of
// polling. It is nil for a table no controller published, which is never
// replaced: a receive from it blocks. 0 allocations.
func (t *RoleTable) Replaced() <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.replaced
}

// RoleOf returns the role an engine takes new work in: RoleNone when it is
// unknown, not live, draining or switching. 0 allocations.
func (t *RoleTable) RoleOf(id string) Role {
	if t == nil {
		return RoleNone
	}
	return t.known[id]
}

// Known reports whether the engine is in the engine table at all (in any
// state). 0 allocations.
func (t *RoleTable) Known(id string) bool {
	if t == nil {
		return false
	}
	_, ok := t.known[id]
	return ok
}
