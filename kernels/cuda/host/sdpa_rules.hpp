// What the cuDNN version found at run time (cudnnGetVersion(), e.g. 91900
// for 9.19.0) and the GPU's architecture change in the fused-SDPA graphs of
// kernels/cuda/sdpa_cudnn.cpp, as cudnn-frontend v1.23.0 decides them
// (commit 3929da2ef4c1dba1bb8acb68727b9134f26f40c0; files named per
// function). Compiled without nvcc, tested on CPUs (label cuda-host).
#pragma once
#include <cstdint>
#include <string>

namespace st::cuda_host {

// The value the causal mask writes: float lowest() before cuDNN 9.10.0,
// -infinity from it (utils/attn_score_modifiers.h, get_negative_inf_value).
float sdpa_mask_value(int64_t cudnn_version);

// Whether the caller zeroes the backward's fp32 dQ accumulator before each
// run: before cuDNN 9.6.0 the frontend memsets it, from 9.6.0 the engine
// does (node/scaled_dot_product_flash_attention.h,
// CompositeSDPABackwardNode::collect_tensors_in_workspace_node).
bool sdpa_zero_dq_accum(int64_t cudnn_version);

// "" when cuDNN's fused SDPA can take a causal bf16 shape in both
// directions on a GPU of compute capability major sm_major, else why not.
// The frontend's pre-validation: 9.10.0 and 9.10.1 refused (known bugs),
// head_dim a multiple of 8, backward head_dim at most 256 on Hopper (sm 9x)
// and at most 128 elsewhere, no s_q = s_kv = 1 backward
// (node/sdpa_support_surface.h and CompositeSDPABackwardNode::pre_validate_node).
std::string cudnn_sdpa_refuses(int64_t cudnn_version, int sm_major, int64_t T, int64_t hd);

// "" when cuDNN's deterministic SDPA backward can be used on this GPU with
// this cuDNN, else why the block kernels run instead. cudnn-frontend v1.23.0
// (CompositeSDPABackwardNode): on Hopper (sm 9x) the deterministic algorithm
// is the dP-workspace lowering (dQ = dS K written straight to dQ, no fp32
// accumulator shared by atomics; describe_sdpa's dp_workspace); on Blackwell
// (sm 10x) it needs cuDNN >= 9.18.0 and an engine chosen by knob overrides
// (override_heuristics_query), which this backend's graph builder does not
// set; elsewhere the frontend forces the same lowering but does not select
// it by default on any pre-Hopper GPU, so whether cuDNN's engines take it
// there is not known: refused.
std::string cudnn_deterministic_bwd_refuses(int64_t cudnn_version, int sm_major);

// "9.19.0" from 91900.
std::string cudnn_version_name(int64_t cudnn_version);
}  // namespace st::cuda_host
