package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// Any argument, --help included, used to be ignored: the pages were
// rewritten. Now --help prints the use and an unexpected argument is
// refused by name; neither writes.
func TestArgumentsWriteNothing(t *testing.T) {
	for _, c := range []struct {
		args    []string
		code    int
		mention string
	}{
		{[]string{"--help"}, 0, "Usage: narwhal-docs"},
		{[]string{"-h"}, 0, "Usage: narwhal-docs"},
		{[]string{"docs/"}, 2, `unexpected argument "docs/"`},
		{[]string{"--out", "x"}, 2, `unexpected argument "--out"`},
	} {
		var out, errOut bytes.Buffer
		wrote := false
		code := run(c.args, &out, &errOut, func(io.Writer) error { wrote = true; return nil })
		if code != c.code || wrote || !strings.Contains(out.String()+errOut.String(), c.mention) {
			t.Fatalf("run(%q): unexpected result; got code %d, wrote %v, output %q; want code %d, no write, output mentioning %q",
				c.args, code, wrote, out.String()+errOut.String(), c.code, c.mention)
		}
	}
	wrote := false
	if code := run(nil, io.Discard, io.Discard, func(io.Writer) error { wrote = true; return nil }); code != 0 || !wrote {
		t.Fatalf("run(nil): unexpected result; got code %d, wrote %v; want 0, wrote", code, wrote)
	}
}
