package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/nvml"
)

// realNVMLEnv gates TestRealNVMLEndToEnd: it needs a GPU node with the
// NVIDIA driver (libnvidia-ml.so.1), so it never runs in CI or on a
// developer machine unless asked for.
const realNVMLEnv = "NARWHAL_REAL_NVML"

// TestRealNVMLEndToEnd is the agent against the real NVML library: the
// devices read through nvml.Manager must be consistent (memory known,
// used + free within total, a GPU- UUID), and an engine that reports no KV
// capacity of its own must reach narwhal-core's /v1/state with the NVML
// bound floor(total memory × utilisation / bytes per token), computed here
// from the device memory and the geometry by hand. Run it on a GPU node
// with NARWHAL_REAL_NVML=1 (see benchmarks/device/run.sh).
func TestRealNVMLEndToEnd(t *testing.T) {
	if os.Getenv(realNVMLEnv) != "1" {
		t.Skipf("set %s=1 on a GPU node to read the real NVML", realNVMLEnv)
	}
	gpus := nvml.NewManager(nvml.Library(), 5*time.Second, nil)
	defer func() { _ = gpus.Close(context.Background()) }()
	devs, err := gpus.Devices(context.Background(), time.Now().UnixNano())
	if err != nil {
		t.Fatalf("real NVML: %v (status %+v)", err, gpus.Status())
	}
	if len(devs) == 0 {
		t.Fatal("real NVML lists no device")
	}
	for _, d := range devs {
		js, _ := json.Marshal(d)
		t.Logf("device %s", js)
		m := d.Memory
		if !m.Known || m.TotalBytes == 0 {
			t.Errorf("device %d: memory unknown or zero: %+v", d.Index, m)
		}
		if m.UsedBytes+m.FreeBytes > m.TotalBytes {
			t.Errorf("device %d: used %d + free %d > total %d", d.Index, m.UsedBytes, m.FreeBytes, m.TotalBytes)
		}
		if d.Parent == "" && !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("device %d: UUID %q does not start with GPU-", d.Index, d.UUID)
		}
		if d.Name == "" {
			t.Errorf("device %d: no name", d.Index)
		}
	}
	gpu0 := devs[0]

	// An engine on GPU 0 (by UUID) that reports usage but no capacity
	// (num_gpu_blocks None), vLLM's gpu_memory_utilization 0.9.
	body := []byte(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="None"} 1.0
`)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	defer eng.Close()
	// Llama-3-70B: 80 layers, 8 KV heads of 128, bf16, one rank.
	geo := engine.Geometry{Layers: 80, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 1}
	bpt := int64(2 * 80 * 8 * 128 * 2)
	want := int64(float64(gpu0.Memory.TotalBytes) * 0.9 / float64(bpt))

	var coreNow atomic.Int64
	coreNow.Store(time.Now().UnixNano())
	_, base := startCore(t, coreNow.Load, nil)

	acfg := testConfig(t, base+"/v1/agent/reports", eng.URL)
	acfg.Engines[0].GPUs = []string{gpu0.UUID}
	acfg.Engines[0].Geometry = geo
	acfg.Engines[0].Model, acfg.Engines[0].GPUKind = "llama-3-70b", gpu0.Name
	a, err := New(acfg, WithNVML(gpus))
	if err != nil {
		t.Fatal(err)
	}
	snap := a.Collect(context.Background(), time.Now().UnixNano())
	if len(snap.Engines) != 1 {
		t.Fatalf("snapshot engines: %+v", snap.Engines)
	}
	r := snap.Engines[0]
	t.Logf("engine report: kv_capacity_tokens %d source %q disagreement %q live %v running %d queued %d",
		r.KVCapacityTokens, r.KVSource, r.KVDisagreement, r.Live, r.RunningRequests, r.QueuedRequests)
	if r.KVSource != engine.KVSourceBound || r.KVCapacityTokens != want {
		t.Fatalf("KV limit from real NVML: %d tokens (%s); want %d (%s) = floor(%d B × 0.9 / %d B per token)",
			r.KVCapacityTokens, r.KVSource, want, engine.KVSourceBound, gpu0.Memory.TotalBytes, bpt)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "/v1/state to show e1 with the NVML-derived KV limit", func() bool {
		e, ok := getState(t, base)["e1"]
		return ok && e.Live && e.KVCapacityTokens == want
	})
	t.Logf("core /v1/state: e1 live with kv_capacity_tokens %d from %s (%d B total)", want, gpu0.Name, gpu0.Memory.TotalBytes)
}
