package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GET /v1/roles for routers that poll it. The answer carries a strong
// ETag (a digest of the body), encoded once per published role table. A
// router sending If-None-Match with the ETag it holds gets 304 and no
// body while the table is unchanged. With Prefer: wait=N (RFC 7240) as
// well, the answer waits up to N seconds (at most maxRolesWaitS, and
// less than http.write_timeout_s) for the table to change: 200 with the
// new table as soon as it does (Preference-Applied: wait=N), else 304.
// A router then learns of a move when it is published, not at its next
// poll. A waiting request holds a connection: http.max_connections
// bounds them.

// maxRolesWaitS caps Prefer: wait.
const maxRolesWaitS = 60

// rolesPollInterval is how often the watcher looks for a new table when
// the core's table does not say when it is replaced (RoleTable.Replaced
// nil: a table no controller published).
const rolesPollInterval = 20 * time.Millisecond

type rolesBody struct {
	t    *roleTable
	body []byte
	etag string
}

// rolesWatch hands the current encoded table out and wakes waiters when
// the core publishes another.
type rolesWatch struct {
	mu       sync.Mutex
	cur      *rolesBody
	changed  chan struct{} // closed when cur is replaced
	stopOnce sync.Once
	stopped  chan struct{} // closed when the server shuts down
}

// stopping is closed when the server starts shutting down: waiting
// requests answer at once, so that they do not hold the shutdown.
func (w *rolesWatch) stopping() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped == nil {
		w.stopped = make(chan struct{})
	}
	return w.stopped
}

func (w *rolesWatch) stop() { w.stopOnce.Do(func() { close(w.stopping()) }) }

// body is the encoded table the core publishes now, cached per table.
func (w *rolesWatch) body(c Core) *rolesBody {
	b, _ := w.wait(c)
	return b
}

// wait returns the current body and a channel closed when it is
// replaced, both read under one lock.
func (w *rolesWatch) wait(c Core) (*rolesBody, <-chan struct{}) {
	t := c.Roles()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil || w.cur.t != t {
		body := encodeJSON(t)
		sum := sha256.Sum256(body)
		w.cur = &rolesBody{t: t, body: body, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		if w.changed != nil {
			close(w.changed)
		}
		w.changed = make(chan struct{})
	}
	return w.cur, w.changed
}

// run takes up each table the core publishes until ctx ends: it waits
// for the current table to be replaced (RoleTable.Replaced), or looks
// again after rolesPollInterval where the table cannot say.
func (w *rolesWatch) run(c Core) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for {
			next := w.body(c).t.Replaced()
			if next == nil {
				tm := time.NewTimer(rolesPollInterval)
				select {
				case <-ctx.Done():
					tm.Stop()
					return nil
				case <-tm.C:
				}
				continue
			}
			select {
			case <-ctx.Done():
				return nil
			case <-next:
			}
		}
	}
}

// preferWait is Prefer's wait preference in seconds, capped; 0 when absent
// or malformed.
func preferWait(r *http.Request, capS int) int {
	for _, line := range r.Header.Values("Prefer") {
		for _, pref := range strings.Split(line, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || n <= 0 {
				return 0
			}
			return min(n, capS)
		}
	}
	return 0
}

// etagMatches reports whether an If-None-Match header names etag (or *).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

func (s *Server) handleRoles(w http.ResponseWriter, r *http.Request) {
	b, changed := s.roles.wait(s.core)
	inm := r.Header.Get("If-None-Match")
	if inm != "" && etagMatches(inm, b.etag) {
		capS := min(maxRolesWaitS, int(s.cfg.HTTP.WriteTimeoutS)-1)
		if wait := preferWait(r, capS); wait > 0 {
			t := time.NewTimer(time.Duration(wait) * time.Second)
		waiting: // a new table with the same content (same ETag) waits on
			for etagMatches(inm, b.etag) {
				select {
				case <-changed:
					b, changed = s.roles.wait(s.core)
				case <-t.C:
					break waiting
				case <-r.Context().Done():
					break waiting
				case <-s.roles.stopping():
					break waiting
				}
			}
			t.Stop()
			w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(wait))
		}
		if etagMatches(inm, b.etag) {
			w.Header().Set("ETag", b.etag)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("ETag", b.etag)
	w.Header().Set("Cache-Control", "no-cache")
	writeRawJSON(w, http.StatusOK, b.body)
}
