//go:build !unix

package liveness

import "fmt"

// NetNSOf needs a Unix namespace file; elsewhere it always fails.
func NetNSOf(path string) (uint32, error) {
	return 0, fmt.Errorf("liveness: network namespace %s: %w", path, ErrUnsupported)
}
