//go:build cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func initClient(t *testing.T, lib gonvml.Interface) *Client {
	t.Helper()
	c := NewClient(lib, time.Second, nil)
	if err := c.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestH100MemoryV2AndProcesses(t *testing.T) {
	s := dgxh100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		used := uint64(i+1) << 30
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			return gonvml.Memory_v2{Total: 80 << 30, Reserved: 512 << 20, Used: used, Free: 80<<30 - used - 512<<20}, gonvml.SUCCESS
		}
		util := uint32(10 * i)
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: util, Memory: 5}, gonvml.SUCCESS
		}
		pid := uint32(1000 + i)
		dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return []gonvml.ProcessInfo{{Pid: pid, UsedGpuMemory: used}}, gonvml.SUCCESS
		}
	}
	ds, err := initClient(t, s).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 8 {
		t.Fatalf("unexpected device count; got %d; want 8", len(ds))
	}
	d := ds[3]
	if d.Index != 3 || d.UUID == "" || !strings.Contains(d.Name, "H100") || d.Memory.Source != "v2" || !d.Memory.Known ||
		d.Memory.TotalBytes != 80<<30 || d.Memory.UsedBytes != 4<<30 || d.Memory.ReservedBytes != 512<<20 ||
		d.Memory.FreeBytes != 80<<30-4<<30-512<<20 || d.Utilization != (Utilization{GPUPercent: 30, Known: true}) || len(d.Notes) != 0 {
		t.Fatalf("unexpected device; got %+v", d)
	}
	if len(d.Processes) != 1 || d.Processes[0].PID != 1003 || d.Processes[0].UsedBytes != 4<<30 {
		t.Fatalf("unexpected processes; got %+v", d.Processes)
	}
	if ds[0].UUID == ds[1].UUID {
		t.Fatal("devices share a UUID")
	}
}

func TestA100FallsBackToV1(t *testing.T) {
	// the A100 builder leaves GetMemoryInfo_v2 and GetComputeRunningProcesses
	// unset (calling them panics): the client falls back to v1 and notes the
	// processes as unreadable
	s := dgxa100.New()
	dev := s.Devices[0].(*server.Device)
	dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		return gonvml.Memory{Total: 40 << 30, Used: 30 << 30, Free: 10 << 30}, gonvml.SUCCESS
	}
	s.Devices[1].(*server.Device).GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
	}
	ds, err := initClient(t, s).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := ds[0].Memory
	if m.Source != "v1" || m.TotalBytes != 40<<30 || m.UsedBytes != 30<<30 || m.FreeBytes != 10<<30 || !m.Known {
		t.Fatalf("unexpected memory; got %+v", m)
	}
	if ds[1].Memory.Source != "v1" || !strings.Contains(ds[1].Name, "A100") {
		t.Fatalf("unexpected device 1; got %+v", ds[1])
	}
	// nor GetUtilizationRates: utilization unknown, with its note
	if len(ds[0].Processes) != 0 || len(ds[0].Notes) != 2 || ds[0].Utilization.Known ||
		!strings.Contains(ds[0].Notes[0], "utilization unknown: GetUtilizationRates: ERROR_UNKNOWN") ||
		!strings.Contains(ds[0].Notes[1], "GetComputeRunningProcesses") {
		t.Fatalf("unexpected processes/notes; got %+v / %v", ds[0].Processes, ds[0].Notes)
	}
}

func TestMemoryNotSupported(t *testing.T) {
	s := dgxh100.New()
	dev := s.Devices[0].(*server.Device)
	dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, gonvml.ERROR_NOT_SUPPORTED }
	dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_NOT_SUPPORTED }
	dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED }
	dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED }
	ds, err := initClient(t, s).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	if d.Memory.Known || d.Memory.TotalBytes != 0 || d.UUID == "" || len(d.Notes) != 3 || d.Utilization.Known ||
		!strings.Contains(d.Notes[0], "GetMemoryInfo_v2: ERROR_NOT_SUPPORTED; GetMemoryInfo: ERROR_NOT_SUPPORTED") ||
		!strings.Contains(d.Notes[1], "GetUtilizationRates: ERROR_NOT_SUPPORTED") ||
		!strings.Contains(d.Notes[2], "GetComputeRunningProcesses: ERROR_NOT_SUPPORTED") {
		t.Fatalf("unexpected device; got %+v", d)
	}
	if len(ds) != 8 {
		t.Fatalf("one device's failure dropped others; got %d devices", len(ds))
	}
}

