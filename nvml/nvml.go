//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Interface is go-nvml's library interface: the real library (Library)
// or go-nvml's mocks in tests.
type Interface = gonvml.Interface

// Library returns the real NVML library (dlopened at Init).
func Library() Interface { return gonvml.New() }

// Client reads devices through a go-nvml Interface under timeouts.
type Client struct {
	lib     Interface
	timeout time.Duration
	log     *slog.Logger
	worker  chan struct{} // capacity 1: held while a call runs
	inited  atomic.Bool
}

// NewClient returns a client over lib; timeout bounds each call (<= 0: 5 s).
func NewClient(lib Interface, timeout time.Duration, logger *slog.Logger) *Client {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{lib: lib, timeout: timeout, log: logger, worker: make(chan struct{}, 1)}
}

// call runs f on a worker under the timeout; f's panics become errors.
func (c *Client) call(ctx context.Context, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	select {
	case c.worker <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s: an earlier call is still running", ErrTimeout, what)
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-c.worker }()
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("nvml: %s: library call panicked: %v", what, p)
			}
		}()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		c.log.Warn("NVML call timed out", "call", what, "timeout", c.timeout)
		return fmt.Errorf("%w: %s after %v", ErrTimeout, what, c.timeout)
	}
}

// safe runs one library call, turning a panic into ERROR_UNKNOWN.
func safe(f func() gonvml.Return) (ret gonvml.Return) {
	defer func() {
		if recover() != nil {
			ret = gonvml.ERROR_UNKNOWN
		}
	}()
	return f()
}

// Init loads and initialises NVML.
func (c *Client) Init(ctx context.Context) error {
	err := c.call(ctx, "Init", func() error {
		ret := c.lib.Init()
		switch ret {
		case gonvml.SUCCESS:
			return nil
		case gonvml.ERROR_LIBRARY_NOT_FOUND:
			return ErrLibraryNotFound
		}
		return fmt.Errorf("nvml: Init: %s", ret.Error())
	})
	if err == nil {
		c.inited.Store(true)
	}
	return err
}

// Shutdown releases NVML.
func (c *Client) Shutdown(ctx context.Context) error {
	if !c.inited.Swap(false) {
		return nil
	}
	return c.call(ctx, "Shutdown", func() error {
		if ret := safe(c.lib.Shutdown); ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: Shutdown: %s", ret.Error())
		}
		return nil
	})
}

// Devices reads every device (and MIG instance) under one timeout.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	if !c.inited.Load() {
		return nil, ErrNotInitialized
	}
	var out []Device
	err := c.call(ctx, "Devices", func() error {
		var n int
		ret := safe(func() gonvml.Return { var r gonvml.Return; n, r = c.lib.DeviceGetCount(); return r })
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: DeviceGetCount: %s", ret.Error())
		}
		for i := 0; i < n; i++ {
			var h gonvml.Device
			ret := safe(func() gonvml.Return { var r gonvml.Return; h, r = c.lib.DeviceGetHandleByIndex(i); return r })
			if ret != gonvml.SUCCESS || h == nil {
				out = append(out, Device{Index: i, Notes: []string{"DeviceGetHandleByIndex: " + ret.Error()}})
				continue
			}
			d := readDevice(h, i)
			d.MIG = migEnabled(h)
			out = append(out, d)
			if d.MIG {
				out = append(out, readMIG(h, d.UUID, &out[len(out)-1])...)
			}
		}
		return nil
	})
	return out, err
}

func readDevice(h gonvml.Device, index int) Device {
	d := Device{Index: index}
	ret := safe(func() gonvml.Return { var r gonvml.Return; d.UUID, r = h.GetUUID(); return r })
	if ret != gonvml.SUCCESS {
		d.Notes = append(d.Notes, "GetUUID: "+ret.Error())
	}
	ret = safe(func() gonvml.Return { var r gonvml.Return; d.Name, r = h.GetName(); return r })
	if ret != gonvml.SUCCESS {
		d.Notes = append(d.Notes, "GetName: "+ret.Error())
	}
	d.Memory, d.Notes = readMemory(h, d.Notes)
	d.Utilization, d.Notes = readUtilization(h, d.Notes)
	d.Processes, d.Notes = readProcesses(h, d.Notes)
	return d
}

