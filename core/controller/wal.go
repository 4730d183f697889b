package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Journal file names in the data directory.
const (
	// JournalActive is the segment being appended to.
	JournalActive = "journal.jsonl"
	// StateCheckpoint is the controller state checkpoint.
	StateCheckpoint = "state.json"
	// rotated segments are journal-<first seq, 20 digits>.jsonl.
	segPrefix, segSuffix = "journal-", ".jsonl"
)

// JournalOptions configures OpenJournal. Zero values take the defaults.
type JournalOptions struct {
	// MaxBytes: the active segment is rotated before a record would take
	// it past this size (default 32 MiB, about 3 h of 1 s steps).
	MaxBytes int64
	// Keep: rotated segments retained (default 8). A segment holding
	// records after the last checkpoint is never removed.
	Keep int
	// Ring: decisions loaded for the in-memory journal (default 1024).
	Ring int
	// MaxPending: records held in memory while writes fail (default
	// 4096); beyond it the oldest record without moves is dropped and
	// counted. A record with moves is never dropped: the controller
	// holds its moves until it is written (there are at most as many as
	// engines, a held engine being draining and never moved again).
	MaxPending int
	// RetryEvery: how often failed writes and checkpoints are retried
	// (default 1 s).
	RetryEvery time.Duration
	// NowNs is the clock saved state is validated against (default the
	// wall clock).
	NowNs func() int64
	// FS is the file layer (default OSFS).
	FS     FS
	Logger *slog.Logger
}

