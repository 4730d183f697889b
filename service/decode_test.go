package service

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeValid(t *testing.T) {
	d := NewDecoder()
	f := func(line string, want Event) {
		t.Helper()
		var ev Event
		if err := d.Decode([]byte(line), &ev); err != nil {
			t.Fatalf("Decode(%s): unexpected error %v", line, err)
		}
		ev.has = 0
		if ev != want {
			t.Fatalf("Decode(%s): unexpected event; got %+v; want %+v", line, ev, want)
		}
	}
	f(`{"type":"offer_started","ts_ns":5}`, Event{Type: EventOfferStarted, TsNs: 5})
	f(` { "ts_ns" : 7 , "type" : "offer_abandoned" } `+"\r", Event{Type: EventOfferAbandoned, TsNs: 7})
	// sized: arrival defaults to ts.
	f(`{"type":"sized","ts_ns":10,"est_input_tokens":100,"requested_output_tokens":20}`,
		Event{Type: EventSized, TsNs: 10, ArrivalNs: 10, EstInputTokens: 100, RequestedOutputTokens: 20})
	f(`{"type":"sized","ts_ns":10,"arrival_ns":9,"est_input_tokens":0}`,
		Event{Type: EventSized, TsNs: 10, ArrivalNs: 9})
	f(`{"type":"tokenized","ts_ns":12,"arrival_ns":10,"est_input_tokens":100,"input_tokens":97,"requested_output_tokens":20}`,
		Event{Type: EventTokenized, TsNs: 12, ArrivalNs: 10, EstInputTokens: 100, InputTokens: 97, RequestedOutputTokens: 20})
	f(`{"type":"admitted","ts_ns":13,"engine":"gpu-0/e\u00e9","input_tokens":97}`,
		Event{Type: EventAdmitted, TsNs: 13, Engine: "gpu-0/eé", InputTokens: 97})
	f(`{"type":"admitted","ts_ns":13,"engine":"e1","input_tokens":97}`,
		Event{Type: EventAdmitted, TsNs: 13, Engine: "e1", InputTokens: 97})
	f(`{"type":"completed","ts_ns":20,"arrival_ns":10,"first_token_ns":15,"output_tokens":-0,"requested_output_tokens":9223372036854775807}`,
		Event{Type: EventCompleted, TsNs: 20, ArrivalNs: 10, FirstTokenNs: 15, RequestedOutputTokens: 9223372036854775807})
	f(`{"type":"failed","ts_ns":-9223372036854775808,"arrival_ns":10}`,
		Event{Type: EventFailed, TsNs: -9223372036854775808, ArrivalNs: 10})
}

