package diskfull

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/coreproc"
)

const (
	// tmpfsSize is the data_dir's filesystem; a journal record is a few
	// KiB, the state checkpoint a few more.
	tmpfsSize = 2 << 20
	// headroom is what the filler leaves free: the journal, one record
	// per 0.1 s step, fills it within seconds.
	headroom = 96 << 10
	tick     = 100 * time.Millisecond
)

// needRealComponent skips, or with CI=true fails: in CI a test that
// needs a real component must not pass by skipping.
func needRealComponent(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a test that needs a real component fails instead of skipping)", msg)
	}
	t.Skip(msg)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and
// unmounts it when the test ends (after the binary is killed: cleanups
// run last-registered first, and the binary's is registered later; and
// before t.TempDir's removal, registered earlier).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0750", size)); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			// Root in a container without CAP_SYS_ADMIN: the kernel, not
			// a missing package, refuses (as the eBPF liveness test skips
			// when the kernel refuses its program), even in CI.
			t.Skipf("the kernel refused mount -t tmpfs on %s as root: %v", dir, err)
		}
		needRealComponent(t, "mount -t tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v (detaching it)", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// freeBytes is what an unprivileged writer may still allocate on dir's
// filesystem.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill writes zeros to name until it holds n bytes or the filesystem is
// full (ENOSPC ends it without an error: the journal may take the last
// pages first). It returns the bytes written.
func fill(t *testing.T, name string, n int64) int64 {
	t.Helper()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var done int64
	for done < n {
		w, err := f.Write(buf[:min(int64(len(buf)), n-done)])
		done += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("filler %s: %v", name, err)
		}
	}
	return done
}

type engineState struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	State      string `json:"state"`
	TargetRole string `json:"target_role"`
	LastMoveNs int64  `json:"last_move_ns"`
}

type coreState struct {
	Engines []engineState `json:"engines"`
	Roles   struct {
		Prefill []string `json:"prefill"`
		Decode  []string `json:"decode"`
	} `json:"roles"`
	LatestDecision *struct {
		Seq uint64 `json:"seq"`
	} `json:"latest_decision"`
}

