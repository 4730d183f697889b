//go:build cgo

package nvml

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

// What real GPUs answer on a production node, through go-nvml's mock:
// every call this package makes answers on faultNode, and a test makes
// any of them fail with the Return a real driver gives.

// faultNode is go-nvml's 8×H100-80GB node with every call answering and
// a fault table: faults["3/v2"] = r makes device 3's GetMemoryInfo_v2
// return r; "count", "init" and "shutdown" name the library's calls.
// Calls are counted by the same keys.
type faultNode struct {
	s      *server.Server
	mu     sync.Mutex
	faults map[string]gonvml.Return
	calls  map[string]int
	// mem is device i's memory (v1 is derived from it).
	mem func(i int) gonvml.Memory_v2
	// procs is device i's process list.
	procs func(i int) []gonvml.ProcessInfo
}

func (n *faultNode) fault(key string) gonvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls[key]++
	return n.faults[key]
}

func (n *faultNode) set(key string, r gonvml.Return) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r == gonvml.SUCCESS {
		delete(n.faults, key)
	} else {
		n.faults[key] = r
	}
}

func (n *faultNode) count(key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[key]
}

func newFaultNode() *faultNode {
	n := &faultNode{s: dgxh100.New(), faults: map[string]gonvml.Return{}, calls: map[string]int{},
		mem: func(int) gonvml.Memory_v2 {
			return gonvml.Memory_v2{Total: 80 << 30, Reserved: 512 << 20, Used: 40 << 30, Free: 80<<30 - 40<<30 - 512<<20}
		},
		procs: func(i int) []gonvml.ProcessInfo {
			return []gonvml.ProcessInfo{{Pid: uint32(1000 + i), UsedGpuMemory: 40 << 30}}
		},
	}
	n.s.InitFunc = func() gonvml.Return { return n.fault("init") }
	n.s.ShutdownFunc = func() gonvml.Return { return n.fault("shutdown") }
	n.s.DeviceGetCountFunc = func() (int, gonvml.Return) {
		if r := n.fault("count"); r != gonvml.SUCCESS {
			return 0, r
		}
		return len(n.s.Devices), gonvml.SUCCESS
	}
	n.s.DeviceGetHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if r := n.fault(strconv.Itoa(i) + "/handle"); r != gonvml.SUCCESS {
			return nil, r
		}
		return n.s.Devices[i], gonvml.SUCCESS
	}
	for i, d := range n.s.Devices {
		dev := d.(*server.Device)
		k := strconv.Itoa(i) + "/"
		dev.GetUUIDFunc = func() (string, gonvml.Return) {
			if r := n.fault(k + "uuid"); r != gonvml.SUCCESS {
				return "", r
			}
			return dev.UUID, gonvml.SUCCESS
		}
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			if r := n.fault(k + "v2"); r != gonvml.SUCCESS {
				return gonvml.Memory_v2{}, r
			}
			return n.mem(i), gonvml.SUCCESS
		}
		dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
			if r := n.fault(k + "v1"); r != gonvml.SUCCESS {
				return gonvml.Memory{}, r
			}
			m := n.mem(i)
			return gonvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, gonvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			if r := n.fault(k + "util"); r != gonvml.SUCCESS {
				return gonvml.Utilization{}, r
			}
			return gonvml.Utilization{Gpu: 50}, gonvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			if r := n.fault(k + "procs"); r != gonvml.SUCCESS {
				return nil, r
			}
			return n.procs(i), gonvml.SUCCESS
		}
	}
	return n
}

func (n *faultNode) manager() (*Manager, *syncbuf.Buffer) {
	buf := &syncbuf.Buffer{}
	return NewManager(n.s, time.Second, slog.New(slog.NewTextHandler(buf, nil))), buf
}

