// Which path causal attention takes per shape (cuDNN's fused SDPA or the
// block kernels of attention.cu), and what ran: the bookkeeping of
// CudaOps::use_cudnn, compiled without nvcc and tested on CPUs (label
// cuda-host). No silent fallback:
//  - a shape cuDNN cannot take by rule (head_dim) goes to the block kernels
//    for good; a plan that failed to build is tried again the next time the
//    shape comes, up to kMaxTries failures (a transient failure is not
//    cached forever), then the shape stays on the block kernels;
//  - every call is counted by path and direction; describe() reports the
//    counts and the shapes on the block kernels, with the reason.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace st::cuda_host {

// Block: the block kernels where cuDNN was wanted but could not run the
// shape; BlockChosen: the block kernels by configuration
// (runtime.attention_backward=deterministic).
enum class AttnPath { Cudnn, Block, BlockChosen };

struct AttnShape {
  int64_t B = 0, T = 0, Hq = 0, Hkv = 0, hd = 0;
  bool operator<(const AttnShape& o) const {
    return std::tie(B, T, Hq, Hkv, hd) < std::tie(o.B, o.T, o.Hq, o.Hkv, o.hd);
  }
};

struct AttnCounts {
  int64_t cudnn_fwd = 0, cudnn_bwd = 0, block_fwd = 0, block_bwd = 0, chosen_bwd = 0;
};

// The counts of one direction as the step record's `paths` names them
// (kernels/ops.hpp OpPaths: "cudnn", "block", "block_chosen"); paths that
// did not run are left out.
std::map<std::string, int64_t> attn_path_names(const AttnCounts& c, bool backward);

class AttnPathPolicy {
 public:
  static constexpr int kMaxTries = 3;

  // What a call does for the shape: use the cuDNN plans already built; try
  // to build them (a forward call, on a shape neither refused by rule nor
  // failed kMaxTries times); or run the block kernels. A backward call never
  // builds plans: it follows what its forward could use, so one
  // micro-batch's two directions take one path.
  enum class Decision { UseCudnn, TryCudnn, UseBlock };
  Decision decide(const AttnShape& s, bool backward);
  void refused(const AttnShape& s, const std::string& why);  // by rule: for good
  void plan_ok(const AttnShape& s);
  // A failed plan build; true when the shape now stays on the block kernels.
  bool plan_failed(const AttnShape& s, const std::string& why);

  void ran(AttnPath p, bool backward);
  AttnCounts counts() const;
  AttnCounts take_counts();  // since the last take (per step)
  // "cuDNN fwd/bwd a/b, block kernels fwd/bwd c/d; on the block kernels:
  // B=.. T=.. Hq=.. Hkv=.. hd=..: why" (empty parts left out).
  std::string describe() const;

 private:
  struct State {
    bool ok = false, settled = false;  // settled: on the block kernels for good
    int failures = 0;
    std::string why;
  };
  mutable std::mutex mu_;
  std::map<AttnShape, State> shapes_;
  AttnCounts total_, since_take_;
};
}  // namespace st::cuda_host
