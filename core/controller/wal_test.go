package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// faultFS is the OS file layer with injectable faults: a full disk (a
// write stores half its bytes, then ENOSPC), a rename that fails (the
// process "dies" between the journal write and the checkpoint), and a
// log of the operations.
type faultFS struct {
	OSFS
	mu         sync.Mutex
	full       bool
	failRename bool
	// failTrunc: opens that truncate (a rotation's new active segment)
	// fail with EMFILE while set.
	failTrunc bool
	ops       []string
}

func (f *faultFS) op(s string) {
	f.mu.Lock()
	f.ops = append(f.ops, s)
	f.mu.Unlock()
}

func (f *faultFS) setFull(v bool) { f.mu.Lock(); f.full = v; f.mu.Unlock() }

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f.op("open " + filepath.Base(name))
	f.mu.Lock()
	failTrunc := f.failTrunc
	f.mu.Unlock()
	if failTrunc && flag&os.O_TRUNC != 0 {
		return nil, fmt.Errorf("open %s: %w", name, syscall.EMFILE)
	}
	fl, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: fl, fs: f}, nil
}

func (f *faultFS) Rename(o, n string) error {
	f.mu.Lock()
	fail := f.failRename
	f.mu.Unlock()
	if fail {
		return fmt.Errorf("rename %s: %w", o, syscall.EIO)
	}
	f.op("rename " + filepath.Base(n))
	return f.OSFS.Rename(o, n)
}

func (f *faultFS) SyncDir(d string) error { f.op("syncdir"); return f.OSFS.SyncDir(d) }

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	full := f.fs.full
	f.fs.mu.Unlock()
	if full {
		n, _ := f.File.WriteAt(b[:len(b)/2], off)
		return n, fmt.Errorf("write: %w", syscall.ENOSPC)
	}
	return f.File.WriteAt(b, off)
}

// rec is a journal record at seq; with a move of engine to role.
func rec(seq uint64, engine string, to Role) *Decision {
	d := &Decision{Seq: seq, AtNs: int64(seq) * sec, Basis: "demand", Action: ActionHold}
	if engine != "" {
		d.Action, d.Direction = ActionMove, "decode_to_prefill"
		if to == RoleDecode {
			d.Direction = "prefill_to_decode"
		}
		d.Moves = []Move{{EngineID: engine, From: RoleDecode, To: to, DecisionSeq: seq, AtNs: d.AtNs}}
	}
	return d
}