// A GPU fallen off the bus (ERROR_GPU_IS_LOST) fails NVML's Init on some
// drivers: degraded, retried, recovered. On others Init works and the
// lost GPU's handle fails: that GPU alone is listed with its fault, its
// memory unknown, the other seven read as usual; the status lists the
// fault and the log says it once, however many reads see it.
func TestGPULostAtInit(t *testing.T) {
	n := newFaultNode()
	m, logs := n.manager()
	ctx := context.Background()
	n.set("init", gonvml.ERROR_GPU_IS_LOST)
	if _, err := m.Devices(ctx, 1e9); !errors.Is(err, ErrUnavailable) || !strings.Contains(m.Status().Reason, "ERROR_GPU_IS_LOST") {
		t.Fatalf("Init failing with GPU_IS_LOST: %v, status %+v; want degraded naming the cause", err, m.Status())
	}
	n.set("init", gonvml.SUCCESS)
	n.set("3/handle", gonvml.ERROR_GPU_IS_LOST)
	for _, now := range []int64{2e9, 3e9, 4e9} {
		ds, err := m.Devices(ctx, now)
		if err != nil || len(ds) != 8 {
			t.Fatalf("at %d: %d devices, %v; want 8, no error", now, len(ds), err)
		}
		lost := ds[3]
		if lost.Index != 3 || lost.UUID != "" || lost.Memory.Known || !lost.Problem ||
			len(lost.Notes) != 1 || lost.Notes[0] != "DeviceGetHandleByIndex: ERROR_GPU_IS_LOST" {
			t.Fatalf("lost GPU read as %+v; want index 3, no UUID, memory unknown, one note naming GPU_IS_LOST", lost)
		}
		for i, d := range ds {
			if i != 3 && (!d.Memory.Known || d.Memory.TotalBytes != 80<<30 || d.Problem || d.UUID == "") {
				t.Fatalf("GPU %d read as %+v beside the lost one; want it whole", i, d)
			}
		}
	}
	st := m.Status()
	if !st.Available || st.Devices != 8 || len(st.Problems) != 1 || st.Problems[0].Index != 3 || st.Problems[0].MemoryKnown ||
		st.Problems[0].MIGIndex != nil || st.LastReadNs != 4e9 {
		t.Fatalf("status %+v; want available, 8 devices, one problem (GPU 3, memory unknown), read at 4 s", st)
	}
	if got := logs.Count(`msg="NVML device problem"`); got != 1 {
		t.Fatalf("%d problem log lines over three reads; want 1", got)
	}
}

// A GPU falls off the bus mid-run, on one of eight: its calls answer
// ERROR_GPU_IS_LOST. It is reported unknown (no UUID, memory unknown),
// the others are unaffected, and when it answers again (the GPU was
// reset) it reads whole and the fault's end is logged once.
func TestGPULostMidRun(t *testing.T) {
	n := newFaultNode()
	m, logs := n.manager()
	ctx := context.Background()
	if ds, err := m.Devices(ctx, 1e9); err != nil || len(ds) != 8 || len(m.Status().Problems) != 0 {
		t.Fatalf("healthy node: %d devices, %v, status %+v", len(ds), err, m.Status())
	}
	for _, c := range []string{"uuid", "v2", "v1", "util", "procs"} {
		n.set("5/"+c, gonvml.ERROR_GPU_IS_LOST)
	}
	for _, now := range []int64{2e9, 3e9} {
		ds, err := m.Devices(ctx, now)
		if err != nil || len(ds) != 8 {
			t.Fatalf("at %d: %d devices, %v; want 8", now, len(ds), err)
		}
		d := ds[5]
		if d.UUID != "" || d.Memory.Known || d.Memory.TotalBytes != 0 || d.Utilization.Known || d.Processes != nil || !d.Problem ||
			len(d.Notes) != 4 || !strings.Contains(d.Notes[1], "GetMemoryInfo_v2: ERROR_GPU_IS_LOST; GetMemoryInfo: ERROR_GPU_IS_LOST") {
			t.Fatalf("lost GPU read as %+v; want no UUID, memory, utilization or processes, 4 notes", d)
		}
		if !ds[4].Memory.Known || ds[4].Problem || !ds[6].Memory.Known {
			t.Fatalf("neighbours of the lost GPU: %+v, %+v", ds[4], ds[6])
		}
	}
	if st := m.Status(); !st.Available || len(st.Problems) != 1 || st.Problems[0].Index != 5 || len(st.Problems[0].Notes) != 4 {
		t.Fatalf("status %+v; want available with GPU 5's problem", st)
	}
	n.faults = map[string]gonvml.Return{}
	ds, err := m.Devices(ctx, 4e9)
	if err != nil || !ds[5].Memory.Known || ds[5].UUID == "" || ds[5].Problem || len(m.Status().Problems) != 0 {
		t.Fatalf("after the GPU came back: %+v, %v, status %+v", ds[5], err, m.Status())
	}
	if p, c := logs.Count(`msg="NVML device problem"`), logs.Count(`msg="NVML device problem cleared"`); p != 1 || c != 1 {
		t.Fatalf("log lines: %d problem, %d cleared; want one each", p, c)
	}
}

