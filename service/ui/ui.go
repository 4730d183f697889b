package ui

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/buckets"
	"github.com/narwhal-io/narwhal/core/controller"
)

//go:embed static
var static embed.FS

// MaxSamples bounds the series: an hour at one sample per second.
const MaxSamples = 3600

// Source is what the page samples: *core.Core satisfies it.
type Source interface {
	State(nowNs int64) core.State
}

// Sample is one point of the series.
type Sample struct {
	AtNs int64 `json:"at_ns"`
	// Engines serving in each role, moving (draining or switching) and
	// down (not live).
	Prefill int `json:"prefill"`
	Decode  int `json:"decode"`
	Moving  int `json:"moving"`
	Down    int `json:"down"`
	// Offered demand over the short horizon (tokens/s): prompt tokens to
	// prefill and expected output tokens to decode.
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"`
	// Finished requests in the demand window and the share of them that
	// met the TTFT and the TPOT SLO (-1 with none).
	Finished int64   `json:"finished"`
	TTFTMet  float64 `json:"ttft_met"`
	TPOTMet  float64 `json:"tpot_met"`
}

// Page is the status page and its sampler.
type Page struct {
	src Source
	now func() int64

	mu      sync.Mutex
	ring    [MaxSamples]Sample
	next, n int
	lastNs  int64
}

// New returns a page over src; now is the service's clock (Unix ns).
func New(src Source, now func() int64) *Page { return &Page{src: src, now: now} }

// Sample takes one sample at now() when the clock advanced at least a
// second since the last one; it reports whether it did.
func (p *Page) Sample() bool {
	nowNs := p.now()
	p.mu.Lock()
	due := p.n == 0 || nowNs-p.lastNs >= int64(time.Second)
	p.mu.Unlock()
	if !due {
		return false
	}
	s := sampleOf(p.src.State(nowNs))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ring[p.next] = s
	p.next = (p.next + 1) % MaxSamples
	p.n = min(p.n+1, MaxSamples)
	p.lastNs = nowNs
	return true
}

func sampleOf(st core.State) Sample {
	s := Sample{AtNs: st.AtNs, TTFTMet: -1, TPOTMet: -1}
	for _, e := range st.Engines {
		switch {
		case !e.Live:
			s.Down++
		case e.State != controller.StateServing:
			s.Moving++
		case e.Role == controller.RolePrefill:
			s.Prefill++
		case e.Role == controller.RoleDecode:
			s.Decode++
		}
	}
	if d := st.LatestDecision; d != nil {
		h := d.Snapshot.Short
		s.PrefillTokensPerS = h.RatePerS * h.MeanInput
		s.DecodeTokensPerS = h.RatePerS * h.MeanOutput
	}
	var c buckets.Counts
	for _, oc := range st.Attainment.ByOutcome {
		c.Total += oc.Total
		c.TTFTMet += oc.TTFTMet
		c.TPOTMet += oc.TPOTMet
	}
	s.Finished = c.Total
	if c.Total > 0 {
		s.TTFTMet = float64(c.TTFTMet) / float64(c.Total)
		s.TPOTMet = float64(c.TPOTMet) / float64(c.Total)
	}
	return s
}

// Series returns the samples, oldest first.
func (p *Page) Series() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Sample, 0, p.n)
	start := (p.next - p.n + MaxSamples) % MaxSamples
	for i := 0; i < p.n; i++ {
		out = append(out, p.ring[(start+i)%MaxSamples])
	}
	return out
}

// Run samples until ctx ends (checking every 100 ms of wall time).
func (p *Page) Run(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	p.Sample()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Sample()
		}
	}
}

// Handler serves the page at "/" and its assets and series under /ui/.
// Any other path is left to the caller: it answers 404.
func (p *Page) Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("BUG: ui: embedded assets: " + err.Error())
	}
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.HandleFunc("/ui/api/series", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{"samples": p.Series()})
	})
	mux.Handle("/ui/", http.StripPrefix("/ui/", files))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	return mux
}
