package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/core/fleet"
	"github.com/narwhal-io/narwhal/core/wire"
	"github.com/narwhal-io/narwhal/internal/testwait"

	"github.com/narwhal-io/narwhal/agent/engine"
)

// tableSink is a mutex-and-map engine table standing in for *core.Core.
type tableSink struct {
	mu      sync.Mutex
	engines map[string]controller.Engine
}

func (s *tableSink) UpsertEngine(e controller.Engine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.engines[e.ID] = e
	return nil
}

func (s *tableSink) UpdateEngine(id string, nowNs int64, res controller.Resident, capTokens int64, live bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.engines[id]
	if !ok {
		return fmt.Errorf("unknown engine %q", id)
	}
	e.Resident, e.KVCapacityTokens, e.Live = res, capTokens, live
	s.engines[id] = e
	return nil
}

func (s *tableSink) get(id string) (controller.Engine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.engines[id]
	return e, ok
}

// fakeEngine serves a vLLM metrics body that the test can swap.
func fakeEngine(t *testing.T, file string) (*httptest.Server, *atomic.Value) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Value
	cur.Store(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(cur.Load().([]byte))
	}))
	t.Cleanup(srv.Close)
	return srv, &cur
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 5*time.Second, what, cond)
}

func testConfig(t *testing.T, coreURL, engineURL string) Config {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\nold-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{
		Node: "gpu-node-1", CoreURL: coreURL, TokenFile: tok,
		ScrapeIntervalS: 0.02, HeartbeatIntervalS: 0.05, BackoffMinS: 0.01, BackoffMaxS: 0.05, StaleAfterS: 2,
		Engines: []EngineConfig{{
			ID: "e1", Kind: engine.VLLM, MetricsURL: engineURL, GPUs: []string{"0"},
			Model: "llama-3-8b", GPUKind: "A100-40G", Role: "decode",
			Geometry: engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 1},
		}},
	}
}

// TestEndToEndFleet is acceptance 5 against core/fleet with a stand-in
// engine table: agent (mock NVML + fake vLLM on loopback) -> ingest
// handler -> engine table; stopping the agent marks the engine not live
// after the staleness; a new epoch is accepted; a replayed old sequence is
// not.
func TestEndToEndFleet(t *testing.T) {
	const staleNs = int64(2e9)
	sink := &tableSink{engines: map[string]controller.Engine{}}
	reg := fleet.NewRegistry(sink, staleNs, nil)
	var coreNow atomic.Int64
	coreNow.Store(1_000e9)
	core := httptest.NewServer(reg.Handler("s3cret", 1<<20, coreNow.Load))
	defer core.Close()
	eng, body := fakeEngine(t, "vllm_new.prom")

	// capture what the agent sends, to replay it later
	var sentMu sync.Mutex
	var sent [][]byte
	tap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		sentMu.Lock()
		sent = append(sent, buf.Bytes())
		sentMu.Unlock()
		r.Body = http.NoBody
		req, _ := http.NewRequest(http.MethodPost, core.URL, bytes.NewReader(buf.Bytes()))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = buf.ReadFrom(resp.Body)
	}))
	defer tap.Close()

	cfg := testConfig(t, tap.URL, eng.URL)
	a1, err := New(cfg, WithNVML(mockA100(t)), WithEpoch(100))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a1.Run(ctx); close(done) }()

	// KV limit 5,691 × 16 = 91,056 tokens (under the NVML bound of
	// 40 GiB × 0.9 / 131,072 B = 294,912); 25 % used = 22,764 tokens
	waitFor(t, "engine e1 in the table", func() bool {
		e, ok := sink.get("e1")
		return ok && e.Live && e.KVCapacityTokens == 91056 && e.Resident.KVTokens == 22764
	})
	e, _ := sink.get("e1")
	if e.Node != "gpu-node-1" || e.Model != "llama-3-8b" || e.GPU != "A100-40G" || e.Role != controller.RoleDecode ||
		e.Resident.DecodeSeqs != 12 {
		t.Fatalf("unexpected engine; got %+v", e)
	}
	// residency follows the engine
	body.Store([]byte(`vllm:num_requests_running 30
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="5691",gpu_memory_utilization="0.9"} 1
`))
	waitFor(t, "residency update", func() bool {
		e, _ := sink.get("e1")
		return e.Resident.DecodeSeqs == 30 && e.Resident.KVTokens == 45528
	})
	if h := a1.Health(time.Now().UnixNano()); !h.OK || !h.NVML.Available {
		t.Fatalf("unexpected health; got %+v", h)
	}

	// stop the agent: still live until the staleness passes on the core clock
	cancel()
	<-done
	last := coreNow.Load()
	reg.Sweep(last + staleNs)
	if e, _ := sink.get("e1"); !e.Live {
		t.Fatal("engine not live before the staleness passed")
	}
	reg.Sweep(last + staleNs + 1)
	if e, _ := sink.get("e1"); e.Live {
		t.Fatal("engine still live after its agent stopped and the staleness passed")
	}
	if reg.Fresh(last + staleNs + 1) {
		t.Fatal("registry fresh with no agent reporting")
	}

	// a restarted agent (new epoch) is accepted and the engine is live again
	coreNow.Add(10e9)
	cfg2 := testConfig(t, core.URL, eng.URL)
	a2, err := New(cfg2, WithNVML(mockA100(t)), WithEpoch(101))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { _ = a2.Run(ctx2); close(done2) }()
	waitFor(t, "engine live under the new epoch", func() bool {
		e, _ := sink.get("e1")
		return e.Live
	})
	cancel2()
	<-done2
	nodes := reg.Nodes()
	if len(nodes) != 1 || nodes[0].Epoch != 101 || nodes[0].Stale {
		t.Fatalf("unexpected node state; got %+v", nodes)
	}

	// replaying the old epoch's captured batch is refused and changes nothing
	sink.mu.Lock()
	sink.engines["e1"] = controller.Engine{ID: "e1", Node: "gpu-node-1", Live: true, KVCapacityTokens: 1}
	sink.mu.Unlock()
	sentMu.Lock()
	old := sent[0]
	sentMu.Unlock()
	req, _ := http.NewRequest(http.MethodPost, core.URL, bytes.NewReader(old))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ack wire.Ack
	_ = json.NewDecoder(resp.Body).Decode(&ack)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || ack.Accepted != 0 || len(ack.Rejected) == 0 {
		t.Fatalf("replay of an old epoch: got %d %+v; want 409 with rejections", resp.StatusCode, ack)
	}
	if e, _ := sink.get("e1"); e.KVCapacityTokens != 1 {
		t.Fatalf("replay changed the table; got %+v", e)
	}
	// and a replayed sequence within the current epoch too
	st := nodes[0]
	rep := wire.Batch{Version: 1, Reports: []wire.Report{{Kind: wire.KindHeartbeat, Node: "gpu-node-1", Epoch: st.Epoch, Seq: st.LastSeq}}}
	b, _ := json.Marshal(rep)
	req, _ = http.NewRequest(http.MethodPost, core.URL, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("replayed sequence: got %d; want 409", resp.StatusCode)
	}
}
