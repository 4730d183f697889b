package nvml

import "errors"

// Sentinel errors, comparable with errors.Is.
var (
	// ErrLibraryNotFound: libnvidia-ml.so.1 could not be loaded.
	ErrLibraryNotFound = errors.New("nvml: library libnvidia-ml.so.1 not found")
	// ErrTimeout: an NVML call did not return in time (or an earlier one is
	// still hung).
	ErrTimeout = errors.New("nvml: call timed out")
	// ErrNotInitialized: Devices was called before a successful Init.
	ErrNotInitialized = errors.New("nvml: not initialized")
	// ErrUnavailable: the Manager is in degraded mode.
	ErrUnavailable = errors.New("nvml: unavailable (degraded mode)")
	// ErrBuiltWithoutCgo: this binary was built with CGO_ENABLED=0 (as the
	// go command does on a machine without a C compiler); go-nvml loads
	// libnvidia-ml.so.1 through cgo, so such a build never reaches NVML.
	ErrBuiltWithoutCgo = errors.New("nvml: built without cgo (CGO_ENABLED=0); rebuild with a C compiler to read NVML")
)

// Memory is one device's framebuffer memory in bytes.
type Memory struct {
	TotalBytes    uint64 `json:"total_bytes"`
	UsedBytes     uint64 `json:"used_bytes"`
	FreeBytes     uint64 `json:"free_bytes"`
	ReservedBytes uint64 `json:"reserved_bytes"`
	// Source is "v2", "v1" or "" when unknown.
	Source string `json:"source"`
	Known  bool   `json:"known"`
}

// Utilization is NVML's utilization.gpu: the percent of its last sample
// period (between 1/6 s and 1 s, by product) in which one or more kernels
// ran on the GPU. Known is false when NVML cannot say (MIG instances
// never report it).
type Utilization struct {
	GPUPercent uint32 `json:"gpu_percent"`
	Known      bool   `json:"known"`
}

// Process is one compute process on a device (host PID namespace).
type Process struct {
	PID uint32 `json:"pid"`
	// UsedBytes is 0 when NVML cannot attribute memory to the process
	// (NVML_VALUE_NOT_AVAILABLE: MIG instances, vGPU).
	UsedBytes uint64 `json:"used_bytes"`
}

// Device is one GPU, or one MIG instance (Parent set).
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	// Parent is the parent GPU's UUID for a MIG instance, "" otherwise;
	// MIGIndex is the instance's index under it.
	Parent      string      `json:"parent,omitempty"`
	MIGIndex    int         `json:"mig_index,omitempty"`
	MIG         bool        `json:"mig_enabled,omitempty"` // a parent with MIG mode on
	Memory      Memory      `json:"memory"`
	Utilization Utilization `json:"utilization"`
	// Processes is nil when the list could not be read (see Notes).
	Processes []Process `json:"processes"`
	// Notes say what could not be read and why.
	Notes []string `json:"notes,omitempty"`
	// Problem is true when a note is a fault: a call that failed, or
	// figures no GPU can have. It is false for what the part does not do
	// (ERROR_NOT_SUPPORTED utilization or process list: MIG instances,
	// some vGPU and consumer parts).
	Problem bool `json:"problem,omitempty"`
}