// readUtilization reads GetUtilizationRates; failing leaves Known false
// with a note.
func readUtilization(h gonvml.Device, notes []string) (Utilization, []string) {
	var u gonvml.Utilization
	ret := safe(func() gonvml.Return { var r gonvml.Return; u, r = h.GetUtilizationRates(); return r })
	if ret != gonvml.SUCCESS || u.Gpu > 100 {
		return Utilization{}, append(notes, fmt.Sprintf("utilization unknown: GetUtilizationRates: %s (gpu %d %%)", ret.Error(), u.Gpu))
	}
	return Utilization{GPUPercent: u.Gpu, Known: true}, notes
}

// readMemory tries GetMemoryInfo_v2, then v1; both failing leaves Known
// false with a note.
func readMemory(h gonvml.Device, notes []string) (Memory, []string) {
	var m2 gonvml.Memory_v2
	r2 := safe(func() gonvml.Return { var r gonvml.Return; m2, r = h.GetMemoryInfo_v2(); return r })
	if r2 == gonvml.SUCCESS {
		return Memory{TotalBytes: m2.Total, UsedBytes: m2.Used, FreeBytes: m2.Free, ReservedBytes: m2.Reserved,
			Source: "v2", Known: true}, notes
	}
	var m1 gonvml.Memory
	r1 := safe(func() gonvml.Return { var r gonvml.Return; m1, r = h.GetMemoryInfo(); return r })
	if r1 == gonvml.SUCCESS {
		return Memory{TotalBytes: m1.Total, UsedBytes: m1.Used, FreeBytes: m1.Free, Source: "v1", Known: true}, notes
	}
	return Memory{}, append(notes, fmt.Sprintf("memory unknown: GetMemoryInfo_v2: %s; GetMemoryInfo: %s", r2.Error(), r1.Error()))
}

func readProcesses(h gonvml.Device, notes []string) ([]Process, []string) {
	var ps []gonvml.ProcessInfo
	ret := safe(func() gonvml.Return { var r gonvml.Return; ps, r = h.GetComputeRunningProcesses(); return r })
	if ret != gonvml.SUCCESS {
		return nil, append(notes, "GetComputeRunningProcesses: "+ret.Error())
	}
	out := make([]Process, 0, len(ps))
	for _, p := range ps {
		out = append(out, Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory})
	}
	return out, notes
}

func migEnabled(h gonvml.Device) bool {
	var cur int
	ret := safe(func() gonvml.Return { var r gonvml.Return; cur, _, r = h.GetMigMode(); return r })
	return ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE
}

func readMIG(h gonvml.Device, parent string, pd *Device) []Device {
	var n int
	ret := safe(func() gonvml.Return { var r gonvml.Return; n, r = h.GetMaxMigDeviceCount(); return r })
	if ret != gonvml.SUCCESS {
		pd.Notes = append(pd.Notes, "GetMaxMigDeviceCount: "+ret.Error())
		return nil
	}
	var out []Device
	for i := 0; i < n; i++ {
		var mh gonvml.Device
		ret := safe(func() gonvml.Return { var r gonvml.Return; mh, r = h.GetMigDeviceHandleByIndex(i); return r })
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue // no instance in this slot
		}
		if ret != gonvml.SUCCESS || mh == nil {
			pd.Notes = append(pd.Notes, fmt.Sprintf("GetMigDeviceHandleByIndex(%d): %s", i, ret.Error()))
			continue
		}
		d := readDevice(mh, pd.Index)
		d.Parent, d.MIGIndex = parent, i
		out = append(out, d)
	}
	return out
}