// A transient ERROR_UNKNOWN or ERROR_TIMEOUT on one call. On the device
// count the whole read fails: degraded (NVML shut down, retried after the
// 1 s backoff) and back at the next read. On one device's memory that
// device alone is unknown for that read.
func TestTransientErrors(t *testing.T) {
	for _, r := range []gonvml.Return{gonvml.ERROR_UNKNOWN, gonvml.ERROR_TIMEOUT} {
		t.Run(r.Error(), func(t *testing.T) {
			n := newFaultNode()
			m, logs := n.manager()
			ctx := context.Background()
			if _, err := m.Devices(ctx, 1e9); err != nil {
				t.Fatal(err)
			}
			n.set("count", r)
			if _, err := m.Devices(ctx, 2e9); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), r.Error()) {
				t.Fatalf("count failing: %v; want ErrUnavailable naming %s", err, r.Error())
			}
			n.set("count", gonvml.SUCCESS)
			if st := m.Status(); st.Available || st.NextRetryNs != 3e9 || n.count("shutdown") != 1 || st.LastReadNs != 1e9 {
				t.Fatalf("status %+v, %d shutdowns; want degraded until 3 s, NVML shut down once, last read at 1 s", st, n.count("shutdown"))
			}
			if ds, err := m.Devices(ctx, 3e9); err != nil || len(ds) != 8 || !m.Status().Available || n.count("init") != 2 {
				t.Fatalf("at the retry: %d devices, %v, status %+v; want NVML back (2 inits)", len(ds), err, m.Status())
			}
			if w, i := logs.Count(`msg="NVML unavailable: running degraded (no GPU memory cross-check)"`), logs.Count(`msg="NVML initialized"`); w != 1 || i != 2 {
				t.Fatalf("log lines: %d degraded, %d initialized; want 1, 2", w, i)
			}

			n.set("2/v2", r)
			n.set("2/v1", r)
			ds, err := m.Devices(ctx, 4e9)
			if err != nil || ds[2].Memory.Known || !ds[2].Problem || !ds[1].Memory.Known || len(m.Status().Problems) != 1 {
				t.Fatalf("one device's memory failing: %+v, %v; want it alone unknown", ds[2], err)
			}
			n.set("2/v2", gonvml.SUCCESS)
			n.set("2/v1", gonvml.SUCCESS)
			if ds, err := m.Devices(ctx, 5e9); err != nil || !ds[2].Memory.Known || ds[2].Memory.Source != "v2" || len(m.Status().Problems) != 0 {
				t.Fatalf("next read: %+v, %v; want memory known again", ds[2], err)
			}
		})
	}
}

// ERROR_NOT_SUPPORTED from the utilization or the process list (MIG
// instances, some vGPU and consumer parts) is what the part does not do:
// noted, not a problem (no log line, nothing in the status); a process
// whose memory NVML cannot attribute (NVML_VALUE_NOT_AVAILABLE) counts 0
// bytes, not 16 EiB.
func TestNotSupportedIsNoProblem(t *testing.T) {
	n := newFaultNode()
	n.set("0/util", gonvml.ERROR_NOT_SUPPORTED)
	n.set("0/procs", gonvml.ERROR_NOT_SUPPORTED)
	n.set("1/util", gonvml.ERROR_FUNCTION_NOT_FOUND)
	n.procs = func(i int) []gonvml.ProcessInfo {
		return []gonvml.ProcessInfo{{Pid: 42, UsedGpuMemory: valueNotAvailable}, {Pid: 43, UsedGpuMemory: 1 << 30}}
	}
	m, logs := n.manager()
	ds, err := m.Devices(context.Background(), 1e9)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	if d.Problem || d.Utilization.Known || d.Processes != nil || !d.Memory.Known || len(d.Notes) != 2 ||
		!strings.Contains(d.Notes[1], "GetComputeRunningProcesses: ERROR_NOT_SUPPORTED") {
		t.Fatalf("device 0 %+v; want utilization and processes unknown with notes, no problem", d)
	}
	if ds[1].Problem || ds[1].Utilization.Known {
		t.Fatalf("device 1 %+v; want utilization unknown, no problem", ds[1])
	}
	if p := ds[2].Processes; len(p) != 2 || p[0] != (Process{PID: 42}) || p[1].UsedBytes != 1<<30 {
		t.Fatalf("processes %+v; want pid 42 with 0 B (not available), pid 43 with 1 GiB", p)
	}
	if st := m.Status(); len(st.Problems) != 0 || logs.Count(`msg="NVML device problem"`) != 0 {
		t.Fatalf("status %+v; want no problems, no log line", st)
	}
}

