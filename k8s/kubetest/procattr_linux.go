package kubetest

import (
	"os/exec"
	"syscall"
)

// dieWithParent kills the component when the test binary dies (a test
// timeout, a kill), so no etcd or API server outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
