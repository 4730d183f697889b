package extproc

import "bytes"

// numScan finds integer values of JSON keys ("max_tokens": 256) in a
// byte stream fed in chunks, holding only a short carry between chunks:
// a request body or a response is never buffered whole, nor copied (only
// the carry and the next chunk's first scanCarry bytes are, to find what a
// chunk boundary cut). A key's quoted name followed by a colon can only
// be a key (inside a JSON string its quotes would be escaped); a key
// whose value is not a plain non-negative integer (an object, a string, a
// float) is not taken. The last match of each key wins. Keys may be
// nested (a key of the same name in a tool's schema holds an object,
// which is not taken).
type numScan struct {
	carry [scanCarry]byte
	n     int
	seam  [2 * scanCarry]byte // carry + the chunk's head
	val   [maxKeys]int64
	found [maxKeys]bool
}

const (
	// scanCarry holds a key, its colon, spaces and up to maxDigits digits that
	// a chunk boundary cut.
	scanCarry = 96
	maxKeys   = 2
	maxDigits = 18 // below 2^63
)

// feed scans chunk for keys (each a quoted name, e.g. `"max_tokens"`):
// first the seam (the carry and the chunk's head), for the matches that
// start in the carry, then the chunk itself.
func (s *numScan) feed(chunk []byte, keys *[maxKeys][]byte) {
	if s.n > 0 {
		seam := append(s.seam[:0], s.carry[:s.n]...)
		seam = append(seam, chunk[:min(len(chunk), scanCarry)]...)
		s.scan(seam, s.n, keys)
	}
	s.scan(chunk, len(chunk), keys)
	if len(chunk) >= scanCarry {
		s.n = copy(s.carry[:], chunk[len(chunk)-scanCarry:])
		return
	}
	// a short chunk: the carry keeps its own tail and the chunk
	keep := min(s.n, scanCarry-len(chunk))
	copy(s.carry[:], s.carry[s.n-keep:s.n])
	s.n = keep + copy(s.carry[keep:], chunk)
}

// scan records the keys' values in b for matches starting before limit.
func (s *numScan) scan(b []byte, limit int, keys *[maxKeys][]byte) {
	for k, key := range keys {
		if len(key) == 0 {
			continue
		}
		for off := 0; off < limit; {
			i := bytes.Index(b[off:], key)
			if i < 0 || off+i >= limit {
				break
			}
			i += off
			// A value cut at b's end is read again from the carry when
			// the next chunk comes.
			if v, ok := intAfterColon(b, i+len(key)); ok {
				s.val[k], s.found[k] = v, true
			}
			off = i + 1
		}
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
