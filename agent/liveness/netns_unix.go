//go:build unix

package liveness

import (
	"fmt"
	"os"
	"syscall"
)

// NetNSOf returns the inode number of the network namespace file at path
// (/proc/<pid>/ns/net, /var/run/netns/<name>, a CNI netns path): the
// namespace identity that Socket.NetNS and the eBPF program use.
func NetNSOf(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("liveness: network namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Ino == 0 || st.Ino > 1<<32-1 {
		return 0, fmt.Errorf("liveness: network namespace %s: no usable inode", path)
	}
	return uint32(st.Ino), nil
}
