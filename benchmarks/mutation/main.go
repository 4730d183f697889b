// Command mutation is Narwhal's mutation check of the reference page
// (shared/spec/narwhal-slo-and-demand.md): each mutation breaks one rule
// in a temporary copy of the tree, the packages named for it are tested
// there, and the mutation must be caught (a test fails). It prints a
// table and exits non-zero if any mutation survives or does not build.
//
//	go run ./benchmarks/mutation            # every mutation
//	go run ./benchmarks/mutation -subset ci # the ones .ci/run runs
//	go run ./benchmarks/mutation -only prune-from-step,dwell
//
// See README.md in this directory for the table of the last full run.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	subset := flag.String("subset", "all", "all, or ci (the mutations marked for .ci/run)")
	only := flag.String("only", "", "comma-separated mutation names (default: the subset)")
	timeout := flag.Duration("timeout", 2*time.Minute, "limit for one mutation's go test")
	keep := flag.Bool("keep", false, "keep the temporary copy")
	check := flag.Bool("check", false, "only check that every mutation applies (no tests)")
	flag.Parse()
	if *check {
		if err := checkApply(); err != nil {
			fmt.Fprintln(os.Stderr, "mutation:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*subset, *only, *timeout, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutation:", err)
		os.Exit(1)
	}
}

func run(subset, only string, timeout time.Duration, keep bool) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	sel, err := selectMutations(subset, only)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "narwhal-mutation-")
	if err != nil {
		return fmt.Errorf("temporary copy: %w", err)
	}
	if !keep {
		defer os.RemoveAll(tmp)
	}
	if err := copyTree(root, tmp); err != nil {
		return fmt.Errorf("copy %s: %w", root, err)
	}
	fmt.Fprintf(os.Stderr, "mutation: %d mutations in a copy at %s\n", len(sel), tmp)

	// The unmutated copy must pass, or nothing below means anything.
	pkgs := map[string]bool{}
	var all []string
	for _, m := range sel {
		for _, p := range m.pkgs() {
			if !pkgs[p] {
				pkgs[p] = true
				all = append(all, p)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "mutation: baseline go test %s\n", strings.Join(all, " "))
	if res, out, _ := goTest(tmp, all, "", timeout); res != survived {
		return fmt.Errorf("the unmutated tree fails its tests:\n%s", out)
	}
	tagged := map[string][]string{} // the tagged mutations' packages, per tag set
	for _, m := range sel {
		if m.Tags != "" {
			tagged[m.Tags] = append(tagged[m.Tags], m.pkgs()...)
		}
	}
	for tags, ps := range tagged {
		if res, out, _ := goTest(tmp, ps, tags, timeout); res != survived {
			return fmt.Errorf("the unmutated tree fails its tests under -tags %s:\n%s", tags, out)
		}
	}

	results := make([]result, len(sel))
	for i, m := range sel {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "mutation: [%d/%d] %s (%s) ...", i+1, len(sel), m.Name, m.Rule)
		r := result{m: m}
		restore, err := m.apply(tmp)
		if err != nil {
			r.res, r.detail = invalid, err.Error()
		} else {
			var out string
			r.res, out, r.detail = goTest(tmp, m.pkgs(), m.Tags, timeout)
			if r.res == caught {
				r.detail = firstFailure(out)
			}
			if err := restore(); err != nil {
				return fmt.Errorf("restore after %s: %w", m.Name, err)
			}
		}
		r.secs = time.Since(start).Seconds()
		fmt.Fprintf(os.Stderr, " %s (%.0f s)\n", r.res, r.secs)
		results[i] = r
	}
	bad := printTable(os.Stdout, results)
	if bad > 0 {
		return fmt.Errorf("%d of %d mutations survived or did not build", bad, len(results))
	}
	return nil
}

// checkApply applies and undoes every mutation in a copy, without tests.
func checkApply() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "narwhal-mutation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(root, tmp); err != nil {
		return err
	}
	var errs []error
	for _, m := range mutations {
		restore, err := m.apply(tmp)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		if err := restore(); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "mutation: %d mutations apply\n", len(mutations)-len(errs))
	return errors.Join(errs...)
}

type outcome string

const (
	caught   outcome = "caught"
	survived outcome = "SURVIVED"
	invalid  outcome = "INVALID"
)

