// The one table of this rank's sharded training state (docs/design.md):
// for every piece of a parameter this rank updates, where the piece sits in
// the global tensor and where its fp32 master, AdamW moments, compute copy
// and reduced gradient live on the device. The engine builds it once (whole
// parameters under ZeRO 0, the ZeRO partition's pieces otherwise); the
// optimizer, the gradient norm, the checkpoint writer and the loader read it,
// so none of them knows the ZeRO stage or an index contract between lists.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.hpp"

namespace st {

class Communicator;

struct StatePiece {
  std::string name;                   // the parameter's (and checkpoint tensor's) name
  std::vector<int64_t> global_shape;  // the unsharded tensor
  std::vector<int64_t> block_offset;  // where this rank's tp block starts in it, per dim
  std::vector<int64_t> block_shape;   // the block's shape
  int64_t off = 0, len = 0;           // elements [off, off+len) of the block: whole rows
  bool decay = true;                  // weight decay applies
  bool tp_sharded = false;            // false: replicated over tp, tp rank 0 saves it
  // Master weights (device) of dtype state_t: fp32, or bf16 with
  // optim.state_dtype=bf16, where they are the compute weights themselves.
  void* master = nullptr;
  DType state_t = DType::F32;   // the masters' and the moments' dtype
  const float* grad = nullptr;  // fp32 gradient, reduced over dp x cp (device)
  void* compute = nullptr;      // compute copy AdamW refreshes (null: none, or master is it)
  DType compute_t = DType::BF16;
  Tensor m, v;  // AdamW moments of state_t, MemCat::Optim (the optimizer allocates them)
  // The piece's stochastic-rounding stream (bf16 state): its tensor and tp
  // block, so the random bits of an element do not depend on the ZeRO shard
  // or the dp degree that holds it.
  uint32_t rng_key() const;

  int64_t row() const {  // elements per row of dim 0 of the block
    int64_t r = 1;
    for (size_t i = 1; i < block_shape.size(); ++i) r *= block_shape[i];
    return r;
  }
};

struct StateTable {
  std::vector<StatePiece> pieces;
  // Replicated state (ZeRO 0): every rank of the dp x cp group holds every
  // piece. A checkpoint then splits each piece's rows over the replicas
  // (replica_rows), the loader reads a share and all-gathers the rest, and
  // the gradient norm's sums are not summed over the group. Otherwise each
  // piece is held by this rank alone.
  bool replicated = true;
  int replica = 0, replicas = 1;  // rank and size of the dp x cp group
  int tp_rank = 0;
  Communicator* replica_group = nullptr;  // the dp x cp group on the device
  Device* device = nullptr;               // where every pointer above lives
};

// Rows [lo, hi) of `rows` that replica r of n holds in a checkpoint.
inline std::pair<int64_t, int64_t> replica_rows(int64_t rows, int r, int n) {
  const int64_t base = rows / n, rem = rows % n;
  const int64_t lo = r * base + (r < rem ? r : rem);
  return {lo, lo + base + (r < rem ? 1 : 0)};
}
}  // namespace st