func TestDecodeRefused(t *testing.T) {
	d := NewDecoder()
	f := func(line string, sentinel error, mention string) {
		t.Helper()
		var ev Event
		err := d.Decode([]byte(line), &ev)
		if !errors.Is(err, sentinel) {
			t.Fatalf("Decode(%s): unexpected error; got %v; want %v", line, err, sentinel)
		}
		if !strings.Contains(err.Error(), mention) {
			t.Fatalf("Decode(%s): error %q does not mention %q", line, err, mention)
		}
	}
	f(``, ErrMalformed, "expected '{'")
	f(`[]`, ErrMalformed, "expected '{'")
	f(`{"type":"refused","ts_ns":1`, ErrMalformed, "expected ',' or '}'")
	f(`{"type":"refused","ts_ns":1}x`, ErrMalformed, "after the object")
	f(`{"type":"refused","ts_ns":1}{}`, ErrMalformed, "after the object")
	f(`{"type":"refused","ts_ns":1,}`, ErrMalformed, "quoted field name")
	f(`{"type":"refused" "ts_ns":1}`, ErrMalformed, "expected ',' or '}'")
	f(`{type:"refused"}`, ErrMalformed, "quoted field name")
	f(`{"type":"refused","ts_ns":NaN}`, ErrMalformed, "NaN")
	f(`{"type":"refused","ts_ns":"NaN"}`, ErrMalformed, "not a string")
	f(`{"type":"refused","ts_ns":1.5}`, ErrMalformed, "must be an integer, got 1.5")
	f(`{"type":"refused","ts_ns":1e9}`, ErrMalformed, "must be an integer, got 1e9")
	f(`{"type":"refused","ts_ns":01}`, ErrMalformed, "leading zero")
	f(`{"type":"refused","ts_ns":9223372036854775808}`, ErrMalformed, "out of range")
	f(`{"type":"refused","ts_ns":-9223372036854775809}`, ErrMalformed, "out of range")
	f(`{"type":"refused","ts_ns":99999999999999999999999}`, ErrMalformed, "out of range")
	f(`{"type":"refused","ts_ns":null}`, ErrMalformed, "ts_ns")
	f(`{"type":"refused","ts_ns":true}`, ErrMalformed, "boolean")
	f(`{"type":"refused","ts_ns":-}`, ErrMalformed, "ts_ns")
	f(`{"type":1,"ts_ns":1}`, ErrMalformed, "type must be a string")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":1,"engine":"a`, ErrMalformed, "unterminated")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":1,"engine":"a\x"}`, ErrMalformed, "invalid escape")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":1,"engine":"a`+"\x01"+`"}`, ErrMalformed, "control character")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":1,"engine":"a`+"\xff"+`"}`, ErrMalformed, "UTF-8")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":1,"engine":""}`, ErrOutOfRange, "empty")
	f(`{"type":"refused","ts_ns":1,"ts_ns":2}`, ErrMalformed, "ts_ns appears twice")
	f(`{"type":"bogus","ts_ns":1}`, ErrUnknownType, `"bogus"`)
	f(`{"type":"Completed","ts_ns":1}`, ErrUnknownType, `"Completed"`)
	f(`{"ts_ns":1}`, ErrMissingField, "type")
	f(`{}`, ErrMissingField, "type")
	f(`{"type":"refused","ts":1}`, ErrUnknownField, `"ts"`)
	f(`{"type":"refused","t\u0073_ns":1}`, ErrUnknownField, `"ts_ns"`)
	f(`{"type":"refused","ts_ns":1,"engine":"e1"}`, ErrUnknownField, "engine is not a field of refused")
	f(`{"type":"sized","ts_ns":1}`, ErrMissingField, "est_input_tokens")
	f(`{"type":"admitted","ts_ns":1,"input_tokens":3}`, ErrMissingField, "engine")
	f(`{"type":"completed","ts_ns":1,"arrival_ns":1,"output_tokens":3}`, ErrMissingField, "first_token_ns")
}

// Every line the scanner accepts, encoding/json reads to the same values.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	lines := []string{
		`{"type":"completed","ts_ns":20,"arrival_ns":10,"first_token_ns":15,"output_tokens":7,"requested_output_tokens":8}`,
		`{"engine":"a\"b\\c\/d\u0041","type":"admitted","ts_ns":13,"input_tokens":97,"requested_output_tokens":0}`,
		"{\t\"type\" :\"sized\",\"ts_ns\": -0, \"est_input_tokens\":1}",
	}
	d := NewDecoder()
	for _, l := range lines {
		var ev Event
		if err := d.Decode([]byte(l), &ev); err != nil {
			t.Fatalf("Decode(%s): %v", l, err)
		}
		checkAgainstJSON(t, []byte(l), &ev)
	}
}

// jsonEvent is the schema as encoding/json reads it: the reference model
// for the hand-rolled scanner.
type jsonEvent struct {
	Type                  string `json:"type"`
	TsNs                  int64  `json:"ts_ns"`
	ArrivalNs             *int64 `json:"arrival_ns"`
	FirstTokenNs          int64  `json:"first_token_ns"`
	EstInputTokens        int64  `json:"est_input_tokens"`
	InputTokens           int64  `json:"input_tokens"`
	RequestedOutputTokens int64  `json:"requested_output_tokens"`
	OutputTokens          int64  `json:"output_tokens"`
	Engine                string `json:"engine"`
}

func checkAgainstJSON(t *testing.T, line []byte, ev *Event) {
	t.Helper()
	var j jsonEvent
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("scanner accepted %q but encoding/json refuses it: %v", line, err)
	}
	arrival := j.TsNs
	if j.ArrivalNs != nil {
		arrival = *j.ArrivalNs
	}
	if ev.Type != EventSized && j.ArrivalNs == nil {
		arrival = 0
	}
	want := Event{Type: parseEventType([]byte(j.Type)), TsNs: j.TsNs, ArrivalNs: arrival, FirstTokenNs: j.FirstTokenNs,
		EstInputTokens: j.EstInputTokens, InputTokens: j.InputTokens, RequestedOutputTokens: j.RequestedOutputTokens,
		OutputTokens: j.OutputTokens, Engine: j.Engine, has: ev.has}
	if *ev != want {
		t.Fatalf("line %q: scanner and encoding/json disagree; got %+v; want %+v", line, *ev, want)
	}
}

