package fuzz

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service"
	"github.com/narwhal-io/narwhal/service/servicetest"
)

const eventsNow = int64(1_800_000_000e9)

func newEventsIngest(rec *servicetest.Recorder) *service.Ingest {
	return service.NewIngest(rec, service.DefaultLimits(), 1<<20, 4096, func() int64 { return eventsNow })
}

// FuzzEventsDecode feeds arbitrary NDJSON bodies to the /v1/events ingest
// path. Properties: no panic; every non-blank line is either accepted or
// refused; the core sees exactly the accepted lines (a refused line changes
// nothing, checked by replaying only the accepted lines into a fresh core
// and by applying each refused line alone); every accepted line reads the
// same under encoding/json (the reference decoder); and a line the real
// core facade refuses leaves its whole state unchanged.
func FuzzEventsDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"offer_started","ts_ns":1800000000000000000}`,
		`{"type":"sized","ts_ns":1800000000000000000,"est_input_tokens":512,"requested_output_tokens":128}`,
		`{"type":"admitted","ts_ns":1800000000000000000,"engine":"e1","input_tokens":512}` + "\n" + `{"type":"admitted","ts_ns":1800000000000000000,"engine":"ghost","input_tokens":512}`,
		`{"type":"completed","ts_ns":1800000000000000000,"arrival_ns":1799999999000000000,"first_token_ns":1799999999500000000,"requested_output_tokens":10,"output_tokens":9}`,
		`{"type":"refused","ts_ns":NaN}`,
		`{"type":"refused","ts_ns":1.8e18}`,
		`{"type":"refused","ts_ns":1800000000000000000,"ts_ns":1}`,
		`{"type":"tokenized","ts_ns":1800000000000000000,"arrival_ns":1799999999000000000,"est_input_tokens":-1,"input_tokens":3}`,
		`{"engine":"e\u0031","type":"admitted","ts_ns":1800000000000000000,"input_tokens":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := servicetest.NewRecorder("e1", "e2")
		reply := newEventsIngest(rec).Apply(body)

		lines := bytes.Split(body, []byte("\n"))
		nonBlank := 0
		for _, l := range lines {
			if len(bytes.Trim(l, " \t\r")) > 0 {
				nonBlank++
			}
		}
		if reply.Accepted+reply.Refused != nonBlank {
			t.Fatalf("accepted %d + refused %d != %d non-blank lines", reply.Accepted, reply.Refused, nonBlank)
		}
		if rec.Len() != reply.Accepted {
			t.Fatalf("core saw %d calls for %d accepted lines", rec.Len(), reply.Accepted)
		}
		// Replaying only the accepted lines gives the same calls.
		var only [][]byte
		accepted := map[int]bool{}
		for _, r := range reply.AcceptedLines {
			for i := r[0]; i <= r[1]; i++ {
				accepted[i] = true
				only = append(only, lines[i-1])
			}
		}
		if len(accepted) != reply.Accepted {
			t.Fatalf("accepted_lines cover %d lines, accepted %d", len(accepted), reply.Accepted)
		}
		rec2 := servicetest.NewRecorder("e1", "e2")
		newEventsIngest(rec2).Apply(bytes.Join(only, []byte("\n")))
		if a, b := rec.Calls(), rec2.Calls(); !equalCalls(a, b) {
			t.Fatalf("refused lines changed the core: with them %v, without %v", a, b)
		}
		realCoreUnchangedByRefused(t, lines)
		for i, l := range lines {
			if accepted[i+1] {
				checkLineAgainstJSON(t, l)
				continue
			}
			rec3 := servicetest.NewRecorder("e1", "e2")
			if r := newEventsIngest(rec3).Apply(l); r.Accepted != 0 || rec3.Len() != 0 {
				// A line refused in the batch must be refused alone too
				// (no state in the batch makes a line valid).
				t.Fatalf("line %d %q refused in the batch but accepted alone", i+1, l)
			}
		}
	})
}

var (
	realOnce sync.Once
	realCore *core.Core
	realIn   *service.Ingest
)

// realCoreUnchangedByRefused applies each line alone to one shared real
// core facade; for every refused line, the core's whole /v1/state JSON must
// be byte for byte what it was before.
func realCoreUnchangedByRefused(t *testing.T, lines [][]byte) {
	t.Helper()
	realOnce.Do(func() {
		c, err := core.New(core.DefaultConfig(), core.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			panic(err)
		}
		for _, id := range []string{"e1", "e2"} {
			if err := c.UpsertEngine(controller.Engine{ID: id, Model: "facebook/opt-13b", GPU: "A100-80GB", Role: controller.RolePrefill, Live: true}); err != nil {
				panic(err)
			}
		}
		realCore = c
		realIn = service.NewIngest(c, service.DefaultLimits(), 1<<20, 4096, func() int64 { return eventsNow })
	})
	for _, l := range lines {
		before, _ := json.Marshal(realCore.State(eventsNow))
		r := realIn.Apply(l)
		if r.Refused == 0 {
			continue
		}
		if after, _ := json.Marshal(realCore.State(eventsNow)); !bytes.Equal(before, after) {
			t.Fatalf("refused line %q (%v) changed the core:\nbefore %s\nafter  %s", l, r.Errors, before, after)
		}
	}
}

func equalCalls(a, b []servicetest.Call) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkLineAgainstJSON: an accepted line must also be one JSON object of
// the schema for encoding/json, with the same values.
func checkLineAgainstJSON(t *testing.T, l []byte) {
	t.Helper()
	var ref struct {
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
	dec := json.NewDecoder(bytes.NewReader(l))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		t.Fatalf("accepted line %q is refused by encoding/json: %v", l, err)
	}
	if dec.More() {
		t.Fatalf("accepted line %q has trailing data for encoding/json", l)
	}
	var ev service.Event
	if err := service.NewDecoder().Decode(l, &ev); err != nil {
		t.Fatalf("accepted line %q fails to decode alone: %v", l, err)
	}
	arrival := int64(0)
	if ref.ArrivalNs != nil {
		arrival = *ref.ArrivalNs
	} else if ref.Type == "sized" {
		arrival = ref.TsNs
	}
	got := []any{ev.Type.String(), ev.TsNs, ev.ArrivalNs, ev.FirstTokenNs, ev.EstInputTokens, ev.InputTokens, ev.RequestedOutputTokens, ev.OutputTokens, ev.Engine}
	want := []any{ref.Type, ref.TsNs, arrival, ref.FirstTokenNs, ref.EstInputTokens, ref.InputTokens, ref.RequestedOutputTokens, ref.OutputTokens, ref.Engine}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("line %q: field %d: scanner %v, encoding/json %v", l, i, got[i], want[i])
		}
	}
	if strings.ContainsRune(ev.Engine, '\uFFFD') {
		t.Fatalf("line %q: accepted engine %q carries a replacement character", l, ev.Engine)
	}
}
