package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/agent/liveness"
)

// regWatcher records watch and unwatch calls, in order.
type regWatcher struct {
	mu  sync.Mutex
	log []string
	ch  chan liveness.Event
}

func (w *regWatcher) add(s string) { w.mu.Lock(); w.log = append(w.log, s); w.mu.Unlock() }
func (w *regWatcher) WatchPID(pid int32) error {
	w.add("watch pid " + itoa(int(pid)))
	return nil
}
func (w *regWatcher) UnwatchPID(pid int32) error {
	w.add("unwatch pid " + itoa(int(pid)))
	return nil
}
func (w *regWatcher) WatchPort(s liveness.Socket) error {
	w.add("watch port " + itoa(int(s.Port)))
	return nil
}
func (w *regWatcher) UnwatchPort(s liveness.Socket) error {
	w.add("unwatch port " + itoa(int(s.Port)))
	return nil
}
func (w *regWatcher) Events() <-chan liveness.Event { return w.ch }
func (w *regWatcher) Source() string                { return "fake" }
func (w *regWatcher) Dropped() uint64               { return 0 }
func (w *regWatcher) Close() error                  { return nil }

func itoa(n int) string { return string(rune('0'+n/10%10)) + string(rune('0'+n%10)) }

func (w *regWatcher) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.log
	w.log = nil
	return out
}

// TestSetEnginesReplacesTheList: discovered engines replace the list; an
// engine that stays keeps its state and moves its liveness watches with a
// new PID; a gone engine is unwatched and leaves the snapshot; a refused
// list changes nothing.
func TestSetEnginesReplacesTheList(t *testing.T) {
	dir := t.TempDir()
	ns := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w := &regWatcher{ch: make(chan liveness.Event)}
	a, err := New(Config{Node: "n"}, WithWatcher(w, ""))
	if err != nil {
		t.Fatal(err)
	}
	eng := func(id string, pid int32, netns string) EngineConfig {
		return EngineConfig{ID: id, Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", PID: pid, Port: 80, NetNS: netns, Role: "decode"}
	}
	nsA, nsB := ns("a"), ns("b")
	if err := a.SetEngines([]EngineConfig{eng("a", 10, nsA), eng("b", 20, nsB)}); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); !slices.Equal(got, []string{"watch pid 10", "watch pid 20", "watch port 80", "watch port 80"}) {
		t.Fatalf("watches %q", got)
	}
	ids := func() []string {
		var out []string
		for _, e := range a.Collect(context.Background(), 1e9).Engines {
			out = append(out, e.ID)
		}
		return out
	}
	if got := ids(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("snapshot engines %v", got)
	}
	// b restarted with a new PID; a is gone.
	if err := a.SetEngines([]EngineConfig{eng("b", 21, nsB)}); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); !slices.Equal(got, []string{"unwatch pid 20", "unwatch pid 10", "unwatch port 80", "watch pid 21"}) {
		t.Fatalf("watch changes %q", got)
	}
	if got := ids(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("snapshot engines %v", got)
	}
	// No metric series is left for the gone engine (engine pods come and
	// go for the agent's whole life: series per gone engine would grow
	// without a bound); b's are there.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					seen[l.GetValue()]++
					if l.GetValue() == "a" {
						t.Errorf("%s still has a series for the gone engine a", mf.GetName())
					}
				}
			}
		}
	}
	if seen["b"] == 0 {
		t.Fatalf("no series for engine b: %v", seen)
	}
	// Two engines sharing a port without namespaces: refused, no change.
	if err := a.SetEngines([]EngineConfig{eng("x", 0, ""), eng("y", 0, "")}); err == nil {
		t.Fatal("ambiguous port accepted")
	}
	if got := ids(); !slices.Equal(got, []string{"b"}) || len(w.take()) != 0 {
		t.Fatalf("refused list changed the agent: %v", got)
	}
}

// TestCollectDoesNotResurrectAGoneEngine: an engine removed by SetEngines
// while a collection is scraping it leaves no metric series behind (the
// collection must not recreate the series SetEngines deleted: nothing
// would delete them again, and engine pods come and go for the agent's
// whole life) and is not reported in that snapshot.
func TestCollectDoesNotResurrectAGoneEngine(t *testing.T) {
	inScrape := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			once.Do(func() { close(inScrape) })
			<-release
		}
		_, _ = w.Write([]byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"))
	}))
	defer srv.Close()
	a, err := New(Config{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	eng := func(id, path string) EngineConfig {
		return EngineConfig{ID: id, Kind: engine.VLLM, MetricsURL: srv.URL + path, Role: "decode"}
	}
	if err := a.SetEngines([]EngineConfig{eng("gone", "/slow"), eng("stays", "/fast")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan []string)
	go func() {
		var ids []string
		for _, e := range a.Collect(context.Background(), 1e9).Engines {
			ids = append(ids, e.ID)
		}
		done <- ids
	}()
	<-inScrape
	if err := a.SetEngines([]EngineConfig{eng("stays", "/fast")}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if ids := <-done; !slices.Equal(ids, []string{"stays"}) {
		t.Errorf("snapshot engines %v, want [stays]", ids)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gone, stays := 0, 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "engine" {
					continue
				}
				switch l.GetValue() {
				case "gone":
					gone++
					t.Errorf("%s has a series for the removed engine", mf.GetName())
				case "stays":
					stays++
				}
			}
		}
	}
	if gone != 0 || stays == 0 {
		t.Fatalf("series: gone %d (want 0), stays %d (want > 0)", gone, stays)
	}
}