// ERROR_INSUFFICIENT_SIZE from the process list (it grew between NVML's
// size query and the copy): asked again, processTries times at most;
// still failing, the list is unknown (nil, noted, a problem), never
// waited on forever.
func TestProcessListInsufficientSize(t *testing.T) {
	n := newFaultNode()
	grown := 0
	n.s.Devices[0].(*server.Device).GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		if grown++; grown == 1 {
			return nil, gonvml.ERROR_INSUFFICIENT_SIZE
		}
		return []gonvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1 << 30}, {Pid: 8, UsedGpuMemory: 2 << 30}}, gonvml.SUCCESS
	}
	n.set("1/procs", gonvml.ERROR_INSUFFICIENT_SIZE)
	m, _ := n.manager()
	ds, err := m.Devices(context.Background(), 1e9)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[0]; grown != 2 || len(d.Processes) != 2 || d.Processes[1].PID != 8 || d.Problem || len(d.Notes) != 0 {
		t.Fatalf("device 0 after one INSUFFICIENT_SIZE: %+v (%d calls); want both processes on the second call", d, grown)
	}
	if d := ds[1]; n.count("1/procs") != processTries || d.Processes != nil || !d.Problem ||
		len(d.Notes) != 1 || d.Notes[0] != "GetComputeRunningProcesses: ERROR_INSUFFICIENT_SIZE" || !d.Memory.Known {
		t.Fatalf("device 1 always INSUFFICIENT_SIZE: %+v after %d calls; want %d calls, processes unknown", d, n.count("1/procs"), processTries)
	}
}

// A driver reload under the agent: after a good read, NVML's calls
// answer ERROR_UNINITIALIZED (or DRIVER_NOT_LOADED) on the devices while
// the count still answers. The read fails as a whole and NVML is shut
// down (it used to list every GPU unknown for as long as the agent ran,
// never initialising NVML again); Init fails with DRIVER_NOT_LOADED while
// the driver is away, retried with a growing backoff; once it loads, the
// next due retry reads every device.
func TestDriverReload(t *testing.T) {
	for _, r := range []gonvml.Return{gonvml.ERROR_UNINITIALIZED, gonvml.ERROR_DRIVER_NOT_LOADED} {
		t.Run(r.Error(), func(t *testing.T) {
			n := newFaultNode()
			m, logs := n.manager()
			ctx := context.Background()
			if _, err := m.Devices(ctx, 1e9); err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				n.set(strconv.Itoa(i)+"/handle", r)
			}
			n.set("init", gonvml.ERROR_DRIVER_NOT_LOADED)
			ds, err := m.Devices(ctx, 2e9)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), r.Error()) || ds != nil {
				t.Fatalf("devices failing with %s: %d devices, %v; want the read to fail", r.Error(), len(ds), err)
			}
			// the read stopped at the first device: no point asking seven more
			if st := m.Status(); st.Available || n.count("shutdown") != 1 || n.count("1/handle") != 1 {
				t.Fatalf("status %+v, %d shutdowns, GPU 1 asked %d times; want degraded, NVML shut down once, the read stopped at GPU 0",
					st, n.count("shutdown"), n.count("1/handle")-1)
			}
			for _, step := range []struct{ now, next int64 }{{3e9, 5e9}, {5e9, 9e9}, {9e9, 17e9}} {
				if _, err := m.Devices(ctx, step.now); !errors.Is(err, ErrUnavailable) || m.Status().NextRetryNs != step.next ||
					!strings.Contains(m.Status().Reason, "ERROR_DRIVER_NOT_LOADED") {
					t.Fatalf("at %d: %v, status %+v; want DRIVER_NOT_LOADED, next retry at %d", step.now, err, m.Status(), step.next)
				}
			}
			n.faults = map[string]gonvml.Return{} // the driver is back
			if _, err := m.Devices(ctx, 10e9); !errors.Is(err, ErrUnavailable) || n.count("init") != 4 {
				t.Fatalf("before the retry is due: %v, %d inits; want no Init", err, n.count("init"))
			}
			ds, err = m.Devices(ctx, 17e9)
			if st := m.Status(); err != nil || len(ds) != 8 || !ds[7].Memory.Known || !st.Available || st.Reason != "" || st.LastReadNs != 17e9 {
				t.Fatalf("driver back: %d devices, %v, status %+v; want all 8, available", len(ds), err, st)
			}
			// one line per change: the failed read, then Init's reason
			if w := logs.Count(`msg="NVML unavailable: running degraded (no GPU memory cross-check)"`); w != 2 {
				t.Fatalf("%d degraded log lines over 4 failed reads; want 2", w)
			}
		})
	}
}

