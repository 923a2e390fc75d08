// Private to lib/model: the Model's state and the per-block forward/backward
// it is built from. Blocks are run over a layer range [l0, l1) so pipeline
// stages (a contiguous range each) and tensor-parallel shards can reuse them.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace st {

// The parameters of one transformer block.
struct LayerParams {
  Param* attn_norm = nullptr;
  Param* wq = nullptr;
  Param* wk = nullptr;
  Param* wv = nullptr;
  Param* wo = nullptr;
  Param* ffn_norm = nullptr;
  Param* w1 = nullptr;  // gate
  Param* w3 = nullptr;  // up
  Param* w2 = nullptr;  // down
};

// Activations of one block (N = B*T rows). Which ones survive the forward
// depends on the checkpointing mode (see drop_activations in block.cpp):
//   None:      all
//   Selective: x, q, k, v, h2, g, u (GEMM outputs); the attention core
//              (att, lse), the norms and the SwiGLU product are recomputed
//   Full:      x only; the whole block is recomputed
struct BlockActs {
  Tensor x;           // block input [N, d] (the residual stream)
  Tensor rstd1, xn1;  // attention_norm: [N], [N, d]
  Tensor q, k, v;     // after RoPE (q, k): [N, Hq*hd], [N, Hkv*hd] x2
  Tensor att, lse;    // attention output [N, Hq*hd], log-sum-exp [B, Hq, T]
  Tensor h2;          // x + att wo^T  [N, d]
  Tensor rstd2, xn2;  // ffn_norm
  Tensor g, u, a;     // w1 (gate), w3 (up) outputs, silu(g)*u: [N, F]
};

// Shape of the current micro-batch.
struct Dims {
  int64_t B = 0, T = 0, N = 0;  // N = B*T
  int64_t d = 0, Hq = 0, Hkv = 0, hd = 0, F = 0, V = 0;
};

struct Model::Impl {
  ModelCfg cfg;
  ModelParallel par;
  ModelHooks hooks;
  std::vector<Param> params;  // stable addresses after construction
  Param* tok_emb = nullptr;
  std::vector<LayerParams> layers;
  Param* norm = nullptr;
  Param* output = nullptr;

  // RoPE tables for the current T: [T, hd/2] each.
  int64_t rope_T = -1;
  std::vector<float> rope_cos, rope_sin;

  Dims dims(int B, int T) const;
  void ensure_rope(int64_t T);

  // One block forward: reads a.x, fills every activation, returns the block
  // output when want_output (the next block's input). Afterwards the caller
  // drops what the mode does not keep.
  Tensor block_forward(int l, const Dims& D, BlockActs& a, bool want_output);
  // Refill what the mode dropped (recomputation before backward).
  void block_recompute(int l, const Dims& D, BlockActs& a, ActCkpt mode);
  // dh: in = d(loss)/d(block output), out = d(loss)/d(block input). Adds the
  // block's parameter gradients. Consumes (releases) the activations.
  void block_backward(int l, const Dims& D, BlockActs& a, Tensor& dh);

  // Layers [l0, l1): h is the input of l0, returned value the output of
  // l1-1. acts (size l1-l0) keeps what `mode` says; acts == nullptr keeps
  // nothing (forward only).
  Tensor layers_forward(int l0, int l1, const Dims& D, Tensor h, std::vector<BlockActs>* acts,
                        ActCkpt mode);
  // Backward through layers [l0, l1) in reverse; dh as in block_backward.
  void layers_backward(int l0, int l1, const Dims& D, std::vector<BlockActs>& acts, Tensor& dh,
                       ActCkpt mode);
};

void drop_activations(BlockActs& a, ActCkpt mode);
}  // namespace st
