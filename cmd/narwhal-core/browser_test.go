package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/internal/syncbuf"
)

var screenshot = flag.String("screenshot", "", "also write a PNG of the status page to this path (README's picture: go test ./cmd/narwhal-core -run StatusPageInABrowser -args -screenshot=$PWD/docs/status-page.png)")

// chromium finds Debian's chromium; in CI (CI=true) its absence fails the
// test, elsewhere it skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not on PATH; CI needs it (Debian package chromium, installed by .ci/run)")
	}
	t.Skip("chromium not on PATH (apt-get install chromium); skipping the browser test")
	return ""
}

// TestStatusPageInABrowser runs the demo, loads its status page in
// headless Chromium and asserts on the DOM the page's script rendered:
// engines in both roles, decisions in the table, and the charts drawn.
func TestStatusPageInABrowser(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("runs the demo and a browser; skipped with -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, []string{"--listen", "127.0.0.1:0", "--pace", "15"}, &stdout, &stderr) }()
	defer func() {
		cancel()
		<-done
	}()

	// The page's address is the demo's first line.
	addrRe := regexp.MustCompile(`^narwhal-core demo: status page on (http://\S+/) `)
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; {
		if m := addrRe.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("stderr does not start with the status page's address:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Let the replay make some decisions and the sampler draw some points.
	want := 40
	if *screenshot != "" {
		want = 420 // a picture with some history: past the first bursts
	}
	for deadline := time.Now().Add(60 * time.Second); strings.Count(stdout.String(), "decision ") < want; {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d decisions after 60 s:\n%s", want, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp, err := http.Get(base); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %v %v", base, resp, err)
	}

	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--virtual-time-budget=3000",
			"--window-size=1280,900"}, args...)
		cmd := exec.CommandContext(cctx, browser, append(all, base)...)
		cmd.Stderr = nil
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return string(out)
	}
	dom := run("--dump-dom")
	num := func(id string) int {
		t.Helper()
		m := regexp.MustCompile(`id="` + id + `">(\d+)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("rendered DOM has no number in #%s:\n%.3000s", id, dom)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the page's script did not render (data-ready is not 1):\n%.3000s", dom)
	}
	if p, d := num("split-prefill"), num("split-decode"); p < 1 || d < 1 {
		t.Fatalf("page shows %d prefill and %d decode engines; want both roles", p, d)
	}
	rows := regexp.MustCompile(`<tr class="decision (hold|move|blocked)">`).FindAllString(dom, -1)
	if len(rows) < 5 {
		t.Fatalf("page shows %d decisions; want at least 5:\n%.3000s", len(rows), dom)
	}
	for _, series := range []string{"prefill", "decode", "prefill_tokens_per_s", "ttft"} {
		if !strings.Contains(dom, `data-series="`+series+`"`) {
			t.Fatalf("chart series %s not drawn", series)
		}
	}
	if *screenshot != "" {
		run("--screenshot=" + *screenshot)
		if st, err := os.Stat(*screenshot); err != nil || st.Size() == 0 {
			t.Fatalf("screenshot not written: %v", err)
		}
	}
}
