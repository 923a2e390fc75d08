// The compute a rank runs for one micro-batch, as a list of kernel calls with
// their shapes: the GEMMs of every linear layer (forward, weight gradient,
// input gradient), attention (plain causal, or the ring-attention blocks of
// one cp rank), norms, RoPE, SwiGLU, copies and adds, cross-entropy, the
// embedding and AdamW. The list follows lib/model's block.cpp and stage.cpp
// call for call; `scaletrain-plan calibrate` times exactly these calls
// through kernels/ops.hpp, and the time model prices them (measured table on
// CPUs, roofline with efficiencies on GPUs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace st::plan {

enum class OpKind {
  Gemm,       // m n k ta tb: C[m,n] = op(A)[m,k] op(B)[k,n]
  AttnFwd,    // B T(local) Hq Hkv hd cp: causal attention, or the cp ring's blocks
  AttnBwd,    //   same
  NormFwd,    // rows d
  NormBwd,    // rows d
  RopeFwd,    // rows(B*T) heads hd
  RopeBwd,    //   same
  SwigluFwd,  // n
  SwigluBwd,  // n
  Add,        // n (y += x)
  Copy,       // n
  CeFwd,      // rows V
  CeBwd,      // rows V
  EmbedFwd,   // rows d
  EmbedBwd,   // rows d (V rows of the table)
  Adam,       // n elements of the optimizer step
  Alloc,      // n: fresh zeroed tensors of n elements in all (lib/tensor's allocate + free)
};
const char* op_name(OpKind k);

struct Op {
  OpKind kind = OpKind::Copy;
  int64_t s[6] = {0, 0, 0, 0, 0, 0};  // shape, per kind (above)
  bool ta = false, tb = false;        // GEMM transposes
  std::string key() const;            // e.g. "gemm 512x1152x512 NT"
  double flops() const;               // arithmetic (GEMM 2mnk; attention: causal work)
  double elements() const;            // elements the op reads and writes (memory traffic / bytes)
};
// Parses Op::key(); throws UsageError naming `where` on a bad key.
Op parse_op_key(const std::string& key, const std::string& where);

// The phases of one micro-batch on one rank (tp/sp/cp share of the shapes).
struct MicroOps {
  std::vector<Op> block_fwd, block_bwd, block_recompute;  // one block
  std::vector<Op> embed_fwd, embed_bwd;                   // first stage
  std::vector<Op> head_fwd, head_bwd;                     // last stage
};
MicroOps micro_ops(const Config& cfg);
// AdamW over this rank's optimizer elements (ZeRO shard or all).
Op adam_op(int64_t elements);
// The calls of a step's end on one rank of a stage holding stage_params:
// AdamW over its slots and the squares for the gradient norm (the buckets
// reduce the gradient buffer in place: no copies).
std::vector<Op> step_end_ops(const Config& cfg, int64_t stage_params);

}  // namespace st::plan