func (o *JournalOptions) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 32 << 20
	}
	if o.Keep <= 0 {
		o.Keep = 8
	}
	if o.Ring <= 0 {
		o.Ring = 1024
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = time.Second
	}
	if o.NowNs == nil {
		o.NowNs = func() int64 { return time.Now().UnixNano() }
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Recovered is what OpenJournal read back: the controller state (the
// checkpoint with every later journal record applied) and the most recent
// decisions for the in-memory journal.
type Recovered struct {
	State   PersistedState
	History []Decision
	// FromCheckpoint: state.json was read; false when it was missing,
	// empty or torn and the state is the replay of the retained journal.
	FromCheckpoint bool
	// Replayed: journal records applied after the checkpoint.
	Replayed int
	// Truncated: bytes of a torn tail cut off the active segment.
	Truncated int64
}

// Journal is the decision journal as a write-ahead log with the state
// checkpoint: every decision is one JSON line, written and fsynced before
// Write returns (so before the controller hands its moves to the
// actuator); state.json is a checkpoint of the controller state carrying
// the sequence of the last record it includes, saved only up to a record
// already durable in the journal. After any crash the state is the
// checkpoint plus the records after its sequence (see OpenJournal).
//
// A failed write is truncated back to the last whole record, kept in
// memory (up to MaxPending records) and retried on every Write and every
// RetryEvery; Healthy reports the failure until a write succeeds. The
// active segment is rotated by size; Keep rotated segments are retained.
// Safe for concurrent use; it implements Sink.
type Journal struct {
	dir  string
	o    JournalOptions
	fsys FS
	log  *slog.Logger

	mu      sync.Mutex
	f       File
	size    int64  // bytes of whole records in the active segment
	first   uint64 // seq of the active segment's first record (0: empty)
	pending [][]byte
	pendSeq []uint64
	pendMov []bool // the pending record has moves
	durable uint64 // last seq written and synced
	writeOK bool
	lastErr error
	closed  bool

	// checkpoint side
	ckMu     sync.Mutex
	state    func() PersistedState
	ckSeq    atomic.Uint64 // seq of the checkpoint on disk
	ckErr    error
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	loopOnce sync.Once

	writeErrs, ckErrs, dropped, rotations prometheus.Counter
	pendingG                              prometheus.GaugeFunc
}

// OpenJournal opens (creating) the journal in dir and recovers: it cuts a
// torn tail off the active segment, loads and validates state.json (a
// missing, empty or torn one falls back to replaying the retained
// journal; an impossible one is an error wrapping ErrInvalidState), and
// reads only the segments that hold records after the checkpoint or the
// last Ring decisions.
func OpenJournal(dir string, o JournalOptions) (*Journal, Recovered, error) {
	o.defaults()
	j := &Journal{dir: dir, o: o, fsys: o.FS, log: o.Logger, writeOK: true,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	j.metrics()
	var rec Recovered
	st, err := loadState(j.fsys, filepath.Join(dir, StateCheckpoint), o.NowNs())
	switch {
	case err == nil:
		rec.FromCheckpoint = true
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, ErrStateTorn):
		j.log.Error("state checkpoint empty or torn; rebuilding the state from the journal", "err", err)
	default:
		return nil, rec, fmt.Errorf("open journal: %w (remove %s to rebuild the state from the journal)", err, StateCheckpoint)
	}
	if !rec.FromCheckpoint {
		st = PersistedState{Version: stateVersion}
	}
	j.ckSeq.Store(st.Seq)

	f, err := j.fsys.OpenFile(filepath.Join(dir, JournalActive), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, rec, fmt.Errorf("open journal: %w", err)
	}
	j.f = f
	active, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, rec, fmt.Errorf("open journal: read %s: %w", JournalActive, err)
	}
	lines, good := splitRecords(active)
	if cut := int64(len(active)) - good; cut > 0 {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, rec, fmt.Errorf("open journal: truncate torn tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, rec, fmt.Errorf("open journal: truncate torn tail: %w", err)
		}
		rec.Truncated = cut
		j.log.Warn("journal: torn tail truncated", "bytes", cut, "file", JournalActive)
	}
	j.size = good
	if len(lines) > 0 {
		j.first = lineSeq(lines[0])
		j.durable = lineSeq(lines[len(lines)-1])
	}

	// Segments newest first: the active one, then rotated ones until both
	// the checkpoint and the ring are covered.
	segs, err := j.rotated()
	if err != nil {
		f.Close()
		return nil, rec, err
	}
	chunks := [][][]byte{lines}
	covered := func(n int, firstSeq uint64) bool {
		return n >= o.Ring && (firstSeq == 0 || firstSeq <= st.Seq+1)
	}
	n, firstSeq := len(lines), j.first
	for i := len(segs) - 1; i >= 0 && !covered(n, firstSeq); i-- {
		b, err := j.readFile(segs[i].name)
		if err != nil {
			f.Close()
			return nil, rec, err
		}
		ls, _ := splitRecords(b)
		chunks = append(chunks, ls)
		n += len(ls)
		firstSeq = segs[i].first
		if j.durable == 0 && len(ls) > 0 {
			j.durable = lineSeq(ls[len(ls)-1])
		}
	}
	if j.durable < st.Seq {
		// The checkpoint is ahead of the journal (records lost with the
		// disk): keep the sequence monotonic.
		j.log.Warn("journal ends before the checkpoint", "journal_seq", j.durable, "checkpoint_seq", st.Seq)
		j.durable = st.Seq
	}
	// Oldest first.
	slices.Reverse(chunks)
	var all [][]byte
	for _, c := range chunks {
		all = append(all, c...)
	}
	ringFrom := max(0, len(all)-o.Ring)
	for i, l := range all {
		seq := lineSeq(l)
		if i < ringFrom && seq <= st.Seq {
			continue
		}
		var d Decision
		if err := json.Unmarshal(l, &d); err != nil {
			continue // validated by splitRecords; unreachable
		}
		if d.Seq > st.Seq {
			st.Apply(&d)
			rec.Replayed++
		}
		if i >= ringFrom {
			rec.History = append(rec.History, d)
		}
	}
	rec.State = st
	go j.loop()
	return j, rec, nil
}

type segment struct {
	name  string
	first uint64
}

// rotated lists the rotated segments, oldest first.
func (j *Journal) rotated() ([]segment, error) {
	ents, err := j.fsys.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	var out []segment
	for _, e := range ents {
		name := e.Name()
		num, ok := strings.CutPrefix(name, segPrefix)
		if !ok {
			continue
		}
		num, ok = strings.CutSuffix(num, segSuffix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, segment{name, seq})
	}
	slices.SortFunc(out, func(a, b segment) int {
		if a.first < b.first {
			return -1
		}
		if a.first > b.first {
			return 1
		}
		return 0
	})
	return out, nil
}

func (j *Journal) readFile(name string) ([]byte, error) {
	f, err := j.fsys.OpenFile(filepath.Join(j.dir, name), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("open journal: read %s: %w", name, err)
	}
	return b, nil
}

// splitRecords returns the whole records of b (newline-terminated lines
// that are JSON objects with a seq) and the length of the prefix that
// ends with the last of them; whatever follows is a torn tail. A bad line
// before a good one (a fragment an older version glued to the next
// record) is skipped, never cut: the records after it stay.
func splitRecords(b []byte) (lines [][]byte, good int64) {
	for off := 0; off < len(b); {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break
		}
		l := b[off : off+nl]
		off += nl + 1
		if !json.Valid(l) || lineSeq(l) == 0 {
			continue
		}
		lines = append(lines, l)
		good = int64(off)
	}
	return lines, good
}

