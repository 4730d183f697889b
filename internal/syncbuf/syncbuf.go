// Package syncbuf is a bytes buffer safe for concurrent writers and
// readers: a log destination that a test reads while the goroutines or the
// process it watches still write to it.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer whose content may be read at any time.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count is how many times sub occurs in what was written so far.
func (s *Buffer) Count(sub string) int { return strings.Count(s.String(), sub) }