// Memory figures no GPU can have are not used: v2's fall back to v1, and
// with both nonsense the memory is unknown (a problem) rather than a
// bound computed from them; a utilization above 100 % is unknown. Counts no node has fail the read (device
// count) or list no instance (MIG slots) instead of looping on them.
func TestNonsenseFigures(t *testing.T) {
	n := newFaultNode()
	good := gonvml.Memory_v2{Total: 80 << 30, Used: 10 << 30, Free: 70 << 30}
	v2 := map[int]gonvml.Memory_v2{
		0: {Total: 80 << 30, Used: 90 << 30},                    // used > total
		1: {Total: 0},                                           // total 0
		2: {Total: 80 << 30, Used: 50 << 30, Free: 50 << 30},    // used + free > total
		3: {Total: 1 << 62, Used: 1 << 30, Free: 1 << 30},       // 4 EiB
		4: {Total: 80 << 30, Reserved: 81 << 30, Free: 1 << 30}, // reserved > total
	}
	n.mem = func(i int) gonvml.Memory_v2 {
		if m, ok := v2[i]; ok {
			return m
		}
		return good
	}
	// v1 of devices 1 and 3 is nonsense too; of the others, good
	n.s.Devices[1].(*server.Device).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		return gonvml.Memory{}, gonvml.SUCCESS
	}
	n.s.Devices[3].(*server.Device).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		return gonvml.Memory{Total: 80 << 30, Used: 81 << 30}, gonvml.SUCCESS
	}
	for _, i := range []int{0, 2, 4} {
		n.s.Devices[i].(*server.Device).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
			return gonvml.Memory{Total: 80 << 30, Used: 10 << 30, Free: 70 << 30}, gonvml.SUCCESS
		}
	}
	// a utilization share above 100 %
	n.s.Devices[7].(*server.Device).GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{Gpu: 250}, gonvml.SUCCESS
	}
	m, _ := n.manager()
	ds, err := m.Devices(context.Background(), 1e9)
	if err != nil {
		t.Fatal(err)
	}
	if d := ds[7]; d.Utilization.Known || !d.Problem || !d.Memory.Known || len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "gpu 250 %") {
		t.Fatalf("device 7 at 250 %% utilization: %+v; want utilization unknown, a problem", d)
	}
	for _, i := range []int{0, 2, 4} {
		d := ds[i]
		if !d.Memory.Known || d.Memory.Source != "v1" || d.Memory.TotalBytes != 80<<30 || d.Problem ||
			len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "GetMemoryInfo_v2: implausible") {
			t.Fatalf("device %d with nonsense v2: %+v; want v1's figures, noted", i, d)
		}
	}
	for _, i := range []int{1, 3} {
		d := ds[i]
		if d.Memory.Known || d.Memory.TotalBytes != 0 || !d.Problem || len(d.Notes) != 1 ||
			!strings.HasPrefix(d.Notes[0], "memory unknown: GetMemoryInfo_v2: implausible") {
			t.Fatalf("device %d with nonsense v2 and v1: %+v; want memory unknown, a problem", i, d)
		}
	}
	if !ds[5].Memory.Known || ds[5].Memory.Source != "v2" {
		t.Fatalf("device 5: %+v", ds[5])
	}
	if st := m.Status(); len(st.Problems) != 3 || st.Problems[0].Index != 1 || st.Problems[1].Index != 3 || st.Problems[2].Index != 7 {
		t.Fatalf("status %+v; want problems on GPUs 1, 3 and 7", st)
	}

	// a device count no node has
	n.s.DeviceGetCountFunc = func() (int, gonvml.Return) { return 1 << 30, gonvml.SUCCESS }
	c := initClient(t, n.s)
	if ds, err := c.Devices(context.Background()); err == nil || !strings.Contains(err.Error(), "implausible") || ds != nil {
		t.Fatalf("2^30 devices: %d, %v; want the read to fail", len(ds), err)
	}
	// MIG slots no GPU has
	n.s.DeviceGetCountFunc = func() (int, gonvml.Return) { return 8, gonvml.SUCCESS }
	dev := n.s.Devices[6].(*server.Device)
	dev.MigMode = gonvml.DEVICE_MIG_ENABLE
	dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 1 << 30, gonvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) {
		t.Error("MIG slots read beyond any GPU's")
		return nil, gonvml.ERROR_UNKNOWN
	}
	ds, err = c.Devices(context.Background())
	if err != nil || len(ds) != 8 || !ds[6].Problem || !strings.Contains(strings.Join(ds[6].Notes, ";"), "implausible") {
		t.Fatalf("2^30 MIG slots: %d devices, %v, GPU 6 %+v", len(ds), err, ds[6])
	}
}