type result struct {
	m      mutation
	res    outcome
	detail string
	secs   float64
}

func printTable(w io.Writer, rs []result) int {
	bad := 0
	fmt.Fprintln(w, "| # | rule | mutation | packages | result | caught by |")
	fmt.Fprintln(w, "|---|------|----------|----------|--------|-----------|")
	for i, r := range rs {
		if r.res != caught {
			bad++
		}
		fmt.Fprintf(w, "| %d | %s | `%s`: %s | %s | %s | %s |\n", i+1, r.m.Rule, r.m.Name, r.m.What, strings.Join(r.m.pkgs(), " "), r.res, r.detail)
	}
	fmt.Fprintf(w, "\n%d mutations, %d caught, %d survived or invalid\n", len(rs), len(rs)-bad, bad)
	return bad
}

// goTest runs go test on pkgs in dir. survived means the tests passed.
func goTest(dir string, pkgs []string, tags string, timeout time.Duration) (outcome, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-p=1"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out := buf.String()
	switch {
	case err == nil:
		return survived, out, ""
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return caught, out, "timeout"
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") || strings.Contains(out, "vet:"):
		return invalid, out, "does not build: " + firstLine(out)
	}
	return caught, out, ""
}

func firstFailure(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "--- FAIL: ") {
			return strings.Fields(strings.TrimPrefix(t, "--- FAIL: "))[0]
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "panic:") {
			return "panic"
		}
	}
	return "go test failed"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/narwhal-io/narwhal\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run inside the narwhal module (no go.mod found)")
		}
		dir = parent
	}
}

// copyTree copies the module's files (no .git, no hidden directories).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if rel != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// edit replaces Old, which must occur exactly once in File, by New.
type edit struct {
	File, Old, New string
}

type mutation struct {
	Name string
	Rule string // the rule of the page it breaks
	What string
	CI   bool     // part of the .ci/run subset
	Pkgs []string // default ./core: the rule proved at the core's API
	Tags string   // build tags for go test (narwhal_hooks: the tests that stop a writer mid-record)
	Eds  []edit
}

func (m mutation) pkgs() []string {
	if len(m.Pkgs) == 0 {
		return []string{"./core"}
	}
	return m.Pkgs
}

// apply writes the mutation into the copy at dir and returns how to undo
// it.
func (m mutation) apply(dir string) (func() error, error) {
	var undo []func() error
	restore := func() error {
		var err error
		for i := len(undo) - 1; i >= 0; i-- {
			err = errors.Join(err, undo[i]())
		}
		return err
	}
	for _, e := range m.Eds {
		p := filepath.Join(dir, e.File)
		b, err := os.ReadFile(p)
		if err != nil {
			_ = restore()
			return nil, err
		}
		if n := bytes.Count(b, []byte(e.Old)); n != 1 {
			_ = restore()
			return nil, fmt.Errorf("%s: the text to mutate occurs %d times, want 1: %q", e.File, n, e.Old)
		}
		orig := b
		if err := os.WriteFile(p, bytes.Replace(b, []byte(e.Old), []byte(e.New), 1), 0o644); err != nil {
			_ = restore()
			return nil, err
		}
		undo = append(undo, func() error { return os.WriteFile(p, orig, 0o644) })
	}
	return restore, nil
}

func selectMutations(subset, only string) ([]mutation, error) {
	names := map[string]bool{}
	for _, m := range mutations {
		if names[m.Name] {
			return nil, fmt.Errorf("BUG: mutation %s listed twice", m.Name)
		}
		names[m.Name] = true
	}
	var sel []mutation
	if only != "" {
		for _, n := range strings.Split(only, ",") {
			if !names[n] {
				return nil, fmt.Errorf("unknown mutation %q", n)
			}
		}
		for _, m := range mutations {
			if strings.Contains(","+only+",", ","+m.Name+",") {
				sel = append(sel, m)
			}
		}
		return sel, nil
	}
	switch subset {
	case "all":
		return mutations, nil
	case "ci":
		for _, m := range mutations {
			if m.CI {
				sel = append(sel, m)
			}
		}
		return sel, nil
	}
	return nil, fmt.Errorf("unknown subset %q (all, ci)", subset)
}
