package extproc

import (
	"strings"
	"testing"
)

// feedAt feeds body to a fresh scanner cut at every pair of positions
// (three chunks), and checks that each cut reads the same values.
func TestNumScanReadsKeysCutAnywhere(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"say \"max_tokens\": 9"}],"max_tokens": 256,"stream":true,"max_completion_tokens":` + "\n\t" + `77}`
	for i := 0; i <= len(body); i++ {
		for j := i; j <= len(body); j += 7 {
			var s numScan
			s.feed([]byte(body[:i]), &reqKeys)
			s.feed([]byte(body[i:j]), &reqKeys)
			s.feed([]byte(body[j:]), &reqKeys)
			if !s.found[0] || s.val[0] != 256 || !s.found[1] || s.val[1] != 77 {
				t.Fatalf("cut at %d,%d: max_tokens %v/%d, max_completion_tokens %v/%d; want 256 and 77",
					i, j, s.found[0], s.val[0], s.found[1], s.val[1])
			}
		}
	}
}

func TestNumScanTakesOnlyPlainIntegers(t *testing.T) {
	for _, body := range []string{
		`{"max_tokens":1.5}`,
		`{"max_tokens":"256"}`,
		`{"max_tokens":-3}`,
		`{"max_tokens":1e3}`,
		`{"max_tokens":null}`,
		`{"tools":[{"parameters":{"max_tokens":{"type":"integer"}}}]}`,
		`{"max_tokens":12345678901234567890}`,
		`{"max_tokens" 5}`,
		`{"content":"\"max_tokens\\": 5"}`,
		`{"max_tokens":5`, // cut: no byte ends the number
	} {
		var s numScan
		s.feed([]byte(body), &reqKeys)
		if s.found[0] {
			t.Errorf("%s: read max_tokens = %d, want nothing", body, s.val[0])
		}
	}
}

func TestNumScanCarryIsBounded(t *testing.T) {
	var s numScan
	big := strings.Repeat("x", 3<<20)
	s.feed([]byte(big), &reqKeys)
	if s.n != scanCarry {
		t.Fatalf("carry %d bytes, want %d", s.n, scanCarry)
	}
	s.feed([]byte(`,"max_tokens":64}`), &reqKeys)
	if !s.found[0] || s.val[0] != 64 {
		t.Fatalf("max_tokens after a large chunk: %v %d", s.found[0], s.val[0])
	}
}

func TestSSECountCountsDataEvents(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("long ", 50) + "\"}}]}\r\n\r\n" +
		": keep-alive comment\n\n" +
		"event: message\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: [DONE]\n\n" +
		"data: {\"last\":true}" // no newline: flush ends it
	for i := 0; i <= len(stream); i += 3 {
		var c sseCount
		c.feed([]byte(stream[:i]))
		c.feed([]byte(stream[i:]))
		c.flush()
		if c.events != 4 {
			t.Fatalf("cut at %d: %d events, want 4", i, c.events)
		}
	}
}

// FuzzScanners: any bytes, cut anywhere, leave both scanners bounded and
// read the same as uncut (for the key scanner, where no run of white
// space is long enough to push a key and its value past the carry).
func FuzzScanners(f *testing.F) {
	f.Add([]byte(`{"max_tokens": 256, "max_completion_tokens":9}`), 7)
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n"), 20)
	f.Add([]byte(`"max_tokens":`+strings.Repeat(" ", 100)+`5,`), 3)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if len(b) == 0 {
			return
		}
		cut = ((cut % len(b)) + len(b)) % len(b)
		var whole, parts numScan
		whole.feed(b, &reqKeys)
		parts.feed(b[:cut], &reqKeys)
		parts.feed(b[cut:], &reqKeys)
		if parts.n > scanCarry || whole.n > scanCarry {
			t.Fatalf("carry %d / %d past %d", parts.n, whole.n, scanCarry)
		}
		if !strings.Contains(string(b), strings.Repeat(" ", 40)) && !strings.ContainsAny(string(b), "\t\r\n") &&
			(whole.found != parts.found || whole.val != parts.val) {
			t.Fatalf("cut at %d: %v %v, uncut %v %v", cut, parts.found, parts.val, whole.found, whole.val)
		}
		for k := range whole.val {
			if whole.val[k] < 0 {
				t.Fatalf("negative value %d", whole.val[k])
			}
		}
		var c1, c2 sseCount
		c1.feed(b)
		c1.flush()
		c2.feed(b[:cut])
		c2.feed(b[cut:])
		c2.flush()
		if c1.events != c2.events {
			t.Fatalf("cut at %d: %d events, uncut %d", cut, c2.events, c1.events)
		}
	})
}

// Neither scanner copies a chunk: feeding allocates nothing, however
// large the chunk.
func TestScannersDoNotAllocate(t *testing.T) {
	chunk := []byte(strings.Repeat(`{"choices":[{"delta":{"content":"x"}}]}`+"\n\n", 2000) + `"completion_tokens":12,`)
	var s numScan
	var c sseCount
	if n := testing.AllocsPerRun(100, func() {
		s.feed(chunk, &respKeys)
		s.feed(chunk[:10], &respKeys)
		c.feed(chunk)
	}); n != 0 {
		t.Fatalf("%v allocations per feed, want 0", n)
	}
	if !s.found[1] || s.val[1] != 12 {
		t.Fatalf("completion_tokens %v %d, want 12", s.found[1], s.val[1])
	}
}
