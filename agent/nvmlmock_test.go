//go:build cgo

package agent

import (
	"context"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/narwhal-io/narwhal/agent/engine"
	"github.com/narwhal-io/narwhal/nvml"
)

// The tests and helpers here read go-nvml's mock devices, which go-nvml
// builds only with cgo; a build without a C compiler leaves this file out,
// and mockA100 (nvmlmock_nocgo_test.go) skips the tests that need it.

// mockNode is go-nvml's 8×A100-40GB node whose memory answers through v1
// only; each device (by index) is then handed to tweak, when not nil.
func mockNode(tweak func(i int, dev *server.Device)) *nvml.Manager {
	return nvml.NewManager(mockServer(tweak), time.Second, nil)
}

// mockServer is mockNode's library, for tests that make its calls fail.
func mockServer(tweak func(i int, dev *server.Device)) *server.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
			return gonvml.Memory{Total: 40 << 30, Used: 38 << 30, Free: 2 << 30}, gonvml.SUCCESS
		}
		if tweak != nil {
			tweak(i, dev)
		}
	}
	return s
}

// mockA100 is mockNode as it comes.
func mockA100(t *testing.T) *nvml.Manager {
	t.Helper()
	return mockNode(nil)
}

// A static engine's tp (or geometry.tp) and GPU kind reach the wire report the core
// prices by (model, GPU, TP); tp also sets the KV heads per rank of the
// NVML bound when geometry.tp is unset.
func TestStaticTPReachesTheReport(t *testing.T) {
	geo := engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	cfg := Config{Node: "n", ScrapeTimeoutS: 0.2, Engines: []EngineConfig{
		{ID: "tp4", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"0"}, TP: 4, Geometry: geo},
		{ID: "geo2", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", Geometry: engine.Geometry{Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2, TP: 2}},
		{ID: "none", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics"},
		{ID: "kind", Kind: engine.VLLM, MetricsURL: "http://127.0.0.1:1/metrics", GPUs: []string{"1"}, GPUKind: "A100-80GB"},
	}}
	cfg.Defaults()
	// the real NVML name of the part go-nvml's DGX A100 mock imitates
	mock := mockNode(func(_ int, dev *server.Device) { dev.Config.Name = "NVIDIA A100-SXM4-40GB" })
	a, err := New(cfg, WithNVML(mock))
	if err != nil {
		t.Fatal(err)
	}
	got, gpu := map[string]int{}, map[string]string{}
	var bound int64
	for _, r := range a.Collect(context.Background(), 1e9).Engines {
		got[r.ID], gpu[r.ID] = r.TP, r.GPU
		if r.ID == "tp4" {
			bound = r.KVCapacityTokens
		}
	}
	if got["tp4"] != 4 || got["geo2"] != 2 || got["none"] != 0 {
		t.Fatalf("report TP %v; want tp4 4, geo2 2, none 0", got)
	}
	// the GPU kind: gpu_kind, else the built-in table's name for NVML's
	// "NVIDIA A100-SXM4-40GB" (which the core's prior resolves), else none
	if gpu["tp4"] != "A100-SXM-40GB" || gpu["kind"] != "A100-80GB" || gpu["none"] != "" {
		t.Fatalf("report GPU %v; want tp4 A100-SXM-40GB (from NVML), kind A100-80GB, none empty", gpu)
	}
	// no scrape, no utilization: 40 GiB / (2·32·(8/4)·128·2 = 32,768 B per token per rank)
	if want := int64(40<<30) / 32768; bound != want {
		t.Fatalf("tp4 NVML bound %d tokens; want %d (KV heads split over 4 ranks)", bound, want)
	}
}

// The latency interval carries the engine's busy seconds from its GPUs'
// NVML utilization (the mean over its GPUs, sampled at the collection,
// times the interval); with a GPU whose utilization NVML cannot read, or
// an engine that names no GPU, busy_s is absent (unknown, not zero).
func TestLatencyIntervalCarriesGPUBusySeconds(t *testing.T) {
	real, eng, body := earlierRealPage(t)
	mock := mockNode(func(i int, dev *server.Device) {
		util, ret := uint32([]int{40, 60, 90, 0, 0, 0, 0, 0}[i]), gonvml.SUCCESS
		if i == 3 {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{Gpu: util}, ret }
	})
	cfg := Config{Node: "n", StaleAfterS: 5, Engines: []EngineConfig{
		{ID: "two", Kind: engine.VLLM, MetricsURL: eng.URL, GPUs: []string{"0", "1"}},
		{ID: "one", Kind: engine.VLLM, MetricsURL: eng.URL, GPUs: []string{"2"}},
		{ID: "unread", Kind: engine.VLLM, MetricsURL: eng.URL, GPUs: []string{"2", "3"}},
		{ID: "nogpu", Kind: engine.VLLM, MetricsURL: eng.URL},
	}}
	a, err := New(cfg, WithNVML(mock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.Collect(ctx, 10e9)
	body.Store(real)
	got := map[string]*float64{}
	for _, e := range a.Collect(ctx, 14e9).Engines {
		if e.Latency == nil {
			t.Fatalf("%s: no latency interval", e.ID)
		}
		got[e.ID] = e.Latency.BusyS
	}
	// two: (0.4 + 0.6) / 2 × 4 s; one: 0.9 × 4 s
	for id, want := range map[string]float64{"two": 2, "one": 3.6} {
		if got[id] == nil || math.Abs(*got[id]-want) > 1e-9 {
			t.Errorf("%s busy_s %v; want %v", id, got[id], want)
		}
	}
	for _, id := range []string{"unread", "nogpu"} {
		if got[id] != nil {
			t.Errorf("%s busy_s %v; want absent", id, *got[id])
		}
	}
}
