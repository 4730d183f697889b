package controller

// Newest returns the newest limit journal records (all retained when
// limit <= 0), oldest first, from the in-memory ring: what a status page
// or `GET /v1/decisions?limit=N` shows, where Decisions pages forward
// from a sequence number.
func (c *Controller) Newest(limit int) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.journal.newest(limit)
}

func (r *journalRing) newest(limit int) []Decision {
	n := r.n
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]Decision, 0, n)
	start := (r.next - n + len(r.buf)) % len(r.buf)
	for i := 0; i < n; i++ {
		out = append(out, r.buf[(start+i)%len(r.buf)])
	}
	return out
}
