package service

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// maxInterned bounds the decoder's engine-name interner: engine ids are a
// small set, but a client sending random names must not grow it forever.
const maxInterned = 4096

// Decoder turns one NDJSON line into an Event. It is a small hand-rolled
// scanner for the fixed, flat schema: no reflection, and no allocation for
// a valid line whose engine name was seen before. A Decoder is not safe for
// concurrent use; the ingest handler keeps one per request via a pool.
type Decoder struct {
	engines map[string]string
}

// NewDecoder returns a decoder with an empty interner.
func NewDecoder() *Decoder { return &Decoder{engines: make(map[string]string)} }

// Decode parses line (one JSON object, surrounding whitespace allowed) into
// ev, replacing its contents. It checks syntax, field names, value types,
// duplicates, the type's required and allowed fields and that token counts
// are not negative; range checks against limits and the clock are
// Validate's. On error ev is unspecified.
func (d *Decoder) Decode(line []byte, ev *Event) error {
	*ev = Event{}
	s := scanner{b: line}
	s.ws()
	if !s.eat('{') {
		return s.malformed("expected '{'")
	}
	s.ws()
	if s.eat('}') {
		return fmt.Errorf("%w: type", ErrMissingField)
	}
	var typeRaw []byte
	for {
		s.ws()
		key, esc, ok := s.str()
		if !ok {
			return s.malformed("expected a quoted field name")
		}
		s.ws()
		if !s.eat(':') {
			return s.malformed("expected ':' after field name")
		}
		s.ws()
		if esc {
			// No schema name needs escapes; decode only to name it.
			var k string
			if json.Unmarshal(key, &k) != nil {
				return s.malformed("invalid escape in field name")
			}
			return fmt.Errorf("%w: %q", ErrUnknownField, k)
		}
		bit, dst := d.field(key, ev)
		if bit == 0 {
			return fmt.Errorf("%w: %q", ErrUnknownField, key[1:len(key)-1])
		}
		if ev.has&bit != 0 {
			return fmt.Errorf("%w: field %s appears twice", ErrMalformed, fieldName(bit))
		}
		ev.has |= bit
		switch bit {
		case fieldType, fieldEngine:
			val, vesc, ok := s.str()
			if !ok {
				if s.err != "" {
					return s.malformed(s.err)
				}
				return fmt.Errorf("%w: %s must be a string", ErrMalformed, fieldName(bit))
			}
			if bit == fieldType {
				if vesc {
					return fmt.Errorf("%w: %s", ErrUnknownType, val)
				}
				typeRaw = val[1 : len(val)-1]
			} else {
				name, err := d.engineName(val, vesc)
				if err != nil {
					return err
				}
				ev.Engine = name
			}
		default:
			v, msg := s.int()
			if msg != "" {
				return fmt.Errorf("%w: %s %s", ErrMalformed, fieldName(bit), msg)
			}
			*dst = v
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			break
		}
		return s.malformed("expected ',' or '}'")
	}
	s.ws()
	if s.i != len(s.b) {
		return s.malformed("unexpected data after the object")
	}
	if ev.has&fieldType == 0 {
		return fmt.Errorf("%w: type", ErrMissingField)
	}
	ev.Type = parseEventType(typeRaw)
	if ev.Type == EventInvalid {
		return fmt.Errorf("%w: %q (want one of offer_started, offer_abandoned, sized, tokenized, admitted, refused, first_token, completed, failed, expired)", ErrUnknownType, typeRaw)
	}
	if extra := ev.has &^ allowedFields[ev.Type]; extra != 0 {
		return fmt.Errorf("%w: %s is not a field of %s events", ErrUnknownField, fieldName(lowestBit(extra)), ev.Type)
	}
	if missing := requiredFields[ev.Type] &^ ev.has; missing != 0 {
		return fmt.Errorf("%w: %s events need %s", ErrMissingField, ev.Type, fieldName(lowestBit(missing)))
	}
	if ev.Type == EventSized && ev.has&fieldArrival == 0 {
		ev.ArrivalNs = ev.TsNs
	}
	return nil
}

func lowestBit(x uint16) uint16 { return x & -x }