func TestMIG(t *testing.T) {
	s := dgxh100.New()
	dev := s.Devices[2].(*server.Device)
	dev.MigMode = gonvml.DEVICE_MIG_ENABLE
	dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i > 1 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		uuid := []string{"MIG-aaaa", "MIG-bbbb"}[i]
		return &mock.Device{
			GetUUIDFunc: func() (string, gonvml.Return) { return uuid, gonvml.SUCCESS },
			GetNameFunc: func() (string, gonvml.Return) { return "NVIDIA H100 80GB HBM3 MIG 3g.40gb", gonvml.SUCCESS },
			GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) {
				return gonvml.Memory_v2{}, gonvml.ERROR_NOT_SUPPORTED
			},
			GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
				return gonvml.Memory{Total: 40 << 30, Used: 1 << 30, Free: 39 << 30}, gonvml.SUCCESS
			},
			GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
				return []gonvml.ProcessInfo{{Pid: 77, UsedGpuMemory: 1 << 30}}, gonvml.SUCCESS
			},
		}, gonvml.SUCCESS
	}
	ds, err := initClient(t, s).Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 10 {
		t.Fatalf("unexpected device count; got %d; want 8 GPUs + 2 MIG instances", len(ds))
	}
	parent, m0, m1 := ds[2], ds[3], ds[4]
	if !parent.MIG || m0.Parent != parent.UUID || m0.UUID != "MIG-aaaa" || m1.UUID != "MIG-bbbb" || m1.MIGIndex != 1 ||
		m0.Memory.Source != "v1" || m0.Memory.TotalBytes != 40<<30 || m0.Processes[0].PID != 77 || ds[5].Index != 3 {
		t.Fatalf("unexpected MIG devices; got %+v %+v %+v", parent, m0, m1)
	}
}

// An Init that hangs past its timeout fails fast while it holds the
// worker; once it returns, the client initialises again, and every Init
// the library answered SUCCESS to (the late one too) is matched by one
// Shutdown, so NVML's count of initialisations returns to zero.
func TestInitTimeoutAndHang(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	inits, shutdowns := 0, 0
	lib := &mock.Interface{
		InitFunc: func() gonvml.Return {
			<-release
			mu.Lock()
			defer mu.Unlock()
			inits++
			return gonvml.SUCCESS
		},
		ShutdownFunc: func() gonvml.Return {
			mu.Lock()
			defer mu.Unlock()
			shutdowns++
			return gonvml.SUCCESS
		},
	}
	c := NewClient(lib, 20*time.Millisecond, nil)
	if err := c.Init(context.Background()); !errors.Is(err, ErrTimeout) {
		t.Fatalf("unexpected error; got %v; want ErrTimeout", err)
	}
	// the hung call still holds the worker: the next one fails fast
	if err := c.Init(context.Background()); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("unexpected error; got %v; want ErrTimeout (still running)", err)
	}
	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := c.Init(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client did not recover after the hang ended: %v", err)
		}
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if inits != 2 || shutdowns != 2 {
		t.Fatalf("library calls: %d Inits (the late one and the recovery), %d Shutdowns; want 2 and 2", inits, shutdowns)
	}
	mu.Unlock()
	if err := c.Shutdown(context.Background()); err != nil || shutdowns != 2 {
		t.Fatalf("second Shutdown: %v, %d library Shutdowns; want nothing more", err, shutdowns)
	}
	if _, err := NewClient(lib, time.Second, nil).Devices(context.Background()); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("unexpected error; got %v; want ErrNotInitialized", err)
	}
}

