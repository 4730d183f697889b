//go:build !cgo

package agent

import (
	"testing"

	"github.com/narwhal-io/narwhal/nvml"
)

// mockA100 skips the test that asks for a mock node: go-nvml builds its
// mock devices only with cgo, and this build has none (no C compiler).
// The same tests run in every cgo build, CI's included.
func mockA100(t *testing.T) *nvml.Manager {
	t.Helper()
	t.Skip("go-nvml's mock devices need cgo (a C compiler); built with CGO_ENABLED=0")
	return nil
}
