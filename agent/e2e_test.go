package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
	"github.com/narwhal-io/narwhal/service"
)

// getState reads the service's /v1/state engines.
func getState(t *testing.T, base string) map[string]controller.Engine {
	t.Helper()
	resp, err := http.Get(base + "/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Engines []struct {
			ID               string              `json:"id"`
			Node             string              `json:"node"`
			Live             bool                `json:"live"`
			KVCapacityTokens int64               `json:"kv_capacity_tokens"`
			Resident         controller.Resident `json:"resident"`
			Role             string              `json:"role"`
		} `json:"engines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/state: %d %v", resp.StatusCode, err)
	}
	out := map[string]controller.Engine{}
	for _, e := range st.Engines {
		r, _ := controller.ParseRole(e.Role)
		out[e.ID] = controller.Engine{ID: e.ID, Node: e.Node, Live: e.Live, KVCapacityTokens: e.KVCapacityTokens,
			Resident: e.Resident, Role: r}
	}
	return out
}

// startCore serves a fresh core through the service on loopback (bearer
// token s3cret, no control loop, time from now), with mod applied to the
// default configuration; it returns the service and its base URL and
// stops it when the test ends.
func startCore(t *testing.T, now func() int64, mod func(*service.Config)) (*service.Server, string) {
	t.Helper()
	c, err := core.New(core.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return serveCore(t, c, now, mod)
}

// serveCore is startCore on a core the test built (and keeps, to step it
// or record into it directly).
func serveCore(t *testing.T, c *core.Core, now func() int64, mod func(*service.Config)) (*service.Server, string) {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Auth.Token = "router-s3cret"
	cfg.Auth.AgentToken = "s3cret"
	if mod != nil {
		mod(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := service.New(cfg, c, nil, service.WithClock(now), service.WithoutControlLoop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(served) }()
	t.Cleanup(func() { stop(); <-served })
	return srv, "http://" + srv.Addr().String()
}

// TestEndToEndCore is acceptance 5 through the real core and service:
// agent (mock NVML + fake vLLM metrics on loopback) -> narwhal-core's
// /v1/agent/reports -> *core.Core -> GET /v1/state shows the KV limit and
// residency; stopping the agent marks the engine not live once the
// service's own sweep passes the staleness; a restarted agent (new epoch)
// is accepted.
func TestEndToEndCore(t *testing.T) {
	var coreNow atomic.Int64
	coreNow.Store(time.Now().UnixNano())
	srv, base := startCore(t, coreNow.Load, func(cfg *service.Config) {
		cfg.Agents.StaleAfterS = 5
		cfg.Agents.SweepS = 0.01
	})

	eng, _ := fakeEngine(t, "vllm_new.prom")
	acfg := testConfig(t, base+"/v1/agent/reports", eng.URL)
	a1, err := New(acfg, WithNVML(mockA100(t)), WithEpoch(100))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a1.Run(ctx); close(done) }()
	waitFor(t, "/v1/state to show e1 with its KV limit and residency", func() bool {
		e, ok := getState(t, base)["e1"]
		return ok && e.Live && e.KVCapacityTokens == 91056 && e.Resident.KVTokens == 22764 && e.Resident.DecodeSeqs == 12
	})
	if e := getState(t, base)["e1"]; e.Node != "gpu-node-1" || e.Role != controller.RoleDecode {
		t.Fatalf("unexpected engine; got %+v", e)
	}
	if !srv.Registry().Fresh(coreNow.Load()) {
		t.Fatal("registry not fresh while the agent reports")
	}

	// stop the agent; the service's sweep marks e1 not live once the core
	// clock passes the staleness
	cancel()
	<-done
	coreNow.Add(int64(5.5e9))
	waitFor(t, "e1 not live after staleness", func() bool { return !getState(t, base)["e1"].Live })

	// restarted agent, new epoch: accepted, live again
	a2, err := New(acfg, WithNVML(mockA100(t)), WithEpoch(101))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { _ = a2.Run(ctx2); close(done2) }()
	waitFor(t, "e1 live under the new epoch", func() bool { return getState(t, base)["e1"].Live })
	cancel2()
	<-done2
	n := srv.Registry().Nodes()
	if len(n) != 1 || n[0].Epoch != 101 {
		t.Fatalf("unexpected nodes; got %+v", n)
	}
	// replays: the old epoch, and the current epoch's last sequence
	for _, r := range []struct{ epoch, seq uint64 }{{100, 99}, {101, n[0].LastSeq}} {
		body := fmt.Sprintf(`{"version":1,"reports":[{"kind":"heartbeat","node":"gpu-node-1","epoch":%d,"seq":%d}]}`, r.epoch, r.seq)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/agent/reports", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("replay epoch %d seq %d: got %d; want 409", r.epoch, r.seq, resp.StatusCode)
		}
	}
}