func TestManagerLibraryNotFoundDegradesAndRetries(t *testing.T) {
	found := false
	s := dgxh100.New()
	lib := &mock.Interface{
		InitFunc: func() gonvml.Return {
			if !found {
				return gonvml.ERROR_LIBRARY_NOT_FOUND
			}
			return gonvml.SUCCESS
		},
		ShutdownFunc:               func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc:         s.DeviceGetCount,
		DeviceGetHandleByIndexFunc: s.DeviceGetHandleByIndex,
	}
	m := NewManager(lib, time.Second, nil)
	ctx := context.Background()
	step := func(nowNs int64, wantAttempts int, wantErr error) {
		t.Helper()
		_, err := m.Devices(ctx, nowNs)
		if wantErr == nil && err != nil || wantErr != nil && !errors.Is(err, wantErr) {
			t.Fatalf("at %d: unexpected error; got %v; want %v", nowNs, err, wantErr)
		}
		if st := m.Status(); st.Attempts != wantAttempts {
			t.Fatalf("at %d: unexpected attempts; got %d; want %d", nowNs, st.Attempts, wantAttempts)
		}
	}
	step(0, 1, ErrLibraryNotFound)
	st := m.Status()
	if st.Available || !strings.Contains(st.Reason, "libnvidia-ml.so.1") || st.NextRetryNs != 1e9 {
		t.Fatalf("unexpected status; got %+v", st)
	}
	step(5e8, 1, ErrUnavailable) // retry not due
	step(1e9, 2, ErrLibraryNotFound)
	if st := m.Status(); st.NextRetryNs != 3e9 { // backoff doubled to 2 s
		t.Fatalf("unexpected next retry; got %d; want 3e9", st.NextRetryNs)
	}
	found = true
	step(2e9, 2, ErrUnavailable)
	step(3e9, 3, nil)
	if st := m.Status(); !st.Available || st.Reason != "" || st.LastReadNs != 3e9 {
		t.Fatalf("unexpected status; got %+v", st)
	}
}

// NVML failing mid-run (a GPU fallen off the bus) degrades the manager,
// which retries after its backoff. When the node's clock steps back
// behind the failure, the retry is due at once (the elapsed time is
// unknown), not once the clock has caught up with the old time.
func TestManagerRetriesAfterTheClockStepsBack(t *testing.T) {
	lost := false
	s := dgxh100.New()
	lib := &mock.Interface{
		InitFunc:     func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc: func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc: func() (int, gonvml.Return) {
			if lost {
				return 0, gonvml.ERROR_GPU_IS_LOST
			}
			return s.DeviceGetCount()
		},
		DeviceGetHandleByIndexFunc: s.DeviceGetHandleByIndex,
	}
	m := NewManager(lib, time.Second, nil)
	ctx := context.Background()
	const t0, hour = int64(1_700_000_000e9), int64(3600e9)
	if _, err := m.Devices(ctx, t0); err != nil {
		t.Fatal(err)
	}
	lost = true
	if _, err := m.Devices(ctx, t0+1e9); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("GPU lost: %v; want ErrUnavailable", err)
	}
	lost = false
	// the clock steps back an hour: the one-second retry is not an hour away
	ds, err := m.Devices(ctx, t0+3e9-hour)
	if st := m.Status(); err != nil || len(ds) != 8 || !st.Available || st.Attempts != 2 {
		t.Fatalf("after the clock stepped back: %d devices, %v, status %+v; want 8 devices, NVML available again after 2 attempts",
			len(ds), err, st)
	}
}

func TestRealLibraryMissing(t *testing.T) {
	c := NewClient(Library(), 5*time.Second, nil)
	err := c.Init(context.Background())
	if err == nil {
		_ = c.Shutdown(context.Background())
		t.Skip("libnvidia-ml.so.1 is present on this machine; the missing-library path is covered by the mock test")
	}
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("unexpected error; got %v; want ErrLibraryNotFound", err)
	}
}
