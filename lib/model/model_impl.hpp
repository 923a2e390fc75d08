// Private to lib/model: the Model's state and the per-block forward/backward
// it is built from. Blocks are run over a layer range [l0, l1) so pipeline
// stages (a contiguous range each) reuse them; every shape here is this
// rank's share under tensor / sequence / context parallelism (see Dims).
// Tensors live on the backend's device; everything is enqueued on its
// compute stream (cs()).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "model/model.hpp"
#include "tensor/interval.hpp"

namespace st {

// The parameters of one transformer block (null outside this stage).
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

// Activations of one block (compute dtype; rstd and lse fp32). Which ones
// survive the forward depends on the checkpointing mode (see
// drop_activations in block.cpp):
//   None:      all
//   Selective: x, q, k, v, h2, g, u (GEMM outputs); the attention core
//              (att, lse), the norms and the SwiGLU product are recomputed
//   Full:      x only; the whole block is recomputed
// Rows: x, rstd, h2 hold Ns rows (the residual stream, split over tp under
// sp); xn1/xn2 and everything between the GEMMs hold N rows.
struct BlockActs {
  Tensor x;           // block input [Ns, d] (the residual stream)
  Tensor rstd1, xn1;  // attention_norm: [Ns], [N, d] (all-gathered under sp)
  Tensor q, k, v;     // after RoPE (q, k): [N, Hq*hd], [N, Hkv*hd] x2
  Tensor att, lse;    // attention output [N, Hq*hd], log-sum-exp [B, Hq, T]
  Tensor h2;          // x + att wo^T  [Ns, d]
  Tensor rstd2, xn2;  // ffn_norm
  Tensor g, u, a;     // w1 (gate), w3 (up) outputs, silu(g)*u: [N, F]
};

// Shape of the current micro-batch as this rank sees it.
struct Dims {
  int64_t B = 0;
  int64_t Tg = 0;  // global sequence length
  int64_t T = 0;   // local sequence length (Tg / cp)
  int64_t N = 0;   // B*T local token rows (GEMM rows)
  int64_t Ns = 0;  // rows of the residual stream: N / tp under sp, else N
  int64_t d = 0;
  int64_t Hq = 0, Hkv = 0, hd = 0, F = 0;  // local heads and ffn width (/ tp)
  int64_t V = 0, v0 = 0;                   // local vocabulary rows [v0, v0 + V)
};

// One micro-batch between stage_forward and stage_backward.
struct MicroState {
  Dims D;
  ActCkpt mode = ActCkpt::None;
  Tensor tokens;                // local rows [N] int32 (first stage)
  Tensor targets;               // local rows [N] int32 (last stage)
  std::vector<BlockActs> acts;  // this stage's layers
  Tensor dh_head;               // last stage: d(loss)/d(head input) [Ns, d], from the forward
  float grad_scale = 1.f;       // last stage: the d(loss) the forward used
  int64_t n_valid = 0;          // valid targets of the whole micro-batch (over cp)
};

struct Model::Impl {
  ModelCfg cfg;
  ModelParallel par;
  ModelHooks hooks;
  Backend* be = nullptr;
  Device* dev = nullptr;
  Ops* ops = nullptr;
  DType cdt = DType::F32;
  bool per_layer = false;
  int64_t head_chunk_bytes = 0;  // ModelOptions::head_chunk_bytes
  int tp = 1, tp_rank = 0, cp = 1, cp_rank = 0;
  bool sp = false;
  int l0 = 0, l1 = 0;  // this stage's layers

  std::vector<Param> params;  // stable addresses after construction
  Param* tok_emb = nullptr;
  std::vector<LayerParams> layers;  // indexed by global layer
  Param* norm = nullptr;
  Param* output = nullptr;
  std::map<int, MicroState> micros;
  uint64_t seed = 0;
  std::vector<uint64_t> init_index;  // per param: its index in the single-rank model

  // Flat buffers: spans[layer + 1] = {offset, length}; total length.
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t flat_n = 0;
  Tensor weights;                 // contiguous compute weights (unless per_layer)
  std::map<int, Tensor> layer_w;  // per_layer: resident layers' compute weights
  Tensor grads;                   // fp32 gradients
  Tensor loss_acc;                // fp64 [1] on the device
  StepMeasured times_done;        // resolved phase seconds
  struct Span {
    StreamInterval iv;
    bool fwd;
    double h0 = 0;  // host epoch seconds when enqueued (the trace's span)
    int mb = 0;     // the call's index in this step (micro-batch, per chunk)
  };
  int fwd_calls = 0, bwd_calls = 0;           // this step's, for Span::mb
  std::vector<Span> pending;                  // recorded, unresolved phase spans
  std::vector<std::unique_ptr<Event>> spare;  // events to reuse

