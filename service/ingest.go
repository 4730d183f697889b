package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/narwhal-io/narwhal/core/wire"
)

// maxListedErrors bounds the refusals a reply lists one by one; the
// counts always cover every line.
const maxListedErrors = 1000

// IngestReply is the JSON body of every POST /v1/events answer that got as
// far as reading the body.
type IngestReply struct {
	// Accepted and Refused count non-blank lines.
	Accepted int `json:"accepted"`
	Refused  int `json:"refused"`
	// AcceptedLines lists the accepted lines as inclusive 1-based
	// [first, last] ranges.
	AcceptedLines [][2]int `json:"accepted_lines"`
	// Errors says why each refused line was refused (the first 1000).
	Errors []LineError `json:"errors"`
	// ErrorsTruncated is set when more lines were refused than listed.
	ErrorsTruncated bool `json:"errors_truncated,omitempty"`
}

// LineError is one refused line.
type LineError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// errorReply is the body of a request refused as a whole.
type errorReply struct {
	Error string `json:"error"`
}

// Ingest applies NDJSON event batches to a core. It is safe for
// concurrent use; each request borrows a decoder and a buffer from pools.
type Ingest struct {
	core    EventSink
	limits  Limits
	maxBody int64
	maxLine int
	now     func() int64
	metrics *httpMetrics
	// idem holds the Idempotency-Key store; nil ignores the header.
	idem     *idemStore
	bufs     sync.Pool
	decoders sync.Pool
}

// NewIngest returns the /v1/events handler logic on its own (no auth, no
// registered metrics): bodies up to maxBody bytes, lines up to maxLine,
// timestamps judged against now (Unix ns). Idempotency keys are honoured
// with the defaults of events.idempotency_max_keys and
// events.idempotency_retention_s.
func NewIngest(c EventSink, limits Limits, maxBody, maxLine int64, now func() int64) *Ingest {
	d := DefaultConfig().Events
	store := newIdemStore(d.IdempotencyMaxKeys, idempotencyRetentionNs(d.IdempotencyRetentionS, limits), idempotencyMaxBytes)
	return newIngest(c, limits, maxBody, maxLine, now, newHTTPMetrics(), store)
}

func newIngest(c EventSink, limits Limits, maxBody, maxLine int64, now func() int64, m *httpMetrics, idem *idemStore) *Ingest {
	in := &Ingest{core: c, limits: limits, maxBody: maxBody, maxLine: int(maxLine), now: now, metrics: m, idem: idem}
	in.bufs.New = func() any { return new(bytes.Buffer) }
	in.decoders.New = func() any { return NewDecoder() }
	return in
}

// ServeHTTP handles POST /v1/events (authentication is the caller's).
func (in *Ingest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorReply{"method " + r.Method + " not allowed; POST newline-delimited JSON events"})
		return
	}
	var key string
	keyed := false
	if vals, ok := r.Header[idempotencyHeader]; ok && in.idem != nil {
		var err error
		if key, err = parseIdempotencyKey(vals); err != nil {
			writeJSON(w, http.StatusBadRequest, errorReply{err.Error() + "; nothing was applied"})
			return
		}
		keyed = true
	}
	buf := in.bufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 {
			buf.Reset()
			in.bufs.Put(buf)
		}
	}()
	buf.Reset()
	n, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, in.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorReply{fmt.Sprintf("body exceeds %d bytes; nothing was applied", in.maxBody)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorReply{fmt.Sprintf("reading body: %v; nothing was applied", err)})
		return
	}
	if n > in.maxBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorReply{fmt.Sprintf("body exceeds %d bytes (http.max_body_bytes); nothing was applied", in.maxBody)})
		return
	}
	if keyed {
		in.serveKeyed(w, key, buf.Bytes())
		return
	}
	reply := in.Apply(buf.Bytes())
	writeJSON(w, replyCode(reply), reply)
}

