//go:build narwhal_crashtest

package service

import (
	"os"
	"strconv"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
)

// Built only with -tags narwhal_crashtest (cmd/narwhal-core's crash
// test): NARWHAL_TEST_SLOW_WRITES_MS slows every journal and checkpoint
// write (half the bytes, a pause, the rest; a pause before each fsync) so
// that a SIGKILL lands inside writes.
func init() {
	ms, err := strconv.Atoi(os.Getenv("NARWHAL_TEST_SLOW_WRITES_MS"))
	if err != nil || ms <= 0 {
		return
	}
	journalFS = slowFS{d: time.Duration(ms) * time.Millisecond}
}

type slowFS struct {
	controller.OSFS
	d time.Duration
}

func (s slowFS) OpenFile(name string, flag int, perm os.FileMode) (controller.File, error) {
	f, err := s.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowFile{File: f, d: s.d}, nil
}

type slowFile struct {
	controller.File
	d time.Duration
}

func (f slowFile) WriteAt(b []byte, off int64) (int, error) {
	h := len(b) / 2
	n, err := f.File.WriteAt(b[:h], off)
	if err != nil {
		return n, err
	}
	time.Sleep(f.d)
	m, err := f.File.WriteAt(b[h:], off+int64(h))
	return n + m, err
}

func (f slowFile) Sync() error {
	time.Sleep(f.d)
	return f.File.Sync()
}