  // RoPE tables and positions for this rank's tokens of the current global
  // T: cos/sin [T_local, hd/2]; positions of every cp rank's rows [T_local]
  // (ring attention needs the other blocks' positions).
  int64_t rope_T = -1;
  Tensor rope_cos, rope_sin;
  std::vector<Tensor> pos_dev;            // per cp rank
  std::vector<std::vector<int32_t>> pos;  // host copies

  Stream& cs() { return dev->compute_stream(); }
  Tensor act(int64_t rows, int64_t cols) const {
    return Tensor({rows, cols}, cdt, MemCat::Activations, *dev);
  }
  Tensor f32(std::vector<int64_t> shape) const {
    return Tensor(std::move(shape), DType::F32, MemCat::Activations, *dev);
  }
  Tensor upload_i32(const std::vector<int32_t>& host);

  Dims dims(int B, int T) const;
  void ensure_rope(int64_t Tg);
  // Global positions held by cp rank r for a global length Tg.
  std::vector<int32_t> positions(int r, int64_t Tg) const;

  void hook_before(int l) {
    if (hooks.before_layer) hooks.before_layer(l);
  }
  void hook_after(int l) {
    if (hooks.after_layer) hooks.after_layer(l);
  }
  void grads_ready(std::initializer_list<const Param*> ps);
  void span_begin(bool fwd);
  void span_end();

  // Tensor-parallel plumbing. gather_rows: [Ns, d] -> [N, d] (all-gather
  // over tp under sp; a copy otherwise). reduce_rows: partial sums [N, d] ->
  // [Ns, d] (reduce-scatter under sp, all-reduce over tp otherwise).
  Tensor gather_rows(const Tensor& x, const Dims& D);
  Tensor reduce_rows(Tensor partial, const Dims& D);
  // Norm weight gradient: under sp the local rows' contribution is summed
  // over tp first. dw_local holds this micro-batch's contribution.
  void add_norm_grad(Param* p, Tensor& dw_local);

  // Attention core (local heads): plain causal attention, or the ring over cp.
  void attention_forward(const Dims& D, BlockActs& a);
  void attention_backward(const Dims& D, BlockActs& a, const Tensor& datt, Tensor& dq, Tensor& dk,
                          Tensor& dv);

  // One block forward: reads a.x, fills every activation, returns the block
  // output when want_output (the next block's input). Afterwards the caller
  // drops what the mode does not keep.
  Tensor block_forward(int l, const Dims& D, BlockActs& a, bool want_output);
  // Refill what the mode dropped (recomputation before backward).
  void block_recompute(int l, const Dims& D, BlockActs& a, ActCkpt mode);
  // dh: in = d(loss)/d(block output), out = d(loss)/d(block input) [Ns, d].
  // Adds the block's parameter gradients. Consumes the activations.
  void block_backward(int l, const Dims& D, BlockActs& a, Tensor& dh);

  // Layers [l0, l1) (global indices): h is the input of l0, returned value
  // the output of l1-1. acts (size l1-l0) keeps what `mode` says; acts ==
  // nullptr keeps nothing (forward only). Calls the layer hooks.
  Tensor layers_forward(int l0, int l1, const Dims& D, Tensor h, std::vector<BlockActs>* acts,
                        ActCkpt mode);
  // Backward through layers [l0, l1) in reverse; dh as in block_backward.
  void layers_backward(int l0, int l1, const Dims& D, std::vector<BlockActs>& acts, Tensor& dh,
                       ActCkpt mode);

  // Embedding (first stage): local token rows -> residual stream [Ns, d].
  Tensor embed_forward(const Dims& D, const Tensor& tok);
  void embed_backward(const Dims& D, const Tensor& tok, const Tensor& dh);
  // Head (last stage): final norm, LM head, cross-entropy in row chunks;
  // adds this rank's loss share to loss_acc. train: also the head's backward
  // (weight gradients added, d(loss)/d(head input) left in ms.dh_head).
  void head_forward(MicroState& ms, Tensor h, bool train);

  void forward(MicroState& ms, const int32_t* tokens, const Tensor* x_in, const int32_t* targets,
               bool keep, Tensor* x_out);
  // Rows of the LM head's logits computed at once (bounds the logits buffer).
  int64_t head_chunk_rows(const Dims& D) const;

  // Storage.
  void declare_params(bool has_embedding, bool has_head);  // construction, in order
  void allocate(bool init_weights);
  void bind_layer(int layer, void* base);  // re-point the layer's weight views
  void bind_grads();
  void upload_weights(Param& p);  // the seeded values into p.w
  void init_rows(const Param& p, int64_t row0, int64_t rows, float* out) const;
};

void drop_activations(BlockActs& a, ActCkpt mode);
void check_batch(const ModelCfg& c, int B, int T);  // throws UsageError
}  // namespace st