// lineSeq reads the seq of a record without decoding the rest (Decision
// marshals Seq first); 0 when absent.
func lineSeq(l []byte) uint64 {
	rest, ok := bytes.CutPrefix(l, []byte(`{"seq":`))
	if !ok {
		return 0
	}
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return 0
	}
	n, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func (j *Journal) metrics() {
	j.writeErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_journal_write_errors_total",
		Help: "Failed attempts to write and fsync a journal record (each retried)."})
	j.ckErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_state_save_errors_total",
		Help: "Failed attempts to save the state checkpoint (each retried)."})
	j.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_journal_dropped_records_total",
		Help: "Journal records dropped because writes kept failing past the pending limit."})
	j.rotations = prometheus.NewCounter(prometheus.CounterOpts{Name: "narwhal_journal_rotations_total",
		Help: "Journal segments rotated."})
	j.pendingG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "narwhal_journal_pending_records",
		Help: "Journal records waiting to be written (writes failing)."}, func() float64 {
		j.mu.Lock()
		defer j.mu.Unlock()
		return float64(len(j.pending))
	})
}

// Collectors returns the journal's metrics.
func (j *Journal) Collectors() []prometheus.Collector {
	return []prometheus.Collector{j.writeErrs, j.ckErrs, j.dropped, j.rotations, j.pendingG}
}

// SetStateSource gives the journal the controller state to checkpoint
// (e.g. Controller.State); checkpoints are saved in the background after
// each durable record, never ahead of it.
func (j *Journal) SetStateSource(state func() PersistedState) {
	j.ckMu.Lock()
	j.state = state
	j.ckMu.Unlock()
}

// Write appends d and fsyncs it (with any records still pending from
// failed writes before it). A failure is retried later; the error is
// returned so the caller can log it, and Healthy reports it.
func (j *Journal) Write(d *Decision) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("journal encode: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return fmt.Errorf("journal write: %w", os.ErrClosed)
	}
	if len(j.pending) >= j.o.MaxPending {
		if i := slices.Index(j.pendMov, false); i >= 0 {
			j.pending = slices.Delete(j.pending, i, i+1)
			j.pendSeq = slices.Delete(j.pendSeq, i, i+1)
			j.pendMov = slices.Delete(j.pendMov, i, i+1)
			j.dropped.Inc()
		}
	}
	j.pending = append(j.pending, append(b, '\n'))
	j.pendSeq = append(j.pendSeq, d.Seq)
	j.pendMov = append(j.pendMov, len(d.Moves) > 0)
	err = j.flushLocked()
	j.poke()
	return err
}

func (j *Journal) poke() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// flushLocked writes the pending records in order. Caller holds mu.
func (j *Journal) flushLocked() error {
	for len(j.pending) > 0 {
		line, seq := j.pending[0], j.pendSeq[0]
		if err := j.appendLocked(line, seq); err != nil {
			j.writeErrs.Inc()
			if j.writeOK || j.lastErr == nil || j.lastErr.Error() != err.Error() {
				j.log.Error("journal write failed; retrying, /readyz fails until it succeeds",
					"err", err, "pending", len(j.pending))
			}
			j.writeOK, j.lastErr = false, err
			return err
		}
		j.pending[0] = nil
		j.pending, j.pendSeq, j.pendMov = j.pending[1:], j.pendSeq[1:], j.pendMov[1:]
		j.durable = max(j.durable, seq)
	}
	if !j.writeOK {
		j.log.Info("journal writes recovered", "durable_seq", j.durable)
	}
	j.writeOK, j.lastErr = true, nil
	if len(j.pending) == 0 {
		j.pending, j.pendSeq, j.pendMov = nil, nil, nil
	}
	return nil
}

func (j *Journal) appendLocked(line []byte, seq uint64) error {
	if j.f == nil {
		f, err := j.fsys.OpenFile(filepath.Join(j.dir, JournalActive), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return fmt.Errorf("journal reopen: %w", err)
		}
		j.f = f
	}
	if j.size > 0 && j.size+int64(len(line)) > j.o.MaxBytes {
		if err := j.rotateLocked(); err != nil {
			return err
		}
	}
	_, err := j.f.WriteAt(line, j.size)
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		// Never leave a partial record: the next attempt writes at the
		// same offset.
		_ = j.f.Truncate(j.size)
		return fmt.Errorf("journal write seq %d: %w", seq, err)
	}
	if j.size == 0 {
		j.first = seq
	}
	j.size += int64(len(line))
	return nil
}