// field maps a quoted key to its bit and integer destination.
func (d *Decoder) field(key []byte, ev *Event) (uint16, *int64) {
	switch string(key[1 : len(key)-1]) {
	case "type":
		return fieldType, nil
	case "ts_ns":
		return fieldTs, &ev.TsNs
	case "arrival_ns":
		return fieldArrival, &ev.ArrivalNs
	case "first_token_ns":
		return fieldFirstToken, &ev.FirstTokenNs
	case "est_input_tokens":
		return fieldEstInput, &ev.EstInputTokens
	case "input_tokens":
		return fieldInput, &ev.InputTokens
	case "requested_output_tokens":
		return fieldReqOutput, &ev.RequestedOutputTokens
	case "output_tokens":
		return fieldOutput, &ev.OutputTokens
	case "engine":
		return fieldEngine, nil
	}
	return 0, nil
}

// engineName returns the engine id of a quoted JSON string, interned.
func (d *Decoder) engineName(quoted []byte, esc bool) (string, error) {
	raw := quoted[1 : len(quoted)-1]
	if !esc {
		if name, ok := d.engines[string(raw)]; ok {
			return name, nil
		}
	}
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("%w: engine is not valid UTF-8", ErrMalformed)
	}
	var name string
	if esc {
		if json.Unmarshal(quoted, &name) != nil {
			return "", fmt.Errorf("%w: engine has an invalid escape", ErrMalformed)
		}
	} else {
		name = string(raw)
	}
	if name == "" {
		return "", fmt.Errorf("%w: engine must not be empty", ErrOutOfRange)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return "", fmt.Errorf("%w: engine %q holds a control or invalid character", ErrOutOfRange, name)
		}
	}
	if len(name) > 253 {
		return "", fmt.Errorf("%w: engine is %d bytes long, limit 253", ErrOutOfRange, len(name))
	}
	if !esc && len(d.engines) < maxInterned {
		d.engines[name] = name
	}
	return name, nil
}

// scanner walks one line.
type scanner struct {
	b   []byte
	i   int
	err string
}

func (s *scanner) malformed(msg string) error {
	if s.i < len(s.b) {
		return fmt.Errorf("%w: %s at byte %d", ErrMalformed, msg, s.i+1)
	}
	return fmt.Errorf("%w: %s at end of line", ErrMalformed, msg)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str scans a JSON string and returns it with its quotes; esc reports a
// backslash escape inside. It checks escapes and refuses raw control
// characters, as JSON does. ok is false if no string starts here or it is
// invalid (s.err then says why).
func (s *scanner) str() (quoted []byte, esc, ok bool) {
	s.err = ""
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i], esc, true
		case c == '\\':
			esc = true
			if s.i+1 >= len(s.b) {
				s.err = "unterminated string"
				return nil, false, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex4(s.b[s.i+2:s.i+6]) {
					s.err = "invalid \\u escape"
					return nil, false, false
				}
				s.i += 6
			default:
				s.err = "invalid escape"
				return nil, false, false
			}
		case c < 0x20:
			s.err = "control character in string"
			return nil, false, false
		default:
			s.i++
		}
	}
	s.err = "unterminated string"
	return nil, false, false
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// int scans a JSON number that must be an integer fitting int64. msg is
// empty on success and otherwise says what is wrong ("must be an integer",
// "is out of range", ...).
func (s *scanner) int() (int64, string) {
	start := s.i
	neg := s.eat('-')
	if s.i >= len(s.b) {
		return 0, "must be an integer"
	}
	c := s.b[s.i]
	if c < '0' || c > '9' {
		switch {
		case c == '"':
			return 0, "must be an integer, not a string"
		case c == 'n' || c == 'N' || c == 'I' || c == 'i':
			return 0, "must be an integer (NaN, Infinity and null are not numbers)"
		case c == 't' || c == 'f':
			return 0, "must be an integer, not a boolean"
		}
		return 0, "must be an integer"
	}
	if c == '0' && s.i+1 < len(s.b) && s.b[s.i+1] >= '0' && s.b[s.i+1] <= '9' {
		return 0, "has a leading zero"
	}
	// Accumulate as a negative number so that math.MinInt64 fits.
	var v int64
	const minInt = -1 << 63
	over := false
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := int64(s.b[s.i] - '0')
		if v < (minInt+d)/10 {
			over = true
		}
		v = v*10 - d
		s.i++
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			// Consume the rest of the number for an accurate message.
			s.i++
			for s.i < len(s.b) && (s.b[s.i] >= '0' && s.b[s.i] <= '9' || s.b[s.i] == '+' || s.b[s.i] == '-' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
				s.i++
			}
			return 0, fmt.Sprintf("must be an integer, got %s", s.b[start:s.i])
		}
	}
	if over || (!neg && v == minInt) {
		return 0, fmt.Sprintf("is out of range, got %s", s.b[start:s.i])
	}
	if neg {
		return v, ""
	}
	return -v, ""
}
