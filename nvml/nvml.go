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
	// held counts the library's successful Inits not yet matched by a
	// Shutdown (NVML counts them too, and unloads at the last Shutdown).
	// An Init that returns after its timeout still counts: it is
	// released before the next Init and by Shutdown.
	held atomic.Int32
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
		c.release()
		ret := c.lib.Init()
		switch ret {
		case gonvml.SUCCESS:
			c.held.Add(1)
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

// Shutdown releases NVML: every Init the client holds, including one
// that completed after its call had timed out.
func (c *Client) Shutdown(ctx context.Context) error {
	c.inited.Store(false)
	if c.held.Load() == 0 {
		return nil
	}
	return c.call(ctx, "Shutdown", c.release)
}

// release shuts the library down once per Init held (on the worker).
// A Shutdown that fails is not retried: the library answered that it
// holds no more.
func (c *Client) release() error {
	for c.held.Load() > 0 {
		if ret := safe(c.lib.Shutdown); ret != gonvml.SUCCESS {
			c.held.Store(0)
			return fmt.Errorf("nvml: Shutdown: %s", ret.Error())
		}
		c.held.Add(-1)
	}
	return nil
}

// Read limits: counts beyond them are not what a node holds but garbage
// (a driver in a bad state), and reading them would loop for as long.
const (
	maxDevices   = 64 // GPUs NVML may report on one node
	maxMIGPerGPU = 16 // MIG device slots per GPU (NVML has 7 at most)
	// maxMemoryBytes: a memory figure above 1 PiB is nonsense.
	maxMemoryBytes = 1 << 50
	// processTries bounds the process-list call while it answers
	// ERROR_INSUFFICIENT_SIZE (the list grew between NVML's size query
	// and the copy; NVML's documented answer is to ask again).
	processTries = 3
	// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE in a 64-bit field: a
	// process's memory that NVML cannot attribute (MIG, vGPU, WDDM).
	valueNotAvailable = ^uint64(0)
)

// libraryGone reports whether ret says NVML as a whole stopped answering
// (shut down, its driver unloaded or replaced), not one device.
func libraryGone(ret gonvml.Return) bool {
	switch ret {
	case gonvml.ERROR_UNINITIALIZED, gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return true
	}
	return false
}

// reader makes one Devices read's calls and remembers the first that
// said the library is gone.
type reader struct{ gone gonvml.Return }

func (r *reader) do(f func() gonvml.Return) gonvml.Return {
	ret := safe(f)
	if libraryGone(ret) && r.gone == gonvml.SUCCESS {
		r.gone = ret
	}
	return ret
}

// note records on d what could not be read; problem says whether it is a
// fault (counted and logged by the Manager) rather than something this
// part does not do.
func (d *Device) note(problem bool, s string) {
	d.Notes = append(d.Notes, s)
	d.Problem = d.Problem || problem
}

// unsupported: the part does not do it (a fact, not a fault).
func unsupported(ret gonvml.Return) bool {
	return ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_FUNCTION_NOT_FOUND
}

// Devices reads every device (and MIG instance) under one timeout. A
// call answering that the library itself is gone (ERROR_UNINITIALIZED,
// ERROR_DRIVER_NOT_LOADED, ERROR_LIB_RM_VERSION_MISMATCH: a driver
// reloaded or replaced under the agent) fails the whole read, so the
// Manager re-initialises NVML rather than list every device as unknown
// for as long as the agent runs.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	if !c.inited.Load() {
		return nil, ErrNotInitialized
	}
	var out []Device
	err := c.call(ctx, "Devices", func() error {
		rd := &reader{}
		var n int
		ret := rd.do(func() gonvml.Return { var r gonvml.Return; n, r = c.lib.DeviceGetCount(); return r })
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: DeviceGetCount: %s", ret.Error())
		}
		if n < 0 || n > maxDevices {
			return fmt.Errorf("nvml: DeviceGetCount: %d devices: implausible (0..%d)", n, maxDevices)
		}
		for i := 0; i < n && rd.gone == gonvml.SUCCESS; i++ {
			var h gonvml.Device
			ret := rd.do(func() gonvml.Return { var r gonvml.Return; h, r = c.lib.DeviceGetHandleByIndex(i); return r })
			if ret != gonvml.SUCCESS || h == nil {
				d := Device{Index: i}
				d.note(true, "DeviceGetHandleByIndex: "+ret.Error())
				out = append(out, d)
				continue
			}
			out = append(out, readDevice(rd, h, i))
			pd := &out[len(out)-1]
			pd.MIG = migEnabled(rd, h)
			switch {
			case !pd.MIG:
			case pd.UUID == "":
				// its instances could not name their parent and would
				// pass for a whole GPU of the same index
				pd.note(true, "MIG instances not listed: the GPU's UUID is unknown")
			default:
				out = append(out, readMIG(rd, h, pd.UUID, pd)...)
			}
		}
		if rd.gone != gonvml.SUCCESS {
			out = nil
			return fmt.Errorf("nvml: %s during the device read: NVML must be initialised again", rd.gone.Error())
		}
		return nil
	})
	return out, err
}

func readDevice(rd *reader, h gonvml.Device, index int) Device {
	d := Device{Index: index}
	ret := rd.do(func() gonvml.Return { var r gonvml.Return; d.UUID, r = h.GetUUID(); return r })
	if ret != gonvml.SUCCESS {
		d.UUID = ""
		d.note(true, "GetUUID: "+ret.Error())
	}
	ret = rd.do(func() gonvml.Return { var r gonvml.Return; d.Name, r = h.GetName(); return r })
	if ret != gonvml.SUCCESS {
		d.Name = ""
		d.note(true, "GetName: "+ret.Error())
	}
	readMemory(rd, h, &d)
	readUtilization(rd, h, &d)
	readProcesses(rd, h, &d)
	return d
}

