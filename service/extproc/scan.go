package extproc

import "bytes"

// numScan finds integer values of JSON keys ("max_tokens": 256) in a
// byte stream fed in chunks, holding only a short carry between chunks:
// a request body or a response is never buffered whole. A key's quoted
// name followed by a colon can only be a key (inside a JSON string its
// quotes would be escaped); a key whose value is not a plain non-negative
// integer (an object, a string, a float) is not taken. The last match of
// each key wins. Keys may be nested (a key of the same name in a tool's
// schema holds an object, which is not taken).
type numScan struct {
	carry [scanCarry]byte
	n     int
	buf   []byte // scratch: carry + chunk (reused; at most one chunk larger)
	val   [maxKeys]int64
	found [maxKeys]bool
}

const (
	// scanCarry holds a key, its colon, spaces and up to 19 digits that
	// a chunk boundary cut.
	scanCarry = 96
	maxKeys   = 2
	maxDigits = 18 // below 2^63
)

// feed scans chunk for keys (each a quoted name, e.g. `"max_tokens"`).
func (s *numScan) feed(chunk []byte, keys *[maxKeys][]byte) {
	s.buf = append(append(s.buf[:0], s.carry[:s.n]...), chunk...)
	b := s.buf
	for k, key := range keys {
		if len(key) == 0 {
			continue
		}
		for off := 0; ; {
			i := bytes.Index(b[off:], key)
			if i < 0 {
				break
			}
			i += off
			// A value cut at the chunk's end is read again from the carry
			// (the last scanCarry bytes) when the next chunk comes.
			v, ok := intAfterColon(b, i+len(key))
			if ok {
				s.val[k], s.found[k] = v, true
			}
			off = i + 1
		}
	}
	s.n = copy(s.carry[:], b[max(0, len(b)-scanCarry):])
	if cap(s.buf) > 1<<20 {
		s.buf = nil // a rare huge chunk does not stay with the stream
	}
}

// intAfterColon reads `\s*:\s*digits` at b[i:]: the value, and whether
// a complete integer (followed by a byte that ends it) was read.
func intAfterColon(b []byte, i int) (int64, bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	start := i
	var v int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i-start >= maxDigits {
			return 0, false
		}
		v = v*10 + int64(b[i]-'0')
		i++
	}
	if i == start || i == len(b) {
		return 0, false
	}
	switch b[i] {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return v, true
	}
	return 0, false // 1.5, 1e3, 12abc
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// sseCount counts the data events of a server-sent-events stream fed in
// chunks (each `data:` line but `data: [DONE]`), keeping only the start
// of the current line.
type sseCount struct {
	head   [16]byte
	n      int
	events int64
}

func (c *sseCount) feed(chunk []byte) {
	for _, b := range chunk {
		if b == '\n' {
			c.endLine()
			continue
		}
		if c.n < len(c.head) {
			c.head[c.n] = b
			c.n++
		}
	}
}

// flush ends a last line that had no newline.
func (c *sseCount) flush() { c.endLine() }

func (c *sseCount) endLine() {
	line := bytes.TrimRight(c.head[:c.n], "\r")
	c.n = 0
	rest, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 || bytes.HasPrefix(rest, []byte("[DONE]")) {
		return
	}
	c.events++
}
