//go:build cgo

package nvml

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Papercut: go-nvml's cgo prolog calls functions CUDA 13's nvml.h marks
// DEPRECATED, and gcc printed ~170 lines of -Wdeprecated-declarations
// warnings on every fresh build of the test suite. Only CGO_CFLAGS reaches
// that dependency's C compile, so .ci/run exports it; this test checks
// that the flag it exports is on go-nvml's gcc command lines (go build -n
// prints them without running them).
func TestCIExportsCFlagsThatSilenceGoNVMLDeprecations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build -n; skipped with -short")
	}
	out, err := exec.Command("bash", "-c", `set -e; eval "$(grep '^export CGO_CFLAGS=' ../.ci/run)"; printf %s "$CGO_CFLAGS"`).Output()
	if err != nil {
		t.Fatalf("reading CGO_CFLAGS from .ci/run: %v", err)
	}
	flags := string(out)
	if !strings.Contains(flags, "-Wno-deprecated-declarations") {
		t.Fatalf(".ci/run exports CGO_CFLAGS=%q; want -Wno-deprecated-declarations in it", flags)
	}
	cmd := exec.Command("go", "build", "-a", "-n", "github.com/NVIDIA/go-nvml/pkg/nvml")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS="+flags, "CGO_ENABLED=1")
	plan, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -n: %v\n%s", err, plan)
	}
	var compiles, silenced int
	for _, line := range strings.Split(string(plan), "\n") {
		if !strings.Contains(line, "go-nvml") || !strings.Contains(line, "gcc") || !strings.Contains(line, " -c ") {
			continue
		}
		compiles++
		if strings.Contains(line, "-Wno-deprecated-declarations") {
			silenced++
		}
	}
	if compiles == 0 || silenced != compiles {
		t.Fatalf("go-nvml's C compiles: %d, with -Wno-deprecated-declarations: %d; want all", compiles, silenced)
	}
}