func openJ(t *testing.T, dir string, o JournalOptions) (*Journal, Recovered) {
	t.Helper()
	o.NowNs = func() int64 { return 1000 * sec }
	j, r, err := OpenJournal(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return j, r
}

func seqs(ds []Decision) []uint64 {
	var out []uint64
	for _, d := range ds {
		out = append(out, d.Seq)
	}
	return out
}

// Issue 16 defect 8: a torn last line (kill -9 mid-write) is cut off when
// the journal opens, so the next record starts a line of its own and
// survives the next load.
func TestJournalTornTailIsTruncatedOnOpen(t *testing.T) {
	dir := t.TempDir()
	j, _ := openJ(t, dir, JournalOptions{})
	for s := uint64(1); s <= 3; s++ {
		if err := j.Write(rec(s, "", 0)); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	path := filepath.Join(dir, JournalActive)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"at_ns":40000`)
	f.Close()

	j, r := openJ(t, dir, JournalOptions{})
	if r.Truncated != int64(len(`{"seq":4,"at_ns":40000`)) {
		t.Fatalf("truncated %d bytes; want the fragment's %d", r.Truncated, len(`{"seq":4,"at_ns":40000`))
	}
	if err := j.Write(rec(4, "e1", RolePrefill)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, r = openJ(t, dir, JournalOptions{})
	if got := fmt.Sprint(seqs(r.History)); got != "[1 2 3 4]" {
		t.Fatalf("records after reopen %s; want [1 2 3 4]", got)
	}
	if r.State.Seq != 4 || len(r.State.Engines) != 1 || r.State.Engines[0].Role != RolePrefill {
		t.Fatalf("replayed state %+v; want seq 4 with e1 in prefill", r.State)
	}
}

// A journal written before issue 16 may hold a fragment glued to the
// next record in its middle: opening skips that line and keeps the
// records after it (only a tail is ever cut).
func TestJournalKeepsRecordsAfterAnOldGluedLine(t *testing.T) {
	dir := t.TempDir()
	line := func(d *Decision) string { b, _ := json.Marshal(d); return string(b) + "\n" }
	glued := `{"seq":2,"at_ns` + line(rec(3, "", 0))
	os.WriteFile(filepath.Join(dir, JournalActive), []byte(line(rec(1, "", 0))+glued+line(rec(4, "e1", RolePrefill))+`{"seq":5,`), 0o644)
	_, r := openJ(t, dir, JournalOptions{})
	if got := fmt.Sprint(seqs(r.History)); got != "[1 4]" || r.State.Seq != 4 || r.Truncated != int64(len(`{"seq":5,`)) {
		t.Fatalf("history %s, state seq %d, truncated %d; want [1 4], 4 and only the torn tail", got, r.State.Seq, r.Truncated)
	}
}

// Issue 16 defect 7: after ENOSPC the journal leaves no partial record,
// counts the error, reports unhealthy, keeps the record and writes it
// (in order) once space is back.
func TestJournalWriteErrorRecovers(t *testing.T) {
	dir := t.TempDir()
	fsys := &faultFS{}
	j, _ := openJ(t, dir, JournalOptions{FS: fsys, RetryEvery: 10 * time.Millisecond})
	defer j.Close()
	if err := j.Write(rec(1, "", 0)); err != nil {
		t.Fatal(err)
	}
	size1, _ := os.Stat(filepath.Join(dir, JournalActive))
	fsys.setFull(true)
	if err := j.Write(rec(2, "e1", RolePrefill)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v; want ENOSPC", err)
	}
	if j.Healthy() == nil {
		t.Fatal("Healthy is nil while writes fail")
	}
	if n := counterValue(j.writeErrs); n < 1 {
		t.Fatalf("narwhal_journal_write_errors_total %v; want >= 1", n)
	}
	if st, _ := os.Stat(filepath.Join(dir, JournalActive)); st.Size() != size1.Size() {
		t.Fatalf("journal is %d bytes after a failed write; want %d (no partial record)", st.Size(), size1.Size())
	}
	if j.Durable() != 1 {
		t.Fatalf("durable %d; want 1", j.Durable())
	}
	fsys.setFull(false)
	deadline := time.Now().Add(5 * time.Second)
	for j.Durable() != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if j.Durable() != 2 || j.Healthy() != nil {
		t.Fatalf("after space returned: durable %d healthy %v; want 2, nil (retried without a new write)", j.Durable(), j.Healthy())
	}
	if err := j.Write(rec(3, "", 0)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, r := openJ(t, dir, JournalOptions{})
	if got := fmt.Sprint(seqs(r.History)); got != "[1 2 3]" {
		t.Fatalf("records %s; want [1 2 3]", got)
	}
}

// Issue 16 defect 9: the journal is the write-ahead log and state.json a
// checkpoint carrying its sequence. A crash after the journal write and
// before the checkpoint (here: the checkpoint's rename fails and the
// process is abandoned) loses nothing: the reopened state is the
// checkpoint plus the record after it.
func TestStateAndJournalAgreeAfterCrashBetweenWrites(t *testing.T) {
	dir := t.TempDir()
	fsys := &faultFS{}
	j, _ := openJ(t, dir, JournalOptions{FS: fsys, RetryEvery: time.Hour})
	t.Cleanup(func() { j.Close() })
	var mu sync.Mutex
	st := PersistedState{Version: stateVersion, Engines: []PersistedEngine{{ID: "e1", Role: RoleDecode}}}
	j.SetStateSource(func() PersistedState { mu.Lock(); defer mu.Unlock(); return st })
	step := func(d *Decision) {
		if err := j.Write(d); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		st.Apply(d)
		mu.Unlock()
	}
	step(rec(1, "", 0))
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	fsys.mu.Lock()
	fsys.failRename = true
	fsys.mu.Unlock()
	step(rec(2, "e1", RolePrefill))
	if err := j.Checkpoint(); err == nil {
		t.Fatal("checkpoint succeeded through a failing rename")
	}
	// state.json on disk is still at seq 1: the two files disagree.
	onDisk, err := LoadState(filepath.Join(dir, StateCheckpoint))
	if err != nil || onDisk.Seq != 1 || onDisk.Engines[0].Role != RoleDecode {
		t.Fatalf("checkpoint on disk %+v %v; want seq 1 with e1 in decode", onDisk, err)
	}
	// "Restart" without Close (a kill): the move is recovered.
	_, r := openJ(t, dir, JournalOptions{})
	if !r.FromCheckpoint || r.Replayed != 1 {
		t.Fatalf("recovered from checkpoint %v with %d replayed; want true and 1", r.FromCheckpoint, r.Replayed)
	}
	if r.State.Seq != 2 || len(r.State.Engines) != 1 || r.State.Engines[0].Role != RolePrefill || r.State.Engines[0].LastMoveNs != 2*sec || r.State.LastMoveNs != 2*sec {
		t.Fatalf("recovered state %+v; want seq 2, e1 in prefill moved at 2 s", r.State)
	}
}

// The checkpoint is never saved ahead of the durable journal (else a crash
// while writes fail would leave state.json with moves the journal lacks).
func TestCheckpointNeverAheadOfJournal(t *testing.T) {
	dir := t.TempDir()
	fsys := &faultFS{}
	j, _ := openJ(t, dir, JournalOptions{FS: fsys, RetryEvery: time.Hour})
	defer j.Close()
	var mu sync.Mutex
	st := PersistedState{Version: stateVersion}
	j.SetStateSource(func() PersistedState { mu.Lock(); defer mu.Unlock(); return st })
	fsys.setFull(true)
	d := rec(1, "e1", RolePrefill)
	_ = j.Write(d)
	mu.Lock()
	st.Apply(d)
	mu.Unlock()
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateCheckpoint)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state.json written for seq 1 while the journal holds none: %v", err)
	}
}

// Issue 16 defect 6: the journal rotates by size, keeps KeepSegments
// rotated files, and startup opens only the segments it needs (the
// checkpoint covers the rest).
func TestJournalRotatesAndStartupReadsOnlyWhatItNeeds(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	st := PersistedState{Version: stateVersion}
	// A hold record is about 1.7 KB: four records a segment.
	o := JournalOptions{MaxBytes: 8 << 10, Keep: 3, Ring: 1, RetryEvery: time.Hour}
	j, _ := openJ(t, dir, o)
	j.SetStateSource(func() PersistedState { mu.Lock(); defer mu.Unlock(); return st })
	for s := uint64(1); s <= 200; s++ {
		d := rec(s, "", 0)
		if s%50 == 0 {
			d = rec(s, fmt.Sprintf("e%d", s), RolePrefill)
		}
		if err := j.Write(d); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		st.Apply(d)
		mu.Unlock()
		if err := j.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	segs, _ := j.rotated()
	if len(segs) != 3 {
		t.Fatalf("%d rotated segments kept; want 3", len(segs))
	}
	if n := counterValue(j.rotations); n < 40 {
		t.Fatalf("%v rotations of an 8 KiB segment over 200 records; want >= 40", n)
	}
	fsys := &faultFS{}
	o.FS = fsys
	_, r := openJ(t, dir, o)
	if got := fmt.Sprint(seqs(r.History)); got != "[200]" {
		t.Fatalf("history %s; want the last one", got)
	}
	if r.State.Seq != 200 || len(r.State.Engines) != 4 {
		t.Fatalf("state seq %d with %d engines; want 200 and 4", r.State.Seq, len(r.State.Engines))
	}
	for _, op := range fsys.ops {
		if strings.HasPrefix(op, "open "+segPrefix) {
			t.Fatalf("startup opened rotated segment (%s) although the active one covers checkpoint and ring; ops %v", op, fsys.ops)
		}
	}
	// A ring of 6 needs the previous segment and no more.
	fsys.ops = nil
	o.Ring = 6
	_, r = openJ(t, dir, o)
	if got := fmt.Sprint(seqs(r.History)); got != "[195 196 197 198 199 200]" {
		t.Fatalf("history %s; want the last 6", got)
	}
	opened := 0
	for _, op := range fsys.ops {
		if strings.HasPrefix(op, "open "+segPrefix) {
			opened++
		}
	}
	if opened != 1 {
		t.Fatalf("startup opened %d rotated segments for a ring of 6; want 1 (ops %v)", opened, fsys.ops)
	}
}

// Issue 16 defect 10: saved state is validated on load; an empty or torn
// state.json falls back to the journal; the rename is followed by a
// directory fsync.
func TestSavedStateIsValidatedAndTornStateFallsBackToJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateCheckpoint)
	for name, st := range map[string]PersistedState{
		"last move in the future": {Version: 1, Seq: 3, Engines: []PersistedEngine{{ID: "e1", Role: RolePrefill, LastMoveNs: math.MaxInt64}}},
		"cooldown a day ahead":    {Version: 1, Seq: 3, LastMoveNs: 1000*sec + 24*3600*sec + 1},
		"unknown direction":       {Version: 1, Seq: 3, LastMoveDir: 7},
		"sequence about to wrap":  {Version: 1, Seq: math.MaxUint64},
		"engine without a role":   {Version: 1, Seq: 3, Engines: []PersistedEngine{{ID: "e1"}}},
	} {
		if err := SaveState(path, st); err != nil {
			t.Fatal(err)
		}
		_, _, err := OpenJournal(dir, JournalOptions{NowNs: func() int64 { return 1000 * sec }})
		if !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%s: open gave %v; want ErrInvalidState", name, err)
		}
	}
	// Ten minutes ahead is a clock that stepped back between runs (or a
	// leader's clock ahead): kept, and read as now at the first step.
	ahead := PersistedState{Version: 1, Seq: 3, LastMoveNs: 1600 * sec, Engines: []PersistedEngine{{ID: "e1", Role: RolePrefill, LastMoveNs: 1600 * sec}}}
	if err := SaveState(path, ahead); err != nil {
		t.Fatal(err)
	}
	if _, r := openJ(t, dir, JournalOptions{NowNs: func() int64 { return 1000 * sec }}); !r.FromCheckpoint || r.State.LastMoveNs != 1600*sec {
		t.Fatalf("a checkpoint ten minutes ahead: recovered %+v (from checkpoint %v); want it kept", r.State, r.FromCheckpoint)
	}
	os.WriteFile(path, []byte(`{"version":1,"engines":[{"id":"e1","role":"sideways"}]}`), 0o644)
	if _, err := LoadState(path); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("unknown role: %v; want ErrInvalidState", err)
	}

	os.Remove(path)
	j, _ := openJ(t, dir, JournalOptions{})
	j.Write(rec(1, "e1", RolePrefill))
	j.Close()
	for _, torn := range []string{"", "{\"version\":1,\"seq\":"} {
		os.WriteFile(path, []byte(torn), 0o644)
		_, r := openJ(t, dir, JournalOptions{})
		if r.FromCheckpoint || r.State.Seq != 1 || len(r.State.Engines) != 1 || r.State.Engines[0].Role != RolePrefill {
			t.Fatalf("state.json %q: recovered %+v (from checkpoint %v); want the journal's replay", torn, r.State, r.FromCheckpoint)
		}
	}

	fsys := &faultFS{}
	if err := saveState(fsys, path, PersistedState{Version: 1}); err != nil {
		t.Fatal(err)
	}
	ops := strings.Join(fsys.ops, ",")
	if !strings.HasSuffix(ops, "rename state.json,syncdir") {
		t.Fatalf("save ops %s; want the rename followed by a directory fsync", ops)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return math.NaN()
	}
	return m.GetCounter().GetValue()
}

// A rotation whose new active segment cannot be opened (out of file
// descriptors) loses nothing: the retry starts the new segment at
// offset 0 and never renames it over the segment just rotated.
func TestJournalRotationOpenFailureLosesNoRecords(t *testing.T) {
	dir := t.TempDir()
	fsys := &faultFS{}
	// A hold record is about 1.7 KB: four records a segment.
	o := JournalOptions{MaxBytes: 8 << 10, Keep: 100, Ring: 100, RetryEvery: time.Hour, FS: fsys}
	j, _ := openJ(t, dir, o)
	for s := uint64(1); s <= 4; s++ {
		if err := j.Write(rec(s, "", 0)); err != nil {
			t.Fatal(err)
		}
	}
	fsys.mu.Lock()
	fsys.failTrunc = true
	fsys.mu.Unlock()
	if err := j.Write(rec(5, "", 0)); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("write during the failing rotation: %v; want EMFILE", err)
	}
	fsys.mu.Lock()
	fsys.failTrunc = false
	fsys.mu.Unlock()
	for s := uint64(6); s <= 7; s++ {
		if err := j.Write(rec(s, "", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	o.FS = nil
	_, r := openJ(t, dir, o)
	if got := fmt.Sprint(seqs(r.History)); got != "[1 2 3 4 5 6 7]" {
		t.Fatalf("records read back %s; want [1 2 3 4 5 6 7]", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, JournalActive)); err != nil || fi.Size() > o.MaxBytes {
		t.Fatalf("active segment: %v, %d bytes; want at most %d", err, fi.Size(), o.MaxBytes)
	}
}

// Past MaxPending the oldest record without moves is dropped; a record
// with moves never is (the controller holds its moves until it is
// written, so dropping it would carry them out unjournalled).
func TestJournalNeverDropsAPendingMove(t *testing.T) {
	dir := t.TempDir()
	fsys := &faultFS{}
	j, _ := openJ(t, dir, JournalOptions{FS: fsys, RetryEvery: time.Hour, MaxPending: 3})
	fsys.setFull(true)
	for _, d := range []*Decision{rec(1, "e1", RolePrefill), rec(2, "", 0), rec(3, "e2", RolePrefill), rec(4, "", 0), rec(5, "", 0), rec(6, "e3", RolePrefill)} {
		_ = j.Write(d)
	}
	if n := counterValue(j.dropped); n != 3 {
		t.Fatalf("dropped %v records; want 3 (the holds 2, 4 and 5)", n)
	}
	fsys.setFull(false)
	if err := j.Write(rec(7, "", 0)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, r := openJ(t, dir, JournalOptions{})
	if got := fmt.Sprint(seqs(r.History)); got != "[1 3 6 7]" {
		t.Fatalf("records %s; want [1 3 6 7] (every move kept, in order)", got)
	}
}