// metric reads one unlabelled sample from /metrics.
func metric(t *testing.T, p *coreproc.Proc, name string) float64 {
	t.Helper()
	code, b := p.Get(t, "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, v, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

func readyz(t *testing.T, p *coreproc.Proc) (int, string) {
	t.Helper()
	code, b := p.Get(t, "/readyz")
	return code, string(b)
}

// load posts n decode-heavy requests (short prompts, long outputs): the
// controller moves prefill engines to decode, more as n grows.
func load(t *testing.T, p *coreproc.Proc, n int) {
	t.Helper()
	var b strings.Builder
	now := time.Now().UnixNano()
	for r := range n {
		a := now + int64(r)*1e5
		fmt.Fprintf(&b, "{\"type\":\"offer_started\",\"ts_ns\":%d}\n{\"type\":\"sized\",\"ts_ns\":%d,\"est_input_tokens\":100,\"requested_output_tokens\":512}\n", a, a)
	}
	if r := p.PostEvents(t, b.String()); !strings.HasPrefix(r, "200 ") {
		t.Fatalf("POST /v1/events: %s", r)
	}
}

// alive fails the test if the process has exited or logged a panic.
func alive(t *testing.T, p *coreproc.Proc, when string) {
	t.Helper()
	select {
	case err := <-p.Done:
		t.Fatalf("%s: narwhal-core exited: %v\n%s", when, err, p.Stderr.String())
	default:
	}
	if s := p.Stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Fatalf("%s: narwhal-core logged a panic:\n%s", when, s)
	}
}

// journalled checks that the roles the service shows are no further than
// the journal on disk: every engine is in the role the replay of the
// journal's records gives, or on its way to it (draining or switching
// with that target), and the role table lists an engine only in that
// role. The journal is read before and after /v1/state, and the roles
// must be those of one of the journals the disk held in between (the
// first read's records and any of those added since): the controller
// journals a record a step, and under load (-race, a busy machine) a
// step can pass while /v1/state is read.
func journalled(t *testing.T, p *coreproc.Proc, data string, initial map[string]string, when string) (coreState, []coreproc.Record) {
	t.Helper()
	j1 := coreproc.ReadJournal(t, data)
	var st coreState
	p.GetJSON(t, "/v1/state", &st)
	j2 := coreproc.ReadJournal(t, data)
	var why string
	for k := len(j2); k >= min(len(j1), len(j2)); k-- {
		if why = rolesPastJournal(st, initial, j2[:k]); why == "" {
			return st, j2
		}
	}
	t.Fatalf("%s: %s (the journal read %d records before /v1/state, %d after)", when, why, len(j1), len(j2))
	return st, j2
}

// rolesPastJournal says how st's roles go past the journal recs ("" when
// they do not).
func rolesPastJournal(st coreState, initial map[string]string, recs []coreproc.Record) string {
	want := coreproc.Replay(initial, recs)
	last := uint64(0)
	if len(recs) > 0 {
		last = recs[len(recs)-1].Seq
	}
	for _, e := range st.Engines {
		if e.Role != want[e.ID] && !(e.State != "serving" && e.TargetRole == want[e.ID]) {
			return fmt.Sprintf("engine %s is %s (%s, target %q) in /v1/state, but the journal on disk (%d records, last seq %d) puts it in %s: a move reached the actuator without its record",
				e.ID, e.Role, e.State, e.TargetRole, len(recs), last, want[e.ID])
		}
	}
	for role, ids := range map[string][]string{"prefill": st.Roles.Prefill, "decode": st.Roles.Decode} {
		for _, id := range ids {
			if want[id] != role {
				return fmt.Sprintf("the role table lists %s under %s; the journal on disk (last seq %d) puts it in %s", id, role, last, want[id])
			}
		}
	}
	return ""
}

func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRealDiskFull: see the package documentation.
func TestRealDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and fills a tmpfs; skipped with -short")
	}
	if os.Geteuid() != 0 {
		needRealComponent(t, "mounting a tmpfs needs root (euid %d)", os.Geteuid())
	}
	data := mountTmpfs(t, tmpfsSize)
	bin := filepath.Join(t.TempDir(), "narwhal-core")
	if err := coreproc.Build(bin); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// Ten prefill engines and one decode engine under decode-heavy load:
	// the controller moves engines to decode, more as the load grows.
	cfgPath, initial := coreproc.MoverConfig(t, t.TempDir(), data, "journal: {retry_s: 0.1}\n",
		"confirm_steps: 1, cooldown_s: 1, dwell_s: 1, max_moves_per_step: 1, prediction_arrivals: 0")
	p := coreproc.Start(t, bin, "--config", cfgPath)

	// 1. Healthy: a move is journalled, /readyz is 200.
	rate := 2
	deadline := time.Now().Add(15 * time.Second)
	for {
		load(t, p, rate)
		if _, recs := journalled(t, p, data, initial, "before the disk fills"); movesIn(recs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no move journalled within 15 s of decode-heavy load")
		}
		time.Sleep(tick)
	}
	if code, body := readyz(t, p); code != 200 {
		t.Fatalf("/readyz with free space: %d %s", code, body)
	}
	if e := metric(t, p, "narwhal_journal_write_errors_total"); e != 0 {
		t.Fatalf("narwhal_journal_write_errors_total %g before the disk filled; want 0", e)
	}

	// 2. Fill the tmpfs up to the headroom; the journal and the
	// checkpoint take the rest and fail. Then the last pages go to a
	// second filler, so that what a failed save frees cannot let the
	// journal on.
	logsAtFill := len(p.Stderr.String())
	free := freeBytes(t, data)
	filler := filepath.Join(data, "filler")
	fill(t, filler, free-headroom)
	t.Logf("%v: filled %d of %d free bytes; %d left", time.Since(start).Round(time.Millisecond), free-headroom, free, freeBytes(t, data))
	deadline = time.Now().Add(15 * time.Second)
	var body string
	for {
		rate = min(rate+1, 12)
		load(t, p, rate)
		var code int
		if code, body = readyz(t, p); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s 15 s after the disk was filled to %d bytes free", code, body, headroom)
		}
		alive(t, p, "filling")
		time.Sleep(tick)
	}
	t.Logf("%v: /readyz 503 %s", time.Since(start).Round(time.Millisecond), body)
	fill(t, filler+"2", tmpfsSize)
	// The checkpoint (the larger write) may fail first; the journal's
	// next record fails once the last pages are gone.
	for metric(t, p, "narwhal_journal_write_errors_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("narwhal_journal_write_errors_total still 0 with the disk full (/readyz %s)", body)
		}
		load(t, p, rate)
		time.Sleep(tick)
	}
	fullAt := time.Now()

	// 3. Full: stays up, /readyz names the error, /healthz is about the
	// clock and stays 200, errors grow, roles never pass the journal; the
	// controller keeps deciding, and moves, in records the disk does not
	// hold yet.
	errs0 := metric(t, p, "narwhal_journal_write_errors_total")
	pending := map[uint64]string{} // records seen through the API while not on disk
	var pendingMoves int
	for {
		rate = min(rate+1, 12)
		load(t, p, rate)
		alive(t, p, "disk full")
		if code, b := readyz(t, p); code != 503 || !strings.Contains(b, "no space left on device") {
			t.Fatalf("/readyz with the disk full: %d %s; want 503 naming \"no space left on device\"", code, b)
		}
		if code, b := p.Get(t, "/healthz"); code != 200 {
			t.Fatalf("/healthz with the disk full: %d %s; want 200 (it reports the clock, /readyz the disk)", code, b)
		}
		_, recs := journalled(t, p, data, initial, "disk full")
		last := uint64(0)
		if len(recs) > 0 {
			last = recs[len(recs)-1].Seq
		}
		var ds struct {
			Decisions []json.RawMessage `json:"decisions"`
		}
		p.GetJSON(t, fmt.Sprintf("/v1/decisions?since=%d&limit=1000", last), &ds)
		for _, raw := range ds.Decisions {
			var r coreproc.Record
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			if _, seen := pending[r.Seq]; !seen && len(r.Moves) > 0 {
				pendingMoves++
			}
			pending[r.Seq] = canonical(t, raw)
		}
		if pendingMoves > 0 && time.Since(fullAt) > 2*time.Second {
			break
		}
		if time.Since(fullAt) > 12*time.Second {
			t.Fatalf("no move decided in 12 s with the disk full (%d records not on disk seen): the test needs one", len(pending))
		}
		time.Sleep(tick)
	}
	if errs := metric(t, p, "narwhal_journal_write_errors_total"); errs <= errs0 {
		t.Fatalf("narwhal_journal_write_errors_total %g after %v full; it was %g when the disk filled: retries must count", errs, time.Since(fullAt).Round(time.Millisecond), errs0)
	}
	if n := metric(t, p, "narwhal_journal_pending_records"); n < 1 {
		t.Fatalf("narwhal_journal_pending_records %g with the disk full; want the held records", n)
	}
	// An error is logged once per change of error, not once per step
	// or retry (docs: core/controller "Journal and checkpoint").
	var errLines []string
	for _, l := range strings.Split(p.Stderr.String()[logsAtFill:], "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			errLines = append(errLines, l)
		}
	}
	if steps := int(time.Since(fullAt) / tick); len(errLines) > 6 {
		t.Fatalf("%d ERROR lines in %d steps of a full disk; want each error once per change:\n%s", len(errLines), steps, strings.Join(errLines, "\n"))
	}
	t.Logf("%v: full for %v, %d records seen pending, %d of them with moves", time.Since(start).Round(time.Millisecond), time.Since(fullAt).Round(time.Millisecond), len(pending), pendingMoves)

	// 4. Free the space: the held records land in order, readiness and
	// the roles follow.
	for _, f := range []string{filler, filler + "2"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// The controller keeps deciding meanwhile (a record a step), so the
	// pending count need not be zero at the sample that sees the rest:
	// under load (-race, a busy machine) a step can pass between two
	// reads. The held records' landing, the pending count's reaching zero
	// and readiness are each waited for.
	freedAt := time.Now()
	var drained bool
	for {
		load(t, p, rate)
		alive(t, p, "after freeing space")
		code, _ := readyz(t, p)
		_, recs := journalled(t, p, data, initial, "after freeing space")
		drained = drained || metric(t, p, "narwhal_journal_pending_records") == 0
		landed := len(recs) > 0 && recs[len(recs)-1].Seq >= maxKey(pending)
		if code == 200 && drained && landed {
			break
		}
		if time.Since(freedAt) > 10*time.Second {
			t.Fatalf("10 s after freeing space: /readyz %d, journal at %d records, every held record (up to seq %d) on disk %v, pending records reached 0 %v; want all",
				code, len(recs), maxKey(pending), landed, drained)
		}
		time.Sleep(tick)
	}
	t.Logf("%v: recovered in %v", time.Since(start).Round(time.Millisecond), time.Since(freedAt).Round(time.Millisecond))
	recs := coreproc.ReadJournal(t, data)
	contiguous(t, recs, "after freeing space")
	onDisk := map[uint64]string{}
	for _, r := range recs {
		onDisk[r.Seq] = canonical(t, r.Raw)
	}
	for seq, s := range pending {
		if onDisk[seq] != s {
			t.Fatalf("record %d, seen through /v1/decisions while the disk was full, differs on disk:\n api  %s\n disk %s", seq, s, onDisk[seq])
		}
	}
	// The roles reach the journal (moves held back are now carried out).
	deadline = time.Now().Add(5 * time.Second)
	for {
		st, recs := journalled(t, p, data, initial, "after freeing space")
		if allServing(st) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the journal caught up, engines still moving: %+v (journal at %d records)", st.Engines, len(recs))
		}
		time.Sleep(tick)
	}

	// 5. SIGKILL and restart on the same data_dir: the roles are those
	// before the kill, which are the journal's.
	var before coreState
	deadline = time.Now().Add(5 * time.Second)
	for {
		// A moment with every engine serving and the roles equal to the
		// journal's.
		st, _ := journalled(t, p, data, initial, "before the kill")
		if allServing(st) {
			before = st
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no moment in 5 s with every engine serving: %+v", st.Engines)
		}
		time.Sleep(tick)
	}
	p.Kill(t)
	recs = coreproc.ReadJournal(t, data)
	contiguous(t, recs, "after SIGKILL")
	p = coreproc.Start(t, bin, "--config", cfgPath)
	var after coreState
	p.GetJSON(t, "/v1/state", &after)
	want := coreproc.Replay(initial, recs)
	var later []uint64 // records with moves the journal took after /v1/state was read
	for _, r := range recs {
		if before.LatestDecision != nil && r.Seq > before.LatestDecision.Seq && len(r.Moves) > 0 {
			later = append(later, r.Seq)
		}
	}
	moved := 0
	for _, e := range after.Engines {
		if e.Role != want[e.ID] || e.State != "serving" {
			t.Fatalf("after restart %s is %s (%s); the journal (%d records) says %s", e.ID, e.Role, e.State, len(recs), want[e.ID])
		}
		if e.Role != initial[e.ID] {
			moved++
		}
	}
	if len(later) == 0 {
		for _, b := range before.Engines {
			if a := roleOf(after, b.ID); a != b.Role {
				t.Fatalf("after restart %s is %s; before the kill it was %s", b.ID, a, b.Role)
			}
		}
	} else {
		t.Logf("records %v with moves were journalled between reading /v1/state and the kill; compared with the journal only", later)
	}
	if moved == 0 {
		t.Fatalf("after restart no engine is out of its initial role: the run made no move to restore")
	}
	if code, b := readyz(t, p); code != 200 {
		t.Fatalf("/readyz after restart: %d %s", code, b)
	}
	// The journal continues after the restart without a gap or a repeat.
	time.Sleep(5 * tick)
	contiguous(t, coreproc.ReadJournal(t, data), "after restart")
	alive(t, p, "after restart")
	t.Logf("%v: restart restored %d moved engines from %d records", time.Since(start).Round(time.Millisecond), moved, len(recs))
}

func movesIn(recs []coreproc.Record) int {
	n := 0
	for _, r := range recs {
		n += len(r.Moves)
	}
	return n
}

func maxKey(m map[uint64]string) uint64 {
	var k uint64
	for s := range m {
		k = max(k, s)
	}
	return k
}

func allServing(st coreState) bool {
	for _, e := range st.Engines {
		if e.State != "serving" {
			return false
		}
	}
	return true
}

func roleOf(st coreState, id string) string {
	for _, e := range st.Engines {
		if e.ID == id {
			return e.Role
		}
	}
	return ""
}

// contiguous requires the journal's sequences to run 1..N.
func contiguous(t *testing.T, recs []coreproc.Record, when string) {
	t.Helper()
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Fatalf("%s: journal record %d has seq %d; want %d (no record lost, repeated or out of order)", when, i, r.Seq, i+1)
		}
	}
}
