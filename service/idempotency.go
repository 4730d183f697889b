package service

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Idempotency keys on POST /v1/events (draft-ietf-httpapi-idempotency-key-header;
// see the package doc, "Choices where the spec is silent").
const (
	// idempotencyHeader is the request header naming a batch; the
	// map key is already in canonical form, so a lookup allocates nothing.
	idempotencyHeader = "Idempotency-Key"
	// replayedHeader marks an answer replayed from the store.
	replayedHeader = "Idempotent-Replayed"
	// maxIdempotencyKeyBytes bounds a key (after unquoting a
	// structured-field string).
	maxIdempotencyKeyBytes = 255
	// idempotencyMaxBytes bounds the memory the store retains: each key
	// costs its length, its stored reply and idempotencyEntryOverhead.
	// The oldest completed keys are dropped first to stay within it.
	idempotencyMaxBytes = 32 << 20
	// idempotencyEntryOverhead approximates an entry's fixed cost (the
	// struct, its map slot, the string and slice headers).
	idempotencyEntryOverhead = 192
)

// errBadIdempotencyKey is the 400 answer's reason.
var errBadIdempotencyKey = errors.New("Idempotency-Key must be 1 to 255 printable ASCII characters, bare or as a structured-field string (\"...\")")

// parseIdempotencyKey reads the key from the header's values: exactly one
// value, either a structured-field string (RFC 8941: quoted, with \" and
// \\ as the only escapes) as the draft writes it, or the bare key as many
// clients send it; either way 1..255 bytes of printable ASCII (0x20-0x7e)
// once unquoted.
func parseIdempotencyKey(vals []string) (string, error) {
	if len(vals) != 1 {
		return "", fmt.Errorf("%w; got %d header lines", errBadIdempotencyKey, len(vals))
	}
	v := vals[0]
	if len(v) > 0 && v[0] == '"' {
		return unquoteSFString(v)
	}
	if len(v) == 0 || len(v) > maxIdempotencyKeyBytes {
		return "", fmt.Errorf("%w; got %d bytes", errBadIdempotencyKey, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", fmt.Errorf("%w; byte %d is 0x%02x", errBadIdempotencyKey, i+1, v[i])
		}
	}
	return v, nil
}

// unquoteSFString decodes an RFC 8941 sf-string, v[0] being '"'.
func unquoteSFString(v string) (string, error) {
	if len(v) > 2*maxIdempotencyKeyBytes+2 {
		return "", fmt.Errorf("%w; got %d bytes", errBadIdempotencyKey, len(v))
	}
	out := make([]byte, 0, len(v)-1)
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w; text after the closing quote", errBadIdempotencyKey)
			}
			if len(out) == 0 || len(out) > maxIdempotencyKeyBytes {
				return "", fmt.Errorf("%w; got %d bytes", errBadIdempotencyKey, len(out))
			}
			return string(out), nil
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w; only \\\" and \\\\ may be escaped", errBadIdempotencyKey)
			}
			out = append(out, v[i])
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w; byte 0x%02x", errBadIdempotencyKey, c)
		default:
			out = append(out, c)
		}
	}
	return "", fmt.Errorf("%w; the closing quote is missing", errBadIdempotencyKey)
}

// idemOutcome is what begin found for a key.
type idemOutcome int

const (
	idemNew      idemOutcome = iota // first use: apply, then finish (or abort)
	idemReplay                      // done with the same body: send the stored answer
	idemMismatch                    // the key was used with another body: 422
	idemInFlight                    // the first request is still being applied: 409
)

// idemEntry is one retained key, linked oldest first.
type idemEntry struct {
	key        string
	sum        [sha256.Size]byte
	atNs       int64 // when the first request began
	done       bool
	code       int
	reply      []byte // the first answer's body, never changed once stored
	cost       int64
	prev, next *idemEntry
}

