// Package nvml is Narwhal's small view of the node's GPUs through NVIDIA's
// NVML (github.com/NVIDIA/go-nvml): devices and their UUID, name and
// memory (total/used/free/reserved), utilization (utilization.gpu: the
// share of the last sample period in which a kernel ran), the processes
// running on them with their memory, and MIG instances.
//
// A Client wraps any go-nvml Interface (the real library from Library, or
// go-nvml's mocks in tests). Memory is read with GetMemoryInfo_v2 and falls
// back to v1 when v2 is missing (FUNCTION_NOT_FOUND on old drivers, or any
// failure); when both fail (NOT_SUPPORTED on unified-memory parts) the
// device is still listed with Memory.Known false and a note. Per-device
// failures never fail the whole read.
//
// What production GPUs answer, and what a read makes of it:
//   - ERROR_GPU_IS_LOST (a GPU fallen off the bus), or any failure of
//     one device's call: that device alone is listed with what failed
//     (Notes, Problem true); a lost GPU's handle or UUID failing leaves
//     it with its index only, so an engine naming it by UUID finds no
//     GPU and one naming its index finds its memory unknown. A
//     MIG-enabled GPU whose UUID is unknown lists no instances (they could
//     not name their parent).
//   - ERROR_NOT_SUPPORTED or FUNCTION_NOT_FOUND from the utilization or
//     the process list (MIG instances, some vGPU and consumer parts) is
//     what the part does not do: noted, Problem false. Memory unknown is
//     always a problem (the agent's KV cross-check needs it).
//   - ERROR_INSUFFICIENT_SIZE from the process list (it grew between
//     NVML's size query and the copy): asked again, three calls in all,
//     then the list is unknown (Processes nil). A process whose memory
//     NVML cannot attribute (NVML_VALUE_NOT_AVAILABLE) counts 0 bytes.
//   - ERROR_UNINITIALIZED, ERROR_DRIVER_NOT_LOADED or
//     ERROR_LIB_RM_VERSION_MISMATCH from any call (a driver reloaded or
//     replaced under the agent) fails the whole read, so the Manager
//     shuts NVML down and initialises it again, instead of listing every
//     device unknown until the agent restarts. After a driver upgrade
//     the old libnvidia-ml stays loaded (go-nvml keeps it open once an
//     Init failed), so a version mismatch lasts until the agent restarts;
//     the Manager reports it as its reason.
//   - Figures no GPU has are not used: a memory total of 0 or above
//     1 PiB, a used, free or reserved figure above the total, or used +
//     free above it make v2's figures fall back to v1, and v1's unknown;
//     utilization above 100 % is unknown; a device count above 64 fails
//     the read, a MIG slot count above 16 lists no instances (NVML has 7
//     at most), rather than looping on them.
//
// NVML calls can hang (go-nvml #152), so every call made by Client runs on
// one worker goroutine under a timeout; after a timeout the worker stays
// busy until the hung call returns and later calls fail fast with
// ErrTimeout instead of piling up goroutines. NVML counts initialisations
// and unloads at the last Shutdown: an Init that answers SUCCESS after its
// call timed out is shut down before the next Init and by Shutdown, so
// the count does not grow with each hang. A panic inside the library
// wrapper (e.g. an unset mock function) is recovered and reported as that
// call failing.
//
// A Manager adds the degraded mode: when the library is missing
// (ERROR_LIBRARY_NOT_FOUND: no libnvidia-ml.so.1) or Init fails or hangs, it
// reports Status{Available: false, Reason: ...} and retries Init with
// exponential backoff (1 s doubling to 1 min) on later reads, never
// crashing; a read that fails as a whole (the device count failing,
// even once with ERROR_UNKNOWN or ERROR_TIMEOUT) does the same: NVML is
// shut down and initialised again at the next due read. It logs one line
// per change of its reason, not per read. Its Status also lists, as of
// the last successful read, the devices with a Problem (Status.Problems:
// index, MIG index, UUID, whether the memory is known, the notes): a
// device's problem is logged when it appears or its notes change (warn;
// figures changing alone, as implausible memory's may at every read, are
// no change) and when it ends (info), once, however many reads see it;
// that record
// holds one entry per device listed. Time is a parameter of the
// Manager's methods.
//
// Concurrency: Client and Manager are safe for concurrent use; calls are
// serialised (NVML itself is thread-safe, but serialising bounds the cost
// of a hang to one goroutine).
// Allocation: reads allocate the returned slices; they run once per
// snapshot interval, not on a hot path.
//
// Builds without cgo: go-nvml loads libnvidia-ml.so.1 through cgo, and
// the go command builds with CGO_ENABLED=0 on a machine with no C
// compiler. Such a build (nocgo.go) compiles the same API whose Client
// fails Init with ErrBuiltWithoutCgo, so the Manager stays degraded and
// says why: the agent and its tests build and run with only Go installed,
// and a node agent built that way reports engines without the GPU memory
// cross-check. Release images build with cgo.
//
// This package must never be imported from core/ (which builds with
// CGO_ENABLED=0).
package nvml
