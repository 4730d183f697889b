// Package testwait polls a condition in tests that meet real goroutines,
// processes or API servers, where a state arrives at some time within a
// limit rather than at a known step.
package testwait

import (
	"testing"
	"time"
)

// For polls cond every 10 ms (or limit/10 when shorter) until it holds,
// and fails t, naming what and limit, when limit passes first. cond runs
// at least once.
func For(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	poll := min(10*time.Millisecond, limit/10)
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(poll)
	}
}
