package benchmarks

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/narwhal-io/narwhal/core/controller"
)

// oneDayJournal writes a day of 1 s decisions (86,400 records with their
// gates) into dir: rotated as the journal rotates them (32 MiB segments,
// 8 kept) when rotated, else as one file (the pre-issue-16 layout), and a
// checkpoint at the last record.
func oneDayJournal(b *testing.B, dir string, rotated bool) {
	const n = 86400
	d := controller.Decision{Basis: "demand", Action: controller.ActionHold, Reason: "both phases within target pressure"}
	for _, g := range controller.Gates {
		d.Gates = append(d.Gates, controller.GateResult{Gate: g, Pass: true, Value: 0.123456, Limit: 1.5, Detail: "seconds since the last move"})
	}
	var f *os.File
	var w *bufio.Writer
	var size int64
	open := func(name string) {
		var err error
		if f, err = os.Create(filepath.Join(dir, name)); err != nil {
			b.Fatal(err)
		}
		w, size = bufio.NewWriterSize(f, 1<<20), 0
	}
	closeF := func() { w.Flush(); f.Close() }
	first := uint64(1)
	open("journal.jsonl")
	var segs []string
	for s := uint64(1); s <= n; s++ {
		d.Seq, d.AtNs = s, int64(s)*1e9
		line, _ := json.Marshal(&d)
		if rotated && size+int64(len(line))+1 > 32<<20 {
			closeF()
			seg := fmt.Sprintf("journal-%020d.jsonl", first)
			os.Rename(filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, seg))
			segs = append(segs, seg)
			if len(segs) > 8 {
				os.Remove(filepath.Join(dir, segs[0]))
				segs = segs[1:]
			}
			open("journal.jsonl")
			first = s
		}
		w.Write(line)
		w.WriteByte('\n')
		size += int64(len(line)) + 1
	}
	closeF()
	if err := controller.SaveState(filepath.Join(dir, "state.json"), controller.PersistedState{Version: 1, Seq: n}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJournalStartupOneDay: the journal's startup read after a day
// of 1 s steps (issue 16 item 6: 5.8 s at 10598f3). OpenJournal reads the
// checkpoint and the active segment only; the baseline is LoadJournal
// over the same day in one file, as startup did before.
func BenchmarkJournalStartupOneDay(b *testing.B) {
	b.Run("wal-open", func(b *testing.B) {
		dir := b.TempDir()
		oneDayJournal(b, dir, true)
		for b.Loop() {
			j, rec, err := controller.OpenJournal(dir, controller.JournalOptions{})
			if err != nil || rec.State.Seq != 86400 || len(rec.History) != 1024 {
				b.Fatalf("open: %v seq %d history %d", err, rec.State.Seq, len(rec.History))
			}
			j.Close()
		}
	})
	b.Run("load-whole-file-baseline", func(b *testing.B) {
		dir := b.TempDir()
		oneDayJournal(b, dir, false)
		for b.Loop() {
			ds, err := controller.LoadJournal(filepath.Join(dir, "journal.jsonl"), 1024)
			if err != nil || len(ds) != 1024 {
				b.Fatalf("load: %v %d", err, len(ds))
			}
		}
	})
}