func TestDecodeAllocs(t *testing.T) {
	d := NewDecoder()
	lines := [][]byte{
		[]byte(`{"type":"admitted","ts_ns":13,"engine":"e1","input_tokens":97,"requested_output_tokens":5}`),
		[]byte(`{"type":"completed","ts_ns":20,"arrival_ns":10,"first_token_ns":15,"output_tokens":7,"requested_output_tokens":8}`),
	}
	var ev Event
	for _, l := range lines {
		if err := d.Decode(l, &ev); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, l := range lines {
			_ = d.Decode(l, &ev)
		}
	})
	if allocs != 0 {
		t.Fatalf("unexpected allocations per Decode of valid lines; got %v; want 0", allocs)
	}
}

func TestValidate(t *testing.T) {
	l := DefaultLimits()
	const now = int64(1_800_000_000e9)
	d := NewDecoder()
	f := func(line string, sentinel error, mention string) {
		t.Helper()
		var ev Event
		if err := d.Decode([]byte(line), &ev); err != nil {
			t.Fatalf("Decode(%s): %v", line, err)
		}
		err := l.Validate(&ev, now)
		if sentinel == nil {
			if err != nil {
				t.Fatalf("Validate(%s): unexpected error %v", line, err)
			}
			return
		}
		if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), mention) {
			t.Fatalf("Validate(%s): unexpected error; got %v; want %v mentioning %q", line, err, sentinel, mention)
		}
	}
	f(`{"type":"refused","ts_ns":1800000000000000000}`, nil, "")
	f(`{"type":"refused","ts_ns":1799999400000000000}`, nil, "")                                             // exactly 600 s old
	f(`{"type":"refused","ts_ns":1799999399999999999}`, ErrClockSkew, "ts_ns is 600.000000001s in the past") // 1 ns more
	f(`{"type":"refused","ts_ns":1800000030000000000}`, nil, "")
	f(`{"type":"refused","ts_ns":1800000030000000001}`, ErrClockSkew, "in the future")
	f(`{"type":"refused","ts_ns":0}`, ErrOutOfRange, "ts_ns must be > 0")
	f(`{"type":"refused","ts_ns":-9223372036854775808}`, ErrOutOfRange, "ts_ns must be > 0")
	f(`{"type":"sized","ts_ns":1800000000000000000,"est_input_tokens":-1}`, ErrOutOfRange, "est_input_tokens must be >= 0, got -1")
	f(`{"type":"sized","ts_ns":1800000000000000000,"est_input_tokens":16777215}`, nil, "")
	f(`{"type":"sized","ts_ns":1800000000000000000,"est_input_tokens":16777216}`, ErrOutOfRange, "est_input_tokens must be <= 16777215")
	f(`{"type":"sized","ts_ns":1800000000000000000,"est_input_tokens":1,"requested_output_tokens":-5}`, ErrOutOfRange, "requested_output_tokens must be >= 0")
	f(`{"type":"completed","ts_ns":1800000000000000000,"arrival_ns":1800000000000000001,"first_token_ns":0,"output_tokens":0}`, ErrOutOfRange, "arrival_ns must be <= ts_ns")
	f(`{"type":"failed","ts_ns":1800000000000000000,"arrival_ns":-9223372036854775808}`, ErrOutOfRange, "arrival_ns must be > 0")
	f(`{"type":"failed","ts_ns":1800000000000000000,"arrival_ns":1799996399999999999}`, ErrOutOfRange, "arrival_ns is 3600.000000001s before ts_ns")
	f(`{"type":"completed","ts_ns":1800000000000000000,"arrival_ns":1799999999000000000,"first_token_ns":1799999998000000000,"output_tokens":3}`, ErrOutOfRange, "first_token_ns must be 0 (none) or within")
	f(`{"type":"completed","ts_ns":1800000000000000000,"arrival_ns":1799999999000000000,"first_token_ns":0,"output_tokens":3}`, ErrOutOfRange, "first_token_ns must be set")
	f(`{"type":"completed","ts_ns":1800000000000000000,"arrival_ns":1799999999000000000,"first_token_ns":1799999999500000000,"output_tokens":3}`, nil, "")
}