// idemStore holds the keys of recent keyed batches with the SHA-256 of
// their body and, once applied, their answer. It is safe for concurrent
// use; requests hold its lock only to look up and record, never while a
// batch is applied.
//
// Bounds: a key is kept until retentionNs after its first request began
// (it is then forgotten at the next keyed request), at most maxKeys keys
// and maxBytes of keys and replies; past either, the oldest completed
// keys are dropped (counted in dropped). Keys in flight are never
// dropped: there are at most as many as open connections.
type idemStore struct {
	maxKeys     int
	retentionNs int64
	maxBytes    int64

	mu    sync.Mutex
	keys  map[string]*idemEntry
	list  idemEntry // sentinel: list.next is the oldest, list.prev the newest
	bytes int64

	replays prometheus.Counter
	dropped prometheus.Counter
	size    prometheus.GaugeFunc
}

func newIdemStore(maxKeys int, retentionNs, maxBytes int64) *idemStore {
	s := &idemStore{maxKeys: maxKeys, retentionNs: retentionNs, maxBytes: maxBytes, keys: map[string]*idemEntry{}}
	s.list.next, s.list.prev = &s.list, &s.list
	s.replays = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_events_replays_total",
		Help: "POST /v1/events requests whose Idempotency-Key and body matched an applied batch: answered with the stored reply, nothing applied."})
	s.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_events_idempotency_keys_dropped_total",
		Help: "Idempotency keys forgotten before events.idempotency_retention_s because events.idempotency_max_keys or the 32 MiB store was full (a retry of one is applied again)."})
	s.size = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "narwhal_events_idempotency_keys",
		Help: "Idempotency keys of POST /v1/events retained (applied or in flight)."}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.keys))
	})
	return s
}

func (s *idemStore) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.replays, s.dropped, s.size}
}

// begin looks key up at nowNs. For idemNew it records key as in flight
// and returns its entry, which the caller must finish or abort. For
// idemReplay it returns the stored status and body.
func (s *idemStore) begin(key string, sum [sha256.Size]byte, nowNs int64) (*idemEntry, int, []byte, idemOutcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(nowNs)
	if e, ok := s.keys[key]; ok {
		switch {
		case e.sum != sum:
			return nil, 0, nil, idemMismatch
		case !e.done:
			return nil, 0, nil, idemInFlight
		}
		return nil, e.code, e.reply, idemReplay
	}
	e := &idemEntry{key: key, sum: sum, atNs: nowNs, cost: int64(len(key)) + idempotencyEntryOverhead}
	e.prev, e.next = s.list.prev, &s.list
	s.list.prev.next = e
	s.list.prev = e
	s.keys[key] = e
	s.bytes += e.cost
	s.shrink()
	return e, 0, nil, idemNew
}

// finish stores the answer of e's batch.
func (s *idemStore) finish(e *idemEntry, code int, reply []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.done, e.code, e.reply = true, code, reply
	e.cost += int64(len(reply))
	s.bytes += int64(len(reply))
	if e.cost > s.maxBytes {
		s.remove(e) // larger than the whole store: not retained
		s.dropped.Inc()
		return
	}
	s.shrink()
}

// abort forgets e, whose batch did not finish (a panic in the handler),
// so that a retry is not answered 409 until the key expires.
func (s *idemStore) abort(e *idemEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[e.key] == e {
		s.remove(e)
	}
}

// expire forgets completed keys older than the retention, oldest first.
func (s *idemStore) expire(nowNs int64) {
	for e := s.list.next; e != &s.list; {
		next := e.next
		if nowNs-e.atNs <= s.retentionNs {
			break
		}
		if e.done {
			s.remove(e)
		}
		e = next
	}
}

// shrink drops the oldest completed keys while the store is over a bound.
func (s *idemStore) shrink() {
	for e := s.list.next; e != &s.list && (len(s.keys) > s.maxKeys || s.bytes > s.maxBytes); {
		next := e.next
		if e.done {
			s.remove(e)
			s.dropped.Inc()
		}
		e = next
	}
}

func (s *idemStore) remove(e *idemEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.keys, e.key)
	s.bytes -= e.cost
}
