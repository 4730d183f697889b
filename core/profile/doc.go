// Package profile gives the controller a latency profile for any model on
// any GPU: a geometry prior derived from the model's shape and the GPU's
// datasheet, and measured points from a profile file. It builds with
// CGO_ENABLED=0 and imports only core/controller.
//
// # The prior
//
// From a Geometry (a model's Hugging Face config.json fields: layers,
// hidden size, attention and KV heads, head dim, intermediate size,
// vocabulary, routed/shared/active experts, MLA ranks, dtype) and a GPU
// (dense BF16/FP8 peak, HBM bandwidth, memory, link bandwidth) at tensor
// parallel degree TP:
//
//	prefill(L)   = max(2·P_active·L / (TP·peak·ComputeEff) + 2·layers·L²·d_attn / (TP·peak·AttnEff),
//	                   weight bytes / (TP·HBM·MemEff))
//	               + 2·layers·allreduce(L·hidden·2 B) + StepOverhead + layers·LayerOverhead
//	decode(b, C) = max((weights touched + C·KV bytes per token) / (TP·HBM·MemEff),
//	                   2·P_active·b / (TP·peak·ComputeEff) + 4·layers·C·d_attn / (TP·peak·AttnEff))
//	               + 2·layers·allreduce(b·hidden·2 B) + StepOverhead + layers·LayerOverhead + b·SeqOverhead
//
// with allreduce(x) = AllReduceLatency + 2(TP−1)/TP · x / (link·LinkEff)
// (0 at TP 1), P_active the weights one token passes through (for MoE the
// active experts; a decode step reads the experts its batch touches,
// E·(1−(1−k/E)^b)), and d_attn the attention width (heads × head dim).
// The factors (Factors, DefaultFactors) are one set for every GPU and
// model, chosen against the published measurements in
// ../shared/profiles (README.md has the comparison and its command).
// Prior.Profile evaluates the prior on a grid and fits the controller's
// profile form to it; a prior covers every length (profile_coverage).
//
// Resolve is the controller's resolver: a built-in geometry (Geometries,
// each with its config.json source) on a built-in GPU (GPUs, each with
// its datasheet) at the engine's TP. Any other model is priced from its
// config.json through a profile file's hf_config (FromHFConfig).
//
// # Profile files
//
// LoadFile reads profiles.file (--profiles): measured prefill and decode
// points per (model, GPU, TP), optionally an hf_config for the phases
// without points; errors name the file, the line and the field. README.md
// documents the format with an example.
package profile
