package fuzz

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// FuzzJournalRecovery feeds arbitrary bytes to the journal's recovery as
// its active file (a disk that corrupted or cut records): opening must
// never panic, and the state it recovers must validate and restore into a
// controller, so that a damaged record costs that record, not the start.
func FuzzJournalRecovery(f *testing.F) {
	f.Add([]byte(`{"seq":1,"at_ns":1795000000000000000,"action":"move","moves":[{"engine_id":"e1","from":"decode","to":"prefill","decision_seq":1,"at_ns":1795000000000000000}],"direction":"decode_to_prefill"}` + "\n" +
		`{"seq":2,"at_ns":1795000001000000000,"action":"hold","confirmations":2,"direction":"prefill_to_decode"}` + "\n"))
	f.Add([]byte(`{"seq":3,"moves":[{"engine_id":"","to":"sideways","at_ns":-5}]}` + "\n"))
	f.Add([]byte(`{"seq":3,"moves":[{"engine_id":"","to":"prefill","at_ns":5}]}` + "\n"))
	f.Add([]byte(`{"seq":18446744073709551615,"action":"hold"}` + "\n"))
	f.Add([]byte(`{"seq":4,"action":"hold"` + "\n" + `{"seq":5}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, controller.JournalActive), data, 0o644); err != nil {
			t.Fatal(err)
		}
		j, rec, err := controller.OpenJournal(dir, controller.JournalOptions{
			NowNs: func() int64 { return fuzzBase }, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer j.Close()
		if err := rec.State.Validate(0); err != nil {
			t.Fatalf("recovered state does not validate: %v (%+v)", err, rec.State)
		}
		c, err := controller.New(controller.DefaultConfig(), controller.Timing{StepNs: 1e9, ShortNs: 10e9, LongNs: 60e9, TTFTSLOS: 1.5, TPOTSLOS: 0.1}, controller.BuiltinProfiles())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Restore(rec.State); err != nil {
			t.Fatalf("restore of the recovered state: %v", err)
		}
	})
}
