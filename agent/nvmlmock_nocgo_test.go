//go:build !cgo

package agent

import (
	"testing"

	"github.com/narwhal-io/narwhal/nvml"
)

// needNVMLMock skips a test that reads go-nvml's mock devices: go-nvml
// builds only with cgo, and this build has none (no C compiler). The
// same tests run in every cgo build, CI's included.
func needNVMLMock(t *testing.T) {
	t.Helper()
	t.Skip("go-nvml's mock devices need cgo (a C compiler); built with CGO_ENABLED=0")
}

// mockA100 is never reached: needNVMLMock skips first.
func mockA100() *nvml.Manager { return nil }
