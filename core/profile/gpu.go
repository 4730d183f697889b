package profile

import "strings"

// GPU is one accelerator's datasheet figures: what the prior needs.
type GPU struct {
	// Name is the canonical kind, e.g. "H100-SXM-80GB".
	Name string `json:"name"`
	// Aliases are other spellings matched after normalisation (NVML
	// names such as "NVIDIA H100 80GB HBM3", short kinds such as "H100").
	Aliases []string `json:"aliases,omitempty"`
	// BF16TFLOPS and FP8TFLOPS are dense peak tensor throughput (without
	// structured sparsity), 10^12 FLOP/s; FP8 0 means no FP8 tensor cores.
	BF16TFLOPS float64 `json:"bf16_tflops"`
	FP8TFLOPS  float64 `json:"fp8_tflops"`
	// HBMGBps is memory bandwidth, 10^9 B/s; MemoryGB is memory, 10^9 B.
	HBMGBps  float64 `json:"hbm_gbps"`
	MemoryGB float64 `json:"memory_gb"`
	// LinkGBps is the per-GPU unidirectional bandwidth to its
	// tensor-parallel peers (NVLink / Infinity Fabric half of the
	// bidirectional total; PCIe for cards without a GPU link), 10^9 B/s.
	LinkGBps float64 `json:"link_gbps"`
	// Source names the datasheet the figures come from.
	Source string `json:"source"`
}

// The built-in GPU table. Every figure is the vendor's datasheet number;
// where a datasheet quotes "with sparsity" only, the dense figure is half
// of it (the datasheets say so in their footnotes).
var gpus = []GPU{
	{Name: "A100-SXM-40GB", Aliases: []string{"A100-40GB", "A100-40G", "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
		BF16TFLOPS: 312, HBMGBps: 1555, MemoryGB: 40, LinkGBps: 300,
		Source: "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): BF16 312 TFLOPS dense, 40GB HBM2 1,555 GB/s, NVLink 600 GB/s"},
	{Name: "A100-SXM-80GB", Aliases: []string{"A100", "A100-80GB", "A100-80G", "A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"},
		BF16TFLOPS: 312, HBMGBps: 2039, MemoryGB: 80, LinkGBps: 300,
		Source: "NVIDIA A100 Tensor Core GPU datasheet (same document): BF16 312 TFLOPS dense, 80GB HBM2e 2,039 GB/s (SXM), NVLink 600 GB/s"},
	{Name: "H100-SXM-80GB", Aliases: []string{"H100", "H100-80GB", "H100-80G", "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", "H100-SXM"},
		BF16TFLOPS: 989, FP8TFLOPS: 1979, HBMGBps: 3350, MemoryGB: 80, LinkGBps: 450,
		Source: "NVIDIA H100 Tensor Core GPU datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet), H100 SXM: BF16 1,979 and FP8 3,958 TFLOPS with sparsity (dense half), 80GB 3.35 TB/s, NVLink 900 GB/s"},
	{Name: "H100-PCIe-80GB", Aliases: []string{"H100-PCIe", "H100 PCIe", "NVIDIA H100 PCIe", "H100-PCIE-80GB"},
		BF16TFLOPS: 756, FP8TFLOPS: 1513, HBMGBps: 2000, MemoryGB: 80, LinkGBps: 300,
		Source: "NVIDIA H100 Tensor Core GPU datasheet (same document), H100 PCIe: BF16 1,513 and FP8 3,026 TFLOPS with sparsity (dense half), 80GB 2 TB/s, NVLink bridge 600 GB/s"},
	{Name: "H200-SXM-141GB", Aliases: []string{"H200", "NVIDIA H200", "H200-SXM", "H200-141GB"},
		BF16TFLOPS: 989, FP8TFLOPS: 1979, HBMGBps: 4800, MemoryGB: 141, LinkGBps: 450,
		Source: "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), H200 SXM: BF16 1,979 and FP8 3,958 TFLOPS with sparsity (dense half), 141GB HBM3e 4.8 TB/s, NVLink 900 GB/s"},
	{Name: "B200-180GB", Aliases: []string{"B200", "NVIDIA B200", "HGX-B200"},
		BF16TFLOPS: 2250, FP8TFLOPS: 4500, HBMGBps: 7700, MemoryGB: 180, LinkGBps: 900,
		Source: "NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx), 8-GPU totals divided by 8: FP16/BF16 36 PFLOPS and FP8 72 PFLOPS with sparsity (dense half), 1.44 TB memory, 62 TB/s (rounded down to 7.7 TB/s per GPU), NVLink 5 1.8 TB/s"},
	{Name: "L40S-48GB", Aliases: []string{"L40S", "NVIDIA L40S"},
		BF16TFLOPS: 362, FP8TFLOPS: 733, HBMGBps: 864, MemoryGB: 48, LinkGBps: 32,
		Source: "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): BF16 362.05 TFLOPS, FP8 733 TFLOPS (dense; sparsity doubles), 48GB GDDR6 864 GB/s, PCIe Gen4 x16 64 GB/s bidirectional, no NVLink"},
	{Name: "L4-24GB", Aliases: []string{"L4", "NVIDIA L4"},
		BF16TFLOPS: 121, FP8TFLOPS: 242.5, HBMGBps: 300, MemoryGB: 24, LinkGBps: 32,
		Source: "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4): BF16 242 and FP8 485 TFLOPS with sparsity (dense half), 24GB GDDR6 300 GB/s, PCIe Gen4 x16 64 GB/s bidirectional"},
	{Name: "MI300X-192GB", Aliases: []string{"MI300X", "AMD Instinct MI300X", "Instinct MI300X"},
		BF16TFLOPS: 1307.4, FP8TFLOPS: 2614.9, HBMGBps: 5300, MemoryGB: 192, LinkGBps: 448,
		Source: "AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html): BF16 1,307.4 TFLOPS and FP8 2,614.9 TFLOPS dense, 192GB HBM3 5.3 TB/s, Infinity Fabric 896 GB/s peer bandwidth"},
}

// GPUs returns the built-in GPU table (a fresh copy).
func GPUs() []GPU {
	out := make([]GPU, len(gpus))
	copy(out, gpus)
	return out
}

// normGPU lowercases a GPU kind and drops vendor names, separators and a
// trailing "b" of "gb", so that "NVIDIA A100-SXM4-80GB", "a100-80g" and
// "A100 80GB" compare equal where they should.
func normGPU(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.NewReplacer("nvidia", "", "amd", "", "instinct", "", "tensor core gpu", "",
		"-", "", "_", "", " ", "", "sxm5", "sxm", "sxm4", "sxm", "hbm3e", "", "hbm3", "", "hbm2e", "").Replace(s)
	return strings.TrimSuffix(s, "b")
}

// LookupGPU finds a GPU by name or alias (case, separators and vendor
// prefixes ignored); a bare kind ("H100", "A100") picks the SXM part with
// the most memory.
func LookupGPU(name string) (GPU, bool) {
	n := normGPU(name)
	if n == "" {
		return GPU{}, false
	}
	for _, g := range gpus {
		if normGPU(g.Name) == n {
			return g, true
		}
		for _, a := range g.Aliases {
			if normGPU(a) == n {
				return g, true
			}
		}
	}
	return GPU{}, false
}
