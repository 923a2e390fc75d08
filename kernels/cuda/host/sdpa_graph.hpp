// The cuDNN fused-SDPA graphs as a description, compiled without nvcc or
// cuDNN headers: describe_sdpa() makes the calls of a graph builder (its
// tensors with dims and strides, its operations in order), and
// kernels/cuda/sdpa_cudnn.cpp's builder turns each call into cuDNN
// backend descriptors. A recording builder lets a CPU test check every
// tensor against the [B,T,H,hd] / [B,H,T] buffers the model passes, the
// shapes every matmul sees, and the op list (label cuda-host).
//
// The graphs are the composite lowering of cudnn-frontend v1.23.0 (commit
// 3929da2ef4c1dba1bb8acb68727b9134f26f40c0) for a causal bf16 SDPA with
// stats out (no bias, no dropout, top-left diagonal), as it builds them for
// the cuDNN 9.19 headers this project compiles against (the single softmax
// and diagonal-band-mask backend ops need cuDNN >= 9.21 headers and
// library, node/softmax.h and node/diagonal_band_mask.h):
//   forward (node/scaled_dot_product_flash_attention.h,
//   CompositeSDPANode::expand_node): S = (Q K^T) * scale; causal
//   select(row >= col, S, mask value) (utils/attn_score_modifiers.h,
//   sliding_window_mask -> CompositeDiagonalBandMaskNode); softmax with
//   stats (CompositeSoftmaxNode: max, sub, exp, sum, log, add -> lse; div);
//   P in the i/o type; O = P V.
//   backward (CompositeSDPABackwardNode::expand_node): softmax_sum =
//   rowsum(dO * O) * 1, a workspace tensor (not virtual); P =
//   exp(causal(Q K^T * scale - lse)) (the mask after the stats);
//   dV = P^T dO; dS = (dO V^T - softmax_sum) * P * scale (no dP * 1);
//   dK = dS^T Q; dQ = dS K into an fp32 dQ_accum without reordering, then
//   identity to bf16; or, with dp_workspace (the frontend's dP-workspace
//   implementation, its deterministic algorithm on Hopper), dQ = dS K
//   straight into dQ, no accumulator. Grouped-query: dV/dK per query head,
//   summed over each group by a reduction.
// The mask value and who zeroes dQ_accum depend on the cuDNN version found
// at run time (sdpa_rules.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace st::cuda_host {

using Dims4 = std::array<int64_t, 4>;
enum class GType { BF16, F32, I32, Bool };
enum class Pw { Mul, Sub, Add, Div, Exp, Log, GenIndex, CmpGe, Select, Identity };
enum class Red { Max, Add };

// The tensors bound at execution (variant pack unique ids); virtual ones
// are numbered from kVirtual.
enum SdpaUid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidStats,
  kUidScale,
  kUidNegInf,
  kUidDO,
  kUidDQ,
  kUidDK,
  kUidDV,
  kUidOne,
  kUidDQAcc,
  kUidSoftmaxSum,
  kUidVirtual = 100
};

struct GTensor {
  int64_t uid = 0;
  GType type = GType::F32;
  Dims4 dim{}, stride{};
  bool is_virtual = false, by_value = false;
};

// What a graph is made of; tensor() returns the handle later calls use.
class GraphSink {
 public:
  virtual ~GraphSink() = default;
  virtual int tensor(const GTensor& t) = 0;
  // y = mode(x [, b [, t]]); axis for GenIndex (-1: none). b, t: -1 none.
  virtual void pointwise(Pw mode, GType prec, int x, int b, int t, int y, int64_t axis) = 0;
  virtual void reduction(Red mode, int x, int y) = 0;
  virtual void matmul(int a, int b, int c) = 0;
  virtual void reshape(int x, int y) = 0;
};

// The forward or backward graph for queries [B,T,Hq,hd] and keys/values
// [B,T,Hkv,hd] (bf16, token-major as the model stores them) and the fp32
// log-sum-exp [B,Hq,T]. dp_workspace (backward only): dQ without the fp32
// accumulator (sdpa_rules.hpp, cudnn_deterministic_bwd_refuses).
void describe_sdpa(GraphSink& g, bool backward, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                   int64_t hd, bool dp_workspace = false);

// A sink that records: tensors by handle, ops in order.
struct RecordedOp {
  std::string kind;  // "matmul", "reshape", "reduce_max", "pw_mul", ... (see op_name)
  std::vector<int> in;
  int out = -1;
  int64_t axis = -1;
};
class RecordingSink final : public GraphSink {
 public:
  int tensor(const GTensor& t) override;
  void pointwise(Pw mode, GType prec, int x, int b, int t, int y, int64_t axis) override;
  void reduction(Red mode, int x, int y) override;
  void matmul(int a, int b, int c) override;
  void reshape(int x, int y) override;
  std::vector<GTensor> tensors;
  std::vector<RecordedOp> ops;
  std::vector<std::string> kinds() const;
};
const char* op_name(Pw mode);
const char* op_name(Red mode);
}  // namespace st::cuda_host
