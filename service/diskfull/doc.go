// Package diskfull holds one test, TestRealDiskFull, that fills a real
// filesystem under the real narwhal-core binary. The unit tests fake
// ENOSPC (service/limits_test.go, core/controller/wal_test.go); this one
// proves the same promises against the kernel: as root it mounts a small
// tmpfs as data_dir, builds and runs cmd/narwhal-core (internal/coreproc),
// fills the tmpfs with a filler file so that the journal, written every
// step under a load that makes moves, runs out of space within seconds,
// and checks by value:
//
//   - while the disk is full: the process stays up and logs no panic,
//     and each error once per change of error, not once per step;
//     /readyz answers 503 naming "no space left on device" (docs: /readyz
//     fails while journal or checkpoint writing fails; /healthz is about
//     the clock and stays 200); narwhal_journal_write_errors_total grows;
//     the controller keeps deciding (decisions newer than the journal
//     show in /v1/decisions, moves among them), yet no move reaches the
//     actuator unjournalled: every engine's role in /v1/state and the role
//     table equal the replay of the records on disk;
//   - once the filler is deleted: the held records land in order (the
//     journal's sequences run 1..N without a gap, each record seen through
//     the API while it was pending is in the file unchanged),
//     narwhal_journal_pending_records returns to 0, /readyz to 200, and
//     the roles catch up with the journal;
//   - after SIGKILL and a restart on the same data_dir: the restored roles
//     equal the roles before the kill and the replay of the journal.
//
// Without root, or where mount fails, the test skips; with CI=true it
// fails instead (a test that needs a real component must not pass
// silently in CI), except where the kernel refuses root the mount (EPERM,
// EACCES: a container without CAP_SYS_ADMIN), which skips as the eBPF
// liveness test does when the kernel refuses its program. It builds the
// binary and is skipped with -short.
package diskfull