func replyCode(reply IngestReply) int {
	if reply.Refused > 0 {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

// serveKeyed answers a batch carrying an Idempotency-Key: the first
// request with the key applies it and stores its answer; a repeat with
// the same body gets that answer again, marked Idempotent-Replayed; a
// repeat with another body gets 422 and a repeat while the first is
// being applied 409, and neither applies anything.
func (in *Ingest) serveKeyed(w http.ResponseWriter, key string, body []byte) {
	nowNs := in.now()
	e, code, stored, outcome := in.idem.begin(key, sha256.Sum256(body), nowNs)
	switch outcome {
	case idemReplay:
		in.idem.replays.Inc()
		w.Header().Set(replayedHeader, "true")
		writeRawJSON(w, code, stored)
		return
	case idemMismatch:
		writeJSON(w, http.StatusUnprocessableEntity, errorReply{"Idempotency-Key was already used with a different body; nothing was applied (use a new key for a new batch)"})
		return
	case idemInFlight:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusConflict, errorReply{"a request with this Idempotency-Key is still being applied; nothing was applied, retry shortly"})
		return
	}
	finished := false
	defer func() {
		if !finished {
			in.idem.abort(e)
		}
	}()
	// The key's age and the events' age run from the same instant, so a
	// retry after the key expired finds events.max_past_s passed too
	// (with the default retention).
	reply := in.apply(body, nowNs)
	code = replyCode(reply)
	out := encodeJSON(reply)
	in.idem.finish(e, code, out)
	finished = true
	writeRawJSON(w, code, out)
}

// Apply decodes, validates and applies body line by line at the server's
// current time. A refused line changes nothing; the others are applied in
// order.
func (in *Ingest) Apply(body []byte) IngestReply {
	return in.apply(body, in.now())
}

func (in *Ingest) apply(body []byte, nowNs int64) IngestReply {
	dec := in.decoders.Get().(*Decoder)
	defer in.decoders.Put(dec)
	var (
		reply  IngestReply
		ev     Event
		counts [numEventTypes][2]int
		runLo  int
	)
	closeRun := func(line int) {
		if runLo > 0 {
			reply.AcceptedLines = append(reply.AcceptedLines, [2]int{runLo, line - 1})
			runLo = 0
		}
	}
	line := 0
	for len(body) > 0 {
		var l []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			l, body = body[:i], body[i+1:]
		} else {
			l, body = body, nil
		}
		line++
		if isBlank(l) {
			closeRun(line)
			continue
		}
		err := in.line(dec, l, &ev, nowNs)
		if err == nil {
			counts[ev.Type][0]++
			reply.Accepted++
			if runLo == 0 {
				runLo = line
			}
			continue
		}
		closeRun(line)
		counts[ev.Type][1]++
		reply.Refused++
		if len(reply.Errors) < maxListedErrors {
			reply.Errors = append(reply.Errors, LineError{Line: line, Error: err.Error()})
		} else {
			reply.ErrorsTruncated = true
		}
	}
	closeRun(line + 1)
	for t := range counts {
		for k, n := range counts[t] {
			if n > 0 {
				in.metrics.eventCounters[t][k].Add(float64(n))
			}
		}
	}
	if reply.AcceptedLines == nil {
		reply.AcceptedLines = [][2]int{}
	}
	if reply.Errors == nil {
		reply.Errors = []LineError{}
	}
	return reply
}

func (in *Ingest) line(dec *Decoder, l []byte, ev *Event, nowNs int64) error {
	if len(l) > in.maxLine {
		*ev = Event{}
		return fmt.Errorf("%w: %d bytes, limit %d (http.max_line_bytes)", ErrLineTooLong, len(l), in.maxLine)
	}
	if err := dec.Decode(l, ev); err != nil {
		// ev.Type is set only when the line named a known type (then the
		// refusal is counted under it), else EventInvalid.
		return err
	}
	if err := in.limits.Validate(ev, nowNs); err != nil {
		return err
	}
	if err := applyEvent(in.core, ev); err != nil {
		if ev.Type == EventAdmitted {
			return fmt.Errorf("%w: engine %q: %w", ErrRejected, ev.Engine, err)
		}
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return nil
}

func isBlank(l []byte) bool {
	for _, c := range l {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// applyEvent makes the one core call for ev.
func applyEvent(c EventSink, ev *Event) error {
	switch ev.Type {
	case EventOfferStarted:
		c.OfferStarted(ev.TsNs)
		return nil
	case EventOfferAbandoned:
		return c.OfferAbandoned(ev.TsNs)
	case EventSized:
		return c.OfferSized(ev.ArrivalNs, ev.EstInputTokens, ev.RequestedOutputTokens)
	case EventTokenized:
		return c.Tokenized(ev.ArrivalNs, ev.EstInputTokens, ev.InputTokens, ev.RequestedOutputTokens)
	case EventAdmitted:
		return c.Admitted(ev.TsNs, ev.Engine, ev.InputTokens, ev.RequestedOutputTokens)
	case EventRefused:
		if ev.has&fieldArrival != 0 { // refused after its sized event
			return c.RefusedSized(ev.TsNs, ev.ArrivalNs)
		}
		return c.Refused(ev.TsNs)
	case EventFirstToken:
		return c.FirstToken(ev.TsNs, ev.ArrivalNs)
	case EventCompleted:
		return c.Completed(ev.TsNs, ev.ArrivalNs, ev.FirstTokenNs, ev.RequestedOutputTokens, ev.OutputTokens)
	case EventFailed:
		return c.Failed(ev.TsNs, ev.ArrivalNs, ev.FirstTokenNs)
	case EventExpired:
		return c.Expired(ev.TsNs, ev.ArrivalNs, ev.FirstTokenNs)
	}
	return fmt.Errorf("BUG: event type %d reached apply", ev.Type)
}

// bearer guards writes with the core's one bearer-token check
// (wire.Token: hashed, constant-time) against each token its source
// accepts now (authtokens.go), answering in the service's JSON.
type bearer struct{ src *tokenSource }

func newBearer(src *tokenSource) *bearer { return &bearer{src: src} }

func (b *bearer) wrap(h http.Handler) http.Handler {
	if b.src.open() { // a file always holds a token: open stays open
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch err := b.src.check(r.Header.Get("Authorization")); {
		case errors.Is(err, wire.ErrNoToken):
			w.Header().Set("WWW-Authenticate", `Bearer realm="narwhal"`)
			writeJSON(w, http.StatusUnauthorized, errorReply{"missing bearer token: send Authorization: Bearer <token>; nothing was applied"})
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="narwhal", error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, errorReply{"wrong bearer token; nothing was applied"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// encodeJSON is what writeJSON writes for v.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.Clone(b.Bytes()) // retained by the store: no spare capacity
}

// writeRawJSON writes body, a JSON document from encodeJSON.
func writeRawJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
