package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestScrapeFile(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"scrape", "-kind", "vllm", "-file", "../../agent/testdata/vllm_new.prom",
		"-layers", "32", "-kv-heads", "8", "-head-dim", "128", "-dtype-bytes", "2", "-gpu-mem-gib", "40"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"running requests   12", "kv capacity tokens 91056", "= num_gpu_blocks 5691 × block_size 16",
		"kv bytes/token     131072", "kv nvml bound      294912 tokens", "kv limit           91056 tokens (engine)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestScrapeJSONAndErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"scrape", "-kind", "sglang", "-json", "-file", "../../agent/testdata/sglang.prom"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var v struct {
		Metrics struct {
			CapacityTokens int64 `json:"capacity_tokens"`
			KVUsedTokens   int64 `json:"kv_used_tokens"`
		} `json:"metrics"`
		KVUsage *float64 `json:"kv_usage"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Metrics.CapacityTokens != 430000 ||
		v.Metrics.KVUsedTokens != 30123 || v.KVUsage == nil || *v.KVUsage != 0.07 {
		t.Fatalf("unexpected JSON (%v): %s", err, out.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"scrape", "-file", "../../agent/testdata/garbage.txt"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "not in the text exposition format") {
		t.Fatalf("garbage: exit %d, %q", code, errb.String())
	}
	if code := run(context.Background(), []string{"scrape"}, &out, &errb); code != 2 {
		t.Fatalf("no source: exit %d; want 2", code)
	}
	if code := run(context.Background(), []string{"-config", "/nonexistent.yaml"}, &out, &errb); code != 2 {
		t.Fatalf("missing config: exit %d; want 2", code)
	}
}

// Bad command-line input is refused by name with exit 2 before anything
// runs. It used to pass: an argument after the flags was ignored (run
// /etc/my-agent.yaml ran on the default -config), -gpu-mem-gib NaN or
// +Inf became 8 EiB of GPU memory and a KV limit of 70 trillion tokens,
// and -timeout 0 or below failed every scrape as a deadline.
func TestBadFlagsAreRefused(t *testing.T) {
	const file = "../../agent/testdata/vllm_new.prom"
	geom := []string{"-layers", "32", "-kv-heads", "8", "-head-dim", "128", "-dtype-bytes", "2"}
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"run", "-config", "/nonexistent.yaml", "my-agent.yaml"}, `unexpected argument "my-agent.yaml"`},
		{[]string{"my-agent.yaml"}, `unexpected argument "my-agent.yaml"`},
		{[]string{"scrape", "-file", file, "extra"}, `unexpected argument "extra"`},
		{append([]string{"scrape", "-file", file, "-gpu-mem-gib", "NaN"}, geom...), "-gpu-mem-gib NaN: must be in [0, 1048576]"},
		{append([]string{"scrape", "-file", file, "-gpu-mem-gib", "+Inf"}, geom...), "-gpu-mem-gib +Inf: must be in [0, 1048576]"},
		{[]string{"scrape", "-file", file, "-gpu-mem-gib", "-1"}, "-gpu-mem-gib -1: must be in [0, 1048576]"},
		{[]string{"scrape", "-url", "http://127.0.0.1:1/metrics", "-timeout", "0s"}, "-timeout 0s: must be > 0"},
		{[]string{"scrape", "-url", "http://127.0.0.1:1/metrics", "-timeout", "-1s"}, "-timeout -1s: must be > 0"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), c.mention) {
			t.Fatalf("%q: unexpected result; got exit %d, stdout %q, stderr %q; want exit 2, no output, stderr mentioning %q",
				c.args, code, out.String(), errb.String(), c.mention)
		}
	}
}
