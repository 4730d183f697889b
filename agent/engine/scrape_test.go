package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// A metrics body past MaxBody is refused as too large, whether the cut
// falls inside a line (which read as a parse error) or on a line's end
// (which dropped the metrics after it without a word); a body of exactly
// MaxBody is read.
func TestScrapeRefusesABodyOverMaxBody(t *testing.T) {
	page, err := os.ReadFile("../testdata/vllm_new.prom")
	if err != nil {
		t.Fatal(err)
	}
	pad := func(n int) string { // comment lines filling exactly n bytes
		full, r := n/64, n%64
		out := strings.Repeat("# "+strings.Repeat("x", 61)+"\n", full)
		switch {
		case r == 1:
			out += "\n"
		case r > 1:
			out += "#" + strings.Repeat("y", r-2) + "\n"
		}
		return out
	}
	fill := string(page) + pad(MaxBody-len(page)) // MaxBody bytes, ending a line
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"exactly MaxBody", fill, true},
		{"cut on a line end", fill + "# past the bound\n", false},
		{"cut inside a line", fill[:len(fill)-3] + "# a line across the bound\n", false},
	} {
		body = c.body
		m, err := Scrape(context.Background(), srv.Client(), VLLM, srv.URL)
		switch {
		case c.ok && (err != nil || m.Running == 0 && m.Waiting == 0 && m.KVUsage == 0):
			t.Errorf("%s: %v, metrics %+v; want the page read", c.name, err, m)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "body over")):
			t.Errorf("%s: err %v; want a body-too-large error", c.name, err)
		}
	}
}