// rotateLocked renames the active segment to journal-<first>.jsonl, syncs
// the directory, starts a new active segment and removes the oldest
// rotated segments beyond Keep that the checkpoint already covers.
func (j *Journal) rotateLocked() error {
	name := fmt.Sprintf("%s%020d%s", segPrefix, j.first, segSuffix)
	if err := j.fsys.Rename(filepath.Join(j.dir, JournalActive), filepath.Join(j.dir, name)); err != nil {
		return fmt.Errorf("journal rotate: %w", err)
	}
	_ = j.f.Close()
	// The active segment is now empty, whether or not the new file opens:
	// a retry must write at offset 0 and not rotate again, which would
	// rename an empty file over the segment just rotated.
	j.f, j.size, j.first = nil, 0, 0
	f, err := j.fsys.OpenFile(filepath.Join(j.dir, JournalActive), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("journal rotate: %w", err)
	}
	j.f = f
	if err := j.fsys.SyncDir(j.dir); err != nil {
		return fmt.Errorf("journal rotate: sync dir: %w", err)
	}
	j.rotations.Inc()
	j.pruneLocked()
	return nil
}

func (j *Journal) pruneLocked() {
	segs, err := j.rotated()
	if err != nil || len(segs) <= j.o.Keep {
		return
	}
	ck := j.ckSeq.Load()
	for i := 0; i < len(segs)-j.o.Keep; i++ {
		// Segment i ends where segment i+1 begins.
		if segs[i+1].first-1 > ck {
			return
		}
		if err := j.fsys.Remove(filepath.Join(j.dir, segs[i].name)); err != nil {
			j.log.Warn("journal: removing an old segment", "file", segs[i].name, "err", err)
			return
		}
	}
}

// Durable is the sequence of the last record written and synced.
func (j *Journal) Durable() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.durable
}

// Healthy is nil while journal writes and checkpoints succeed, else the
// last error.
func (j *Journal) Healthy() error {
	j.mu.Lock()
	werr := j.lastErr
	j.mu.Unlock()
	if werr != nil {
		return werr
	}
	j.ckMu.Lock()
	defer j.ckMu.Unlock()
	return j.ckErr
}

// loop retries failed writes and saves checkpoints.
func (j *Journal) loop() {
	defer close(j.done)
	t := time.NewTicker(j.o.RetryEvery)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-j.wake:
		case <-t.C:
			j.mu.Lock()
			if len(j.pending) > 0 && !j.closed {
				_ = j.flushLocked()
			}
			j.mu.Unlock()
		}
		j.Checkpoint()
	}
}

// Checkpoint saves the state source's state if it is newer than the last
// checkpoint and no newer than the durable journal. It returns the error
// of the save (also reported by Healthy until a save succeeds).
//
// Lock order: the state source (the controller's lock) is read before the
// checkpoint lock, and Write (called under the controller's lock) never
// takes the checkpoint lock.
func (j *Journal) Checkpoint() error {
	j.ckMu.Lock()
	state := j.state
	j.ckMu.Unlock()
	if state == nil {
		return nil
	}
	st := state()
	j.ckMu.Lock()
	defer j.ckMu.Unlock()
	if st.Seq > j.Durable() || st.Seq < j.ckSeq.Load() || (st.Seq == j.ckSeq.Load() && j.ckErr == nil) {
		return nil
	}
	err := saveState(j.fsys, filepath.Join(j.dir, StateCheckpoint), st)
	if err != nil {
		j.ckErrs.Inc()
		if j.ckErr == nil || j.ckErr.Error() != err.Error() {
			j.log.Error("state checkpoint failed; retrying, /readyz fails until it succeeds", "err", err)
		}
		j.ckErr = err
		return err
	}
	if j.ckErr != nil {
		j.log.Info("state checkpoints recovered", "seq", st.Seq)
	}
	j.ckSeq.Store(st.Seq)
	j.ckErr = nil
	return nil
}

// Close retries pending records once, saves a last checkpoint and closes
// the file.
func (j *Journal) Close() error {
	j.loopOnce.Do(func() { close(j.stop) })
	<-j.done
	j.mu.Lock()
	var err error
	if len(j.pending) > 0 && !j.closed {
		err = j.flushLocked()
	}
	j.mu.Unlock()
	err = errors.Join(err, j.Checkpoint())
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	if j.f != nil {
		err = errors.Join(err, j.f.Close())
		j.f = nil
	}
	if err != nil {
		return fmt.Errorf("journal close: %w", err)
	}
	return nil
}