// readUtilization reads GetUtilizationRates; failing, or a share above
// 100 %, leaves Known false with a note.
func readUtilization(rd *reader, h gonvml.Device, d *Device) {
	var u gonvml.Utilization
	ret := rd.do(func() gonvml.Return { var r gonvml.Return; u, r = h.GetUtilizationRates(); return r })
	if ret != gonvml.SUCCESS || u.Gpu > 100 {
		d.note(!unsupported(ret), fmt.Sprintf("utilization unknown: GetUtilizationRates: %s (gpu %d %%)", ret.Error(), u.Gpu))
		return
	}
	d.Utilization = Utilization{GPUPercent: u.Gpu, Known: true}
}

// implausible says what is wrong with memory figures no GPU can have
// ("" when they can be used): a total of 0 or above maxMemoryBytes, a
// part larger than the total, or used and free adding up to more (v1:
// used + free = total; v2 leaves reserved out of both).
func implausible(total, used, free, reserved uint64) string {
	switch {
	case total == 0 || total > maxMemoryBytes:
		return fmt.Sprintf("implausible total %d B", total)
	case used > total || free > total || reserved > total || used+free > total:
		return fmt.Sprintf("implausible: used %d B, free %d B, reserved %d B of %d B", used, free, reserved, total)
	}
	return ""
}

// readMemory tries GetMemoryInfo_v2, then v1 (also when v2's figures are
// implausible); both failing leaves Known false with a note.
func readMemory(rd *reader, h gonvml.Device, d *Device) {
	var m2 gonvml.Memory_v2
	r2 := rd.do(func() gonvml.Return { var r gonvml.Return; m2, r = h.GetMemoryInfo_v2(); return r })
	why2 := r2.Error()
	if r2 == gonvml.SUCCESS {
		if why2 = implausible(m2.Total, m2.Used, m2.Free, m2.Reserved); why2 == "" {
			d.Memory = Memory{TotalBytes: m2.Total, UsedBytes: m2.Used, FreeBytes: m2.Free, ReservedBytes: m2.Reserved,
				Source: "v2", Known: true}
			return
		}
	}
	var m1 gonvml.Memory
	r1 := rd.do(func() gonvml.Return { var r gonvml.Return; m1, r = h.GetMemoryInfo(); return r })
	why1 := r1.Error()
	if r1 == gonvml.SUCCESS {
		if why1 = implausible(m1.Total, m1.Used, m1.Free, 0); why1 == "" {
			d.Memory = Memory{TotalBytes: m1.Total, UsedBytes: m1.Used, FreeBytes: m1.Free, Source: "v1", Known: true}
			if r2 == gonvml.SUCCESS {
				d.note(false, "GetMemoryInfo_v2: "+why2+"; using GetMemoryInfo")
			}
			return
		}
	}
	d.note(true, fmt.Sprintf("memory unknown: GetMemoryInfo_v2: %s; GetMemoryInfo: %s", why2, why1))
}

// readProcesses reads the compute processes, asking again (processTries
// in all) while NVML answers ERROR_INSUFFICIENT_SIZE. A process whose
// memory NVML cannot attribute (NVML_VALUE_NOT_AVAILABLE) gets UsedBytes
// 0.
func readProcesses(rd *reader, h gonvml.Device, d *Device) {
	var ps []gonvml.ProcessInfo
	var ret gonvml.Return
	for try := 0; try < processTries; try++ {
		ret = rd.do(func() gonvml.Return { var r gonvml.Return; ps, r = h.GetComputeRunningProcesses(); return r })
		if ret != gonvml.ERROR_INSUFFICIENT_SIZE {
			break
		}
	}
	if ret != gonvml.SUCCESS {
		d.note(!unsupported(ret), "GetComputeRunningProcesses: "+ret.Error())
		return
	}
	d.Processes = make([]Process, 0, len(ps))
	for _, p := range ps {
		used := p.UsedGpuMemory
		if used == valueNotAvailable {
			used = 0
		}
		d.Processes = append(d.Processes, Process{PID: p.Pid, UsedBytes: used})
	}
}

func migEnabled(rd *reader, h gonvml.Device) bool {
	var cur int
	ret := rd.do(func() gonvml.Return { var r gonvml.Return; cur, _, r = h.GetMigMode(); return r })
	return ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE
}

func readMIG(rd *reader, h gonvml.Device, parent string, pd *Device) []Device {
	var n int
	ret := rd.do(func() gonvml.Return { var r gonvml.Return; n, r = h.GetMaxMigDeviceCount(); return r })
	if ret != gonvml.SUCCESS {
		pd.note(true, "GetMaxMigDeviceCount: "+ret.Error())
		return nil
	}
	if n < 0 || n > maxMIGPerGPU {
		pd.note(true, fmt.Sprintf("GetMaxMigDeviceCount: %d: implausible (0..%d); MIG instances not listed", n, maxMIGPerGPU))
		return nil
	}
	var out []Device
	for i := 0; i < n && rd.gone == gonvml.SUCCESS; i++ {
		var mh gonvml.Device
		ret := rd.do(func() gonvml.Return { var r gonvml.Return; mh, r = h.GetMigDeviceHandleByIndex(i); return r })
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue // no instance in this slot
		}
		if ret != gonvml.SUCCESS || mh == nil {
			pd.note(true, fmt.Sprintf("GetMigDeviceHandleByIndex(%d): %s", i, ret.Error()))
			continue
		}
		d := readDevice(rd, mh, pd.Index)
		d.Parent, d.MIGIndex = parent, i
		out = append(out, d)
	}
	return out
}
