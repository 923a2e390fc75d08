// Causal grouped-query scaled-dot-product attention through cuDNN's fused
// flash-attention engines, built with the cuDNN backend (graph) C API (the
// C++ cudnn-frontend is not a dependency). Same layouts and lse convention as
// kernels::attention_fwd/bwd in ops.hpp: q [B,T,Hq,hd], k,v [B,T,Hkv,hd],
// out like q, lse [B,Hq,T] fp32 (natural-log log-sum-exp of the scaled
// scores). Tensors are bf16. One execution plan per (direction, B, T, Hq,
// Hkv, hd), built on first use and cached; the workspace and the backward's
// fp32 dQ accumulator and softmax_sum (the frontend's workspace tensors,
// host/sdpa_graph.hpp) come from the device's allocator (MemCat::Workspace)
// and grow to the largest need (the stream is synchronised before a buffer
// in use is replaced). plan building throws st::Error when no cuDNN engine
// takes the graph; the caller may then fall back (cuda_ops.cpp does).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "tensor/device.hpp"

struct cudnnContext;

namespace st::kernels::cuda {

class CudnnSdpa {
 public:
  // deterministic_bwd: the backward uses cuDNN's deterministic lowering (no
  // shared fp32 dQ accumulator) where deterministic_refuses() is "".
  CudnnSdpa(Device& dev, bool deterministic_bwd);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  void fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t B,
           int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale, __nv_bfloat16* out,
           float* lse, cudaStream_t stream);
  // dq, dk, dv overwritten (dk/dv summed over the query heads of each group).
  void bwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
           const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* dout, int64_t B,
           int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, float scale, __nv_bfloat16* dq,
           __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream);

  // Builds (and caches) the plan of a shape without running it; throws when
  // cuDNN has no engine for it.
  void prepare(bool backward, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd);
  size_t cached_plans() const;
  // "" when this cuDNN on this GPU takes the shape (host/sdpa_rules.hpp), else why not.
  std::string refuses(int64_t T, int64_t hd) const;
  // "" when this cuDNN on this GPU has a deterministic backward (host/sdpa_rules.hpp).
  std::string deterministic_refuses() const;
  static const char* description();  // "cuDNN <version> fused SDPA (backend graph API)"

  struct Plan;  // op graph + execution plan + workspace size (sdpa_cudnn.cpp)

 private:
  using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t>;
  Plan& plan_for(const Key& k);
  // A buffer of at least `bytes` (grown in place: the old one is freed after
  // `stream` is synchronised).
  void* grow(void*& p, size_t& have, size_t bytes, cudaStream_t stream);

  Device& dev_;
  cudnnContext* handle_ = nullptr;
  mutable std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  void* bwd_ws_ = nullptr;  // the backward's dQ accumulator + softmax_sum
  size_t bwd_ws_bytes_ = 0;
  int64_t version_ = 0;  // cudnnGetVersion() at run time
  int sm_major_ = 0;
  bool det_bwd_ = false;  // the backward graph is the deterministic one
};

}  // namespace st::kernels::cuda
