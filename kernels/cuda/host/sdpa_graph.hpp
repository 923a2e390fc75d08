// The cuDNN fused-SDPA graphs as a description, compiled without nvcc or
// cuDNN headers: describe_sdpa() makes the calls of a graph builder (its
// tensors with dims and strides, its operations in order), and
// kernels/cuda/sdpa_cudnn.cpp's builder turns each call into cuDNN
// backend descriptors. A recording builder lets a CPU test check every
// tensor against the [B,T,H,hd] / [B,H,T] buffers the model passes, the
// shapes every matmul sees, and the op list (label cuda-host).
//
// The graphs are the pattern cudnn-frontend 1.3-1.7 lowered its SDPA nodes
// to (cuDNN <= 9.4; no bias, no dropout, top-left causal mask, stats out):
//   forward : S = (Q K^T) * scale; causal select(row >= col, S, lowest);
//             softmax with stats (max, sub, exp, sum, log, add -> lse);
//             P (bf16) = exp / sum; O = P V
//   backward: D = rowsum(dO * O); P = exp(causal(Q K^T * scale) - lse);
//             dV = P^T dO; dS = P * (dO V^T - D) * scale; dK = dS^T Q;
//             dQ = dS K (fp32 accumulator, then to bf16).
//   Grouped-query: dV/dK are formed per query head and summed over each
//   group of Hq/Hkv heads by a reduction, as the frontend does.
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
  kUidVirtual = 100
};

struct GTensor {
  int64_t uid = 0;
  GType type = GType::F32;
  Dims4 dim{}, stride{};
  bool is_virtual = false, by_value = false;
  bool reorder_f16x16 = false;  // CUDNN_TENSOR_REORDERING_F16x16
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
// log-sum-exp [B,Hq,T].
void describe_sdpa(GraphSink& g, bool backward, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                   int64_t hd);

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
