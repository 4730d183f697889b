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
// NVML calls can hang (go-nvml #152), so every call made by Client runs on
// one worker goroutine under a timeout; after a timeout the worker stays
// busy until the hung call returns and later calls fail fast with
// ErrTimeout instead of piling up goroutines. A panic inside the library
// wrapper (e.g. an unset mock function) is recovered and reported as that
// call failing.
//
// A Manager adds the degraded mode: when the library is missing
// (ERROR_LIBRARY_NOT_FOUND: no libnvidia-ml.so.1) or Init fails or hangs, it
// reports Status{Available: false, Reason: ...} and retries Init with
// exponential backoff (1 s doubling to 1 min) on later reads, never
// crashing. Time is a parameter of the Manager's methods.
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