// Nonsense figures that change at every read are one fault: logged once,
// not once per read.
func TestChangingNonsenseLogsOnce(t *testing.T) {
	n := newFaultNode()
	used := uint64(90 << 30)
	n.mem = func(i int) gonvml.Memory_v2 {
		if i == 0 {
			used += 1 << 20
			return gonvml.Memory_v2{Total: 80 << 30, Used: used}
		}
		return gonvml.Memory_v2{Total: 80 << 30, Used: 10 << 30, Free: 70 << 30}
	}
	m, logs := n.manager()
	var notes []string
	for _, now := range []int64{1e9, 2e9, 3e9} {
		ds, err := m.Devices(context.Background(), now)
		if err != nil || ds[0].Memory.Known || !ds[0].Problem {
			t.Fatalf("at %d: %+v, %v; want GPU 0's memory unknown", now, ds[0], err)
		}
		notes = append(notes, ds[0].Notes[0])
	}
	if notes[0] == notes[2] {
		t.Fatalf("the figures did not change: %q", notes[0])
	}
	if got := logs.Count(`msg="NVML device problem"`); got != 1 {
		t.Fatalf("%d problem log lines over three reads of changing figures; want 1", got)
	}
}

// A MIG-enabled GPU whose UUID cannot be read lists no instances: they
// could not name their parent and would pass for a whole GPU of its
// index.
func TestMIGParentUUIDUnknown(t *testing.T) {
	n := newFaultNode()
	dev := n.s.Devices[2].(*server.Device)
	dev.MigMode = gonvml.DEVICE_MIG_ENABLE
	dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i > 0 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return &mock.Device{GetUUIDFunc: func() (string, gonvml.Return) { return "MIG-a", gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	n.set("2/uuid", gonvml.ERROR_UNKNOWN)
	c := initClient(t, n.s)
	ds, err := c.Devices(context.Background())
	if err != nil || len(ds) != 8 || ds[3].Index != 3 || !ds[2].Problem ||
		!strings.Contains(strings.Join(ds[2].Notes, ";"), "MIG instances not listed") {
		t.Fatalf("%d devices, %v, GPU 2 %+v; want 8 GPUs, no instance", len(ds), err, ds[2])
	}
	n.set("2/uuid", gonvml.SUCCESS)
	if ds, err := c.Devices(context.Background()); err != nil || len(ds) != 9 || ds[3].Parent != ds[2].UUID || ds[3].UUID != "MIG-a" {
		t.Fatalf("UUID readable: %d devices, %v; want the instance under GPU 2", len(ds), err)
	}
}
