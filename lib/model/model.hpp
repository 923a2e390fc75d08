// Llama-style decoder-only transformer with an explicit forward and
// backward pass, written once for every backend (lib/backend): token
// embedding, pre-norm RMSNorm, RoPE, grouped-query causal attention, SwiGLU
// MLP, final RMSNorm, untied LM head, mean cross-entropy (docs/model.md has
// the exact formulas). Every kernel goes through the backend's Ops and every
// collective through its Communicators, on the device's compute stream; the
// host never reads device memory except through take_loss().
//
// Precision: activations and the weights the GEMMs read are in the compute
// dtype (fp32, or bf16 with fp32 math); parameter gradients are fp32. Master
// weights and optimizer state belong to the engine.
//
// Activation checkpointing: none (keep every activation), selective (keep
// the GEMM outputs, recompute the attention core, the norms and the SwiGLU
// product in backward), full (keep each block's input, recompute the
// block). All three give bitwise the same loss and gradients.
//
// Model-side parallelism (ModelParallel): tensor parallelism (Megatron
// column/row-parallel linears, vocab-parallel embedding, LM head and
// cross-entropy), sequence parallelism on the tp group, context parallelism
// (load-balanced causal split, ring attention), and a pipeline-stage API (a
// contiguous layer range per stage, several micro-batches in flight). Data
// parallelism and ZeRO live in lib/parallel and the engine; the model offers
// hooks for them (ModelHooks) and keeps its parameters in one flat buffer and
// its gradients in another, in forward order (embedding, blocks, head), so a
// gradient bucket is a range of the flat gradient buffer.
//
// Parameter names and layouts follow the Llama reference code, so the
// PyTorch reference test can load them one to one. Linear weights are
// row-major [out_features, in_features]; y = x W^T.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/step_parts.hpp"
#include "tensor/tensor.hpp"

namespace st {

enum class ActCkpt { None, Selective, Full };
ActCkpt parse_act_ckpt(const std::string& s);  // throws UsageError

class Backend;       // backend/backend.hpp
class Communicator;  // comm/communicator.hpp

// One parameter tensor as this rank holds it. Under tensor parallelism w is
// a slice of the global tensor: w == global[offset[0] : offset[0] +
// shape[0], offset[1] : ...] (a block; checkpoints and ZeRO use global_shape
// and offset). Names are the global names on every rank and stage.
struct Param {
  std::string name;                   // e.g. "layers.3.attention.wq.weight"
  Tensor w;                           // view: compute weights in the flat parameter buffer
  Tensor g;                           // view: fp32 gradient in the flat gradient buffer
  bool decay = true;                  // weight decay applies (false for norm weights)
  std::vector<int64_t> global_shape;  // shape of the unsharded tensor
  std::vector<int64_t> offset;        // this slice's start in the global tensor, per dim
  int layer = 0;            // -1 embedding, 0..n_layers-1 blocks, n_layers final norm + head
  bool tp_sharded = false;  // split over the tp group (false: replicated on every tp rank)
  int64_t flat_off = 0;     // start in the flat parameter and gradient buffers (elements)
  int64_t row = 1;          // elements per row (one index of dim 0)
};

// How this rank's model is parallelised. The communicators are borrowed
// (owned by the backend or the caller) and must outlive the Model.
//
// Tensor parallelism (tp, Megatron): wq/wk/wv split by heads (rows; q heads
// and kv heads each split evenly, so n_heads % tp == 0 and n_kv_heads % tp ==
// 0), w1/w3 by rows (ffn_hidden % tp == 0): column-parallel; wo and w2 by
// columns: row-parallel, output all-reduced over tp. tok_embeddings and
// output split by vocabulary rows (vocab_size % tp == 0): vocab-parallel
// embedding (masked lookup + all-reduce) and vocab-parallel LM head with a
// vocab-parallel cross-entropy (row max and sum-exp all-reduced over tp; the
// full logits are never gathered). Norm weights are replicated.
//
// Sequence parallelism (sp, needs tp > 1): between blocks (and at pipeline
// boundaries) the residual stream is split over tp: this rank's local token
// rows (B x T_local, row-major, see cp) are cut into tp contiguous equal
// chunks and tp rank r keeps chunk r (with B == 1 exactly the sequence split;
// for B > 1 the same rows as Megatron's [s, b] split up to a row permutation,
// which nothing between blocks depends on since every op there is row-wise).
// All-gather before the column-parallel GEMMs, reduce-scatter after the
// row-parallel ones; norms run on the local chunk and their weight gradients
// are all-reduced over tp inside the model. Needs (B*T/cp) % tp == 0.
//
// Context parallelism (cp): the sequence T is cut into 2*cp equal chunks and
// cp rank i holds chunks i and 2*cp-1-i (causal load balance), so T_local =
// T/cp and T % (2*cp) == 0. Callers pass the full [B, T] tokens and targets
// on every cp rank; the model takes its chunks. RoPE uses global positions;
// attention is a ring over cp (K/V blocks passed around, online-softmax merge
// by log-sum-exp; backward passes dK/dV around the ring).
//
// Pipeline (pp): this stage owns layers [layer_begin, layer_end) and, when
// has_embedding / has_head, the embedding / final norm + LM head + loss. The
// pipeline communicator and schedule are the caller's (stage_forward /
// stage_backward below); the model never talks to other stages.
struct ModelParallel {
  Communicator* tp = nullptr;           // null or size 1: no tensor parallelism
  bool sp = false;                      // sequence parallelism on the tp group (requires tp > 1)
  Communicator* cp = nullptr;           // null or size 1: no context parallelism
  int layer_begin = 0, layer_end = -1;  // this stage's layers; -1 = n_layers
  bool has_embedding = true;            // first pipeline stage
  bool has_head = true;                 // last stage: final norm, LM head, loss
};

struct ModelOptions {
  Backend* backend = nullptr;  // null: the default CPU backend
  DType compute = DType::F32;  // activations and compute weights (F32 or BF16)
  // ZeRO-3: each layer's compute weights get their own buffer, allocated by
  // allocate_layer_weights (and filled by the caller) and freed by
  // release_layer_weights; they start released and uninitialised.
  bool per_layer_weights = false;
  // Fill the compute weights with the seeded initial values (ignored with
  // per_layer_weights).
  bool init_weights = true;
  // LM head row chunks: at most this many bytes of logits each (in the
  // compute dtype); 0 = about 2^22 logits, at least 64 rows (runtime.head_chunk_mb).
  int64_t head_chunk_bytes = 0;
};

// Optional callbacks for data parallelism and ZeRO (lib/parallel). "layer"
// is -1 for the embedding, 0..n_layers-1 for blocks, n_layers for the final
// norm + LM head; only this stage's layers are reported.
struct ModelHooks {
  // Before a layer's parameters (w) are read: forward, recomputation and
  // backward each call it (ZeRO-3 gathers here).
  std::function<void(int layer)> before_layer;
  // After the current pass no longer needs that layer's w (ZeRO-3 frees).
  // Every before_layer(l) is followed by after_layer(l) before the next
  // before_layer of another layer.
  std::function<void(int layer)> after_layer;
  // params()[param_index].g holds its complete contribution from this
  // backward call (stage_backward / forward_backward) as far as the compute
  // stream is concerned: called once per parameter per call, layer by layer
  // in backward order, as soon as the work producing it is enqueued
  // (bucketed gradient reduction starts here, ordered after the compute
  // stream). For the blocks and the embedding this is between the layer's
  // before_layer and after_layer; the head (layer n_layers), whose backward
  // runs inside its forward, reports at the start of stage_backward without
  // hook calls (its weights are not needed again). Any reduction over tp has
  // already been enqueued.
  std::function<void(int param_index)> grad_ready;
};

// Gradient conventions (every layout):
//  - After backward, summing each local Param::g over the data-parallel x
//    context-parallel group gives grad_scale times the gradient of the sum of
//    the micro-batch mean losses (the engine passes grad_scale = 1 /
//    (grad_accum * dp), so the SUM over dp x cp is the gradient of the global
//    mean loss).
//  - Any reduction over tp (norm weights under sp) is done inside the model;
//    tp-replicated params then hold equal gradients on every tp rank.
//  - The loss of a micro-batch on the last stage, summed over the cp group,
//    is the micro-batch mean loss (each cp rank's share is the sum of its
//    token losses / the micro-batch's count of valid targets); it is equal on
//    all tp ranks.
// Initial weights equal the single-rank model's for every layout: each rank
// draws its slice of the same seeded global stream (init_values).
class Model {
 public:
  Model(const ModelCfg& cfg, uint64_t seed, const ModelParallel& par = {},
        const ModelOptions& opt = {});
  ~Model();

  const ModelCfg& cfg() const;
  const ModelParallel& parallel() const;
  Backend& backend() const;
  DType compute_dtype() const;
  // This rank's parameters (this stage's layers, this tp slice), in the
  // single-rank order restricted to them. Addresses are stable.
  std::vector<Param*> params();
  int64_t num_params() const;  // elements held by this rank
  void set_hooks(ModelHooks h);

  // ---- Flat buffers. Each parameter starts on a 64-element boundary; a
  // layer's parameters are one contiguous range [off, off + len). ----
  int64_t flat_numel() const;
  std::pair<int64_t, int64_t> layer_span(int layer) const;  // {0, 0} if not on this stage
  // The compute weights of the flat range starting at `flat_off` (inside a
  // resident layer with per_layer_weights).
  void* weights_at(int64_t flat_off);
  float* grads();                          // the flat fp32 gradient buffer (null while released)
  void allocate_layer_weights(int layer);  // per_layer_weights: contents undefined
  void release_layer_weights(int layer);
  bool layer_resident(int layer) const;
  // The gradient buffer (ZeRO 2/3 free it between reductions). allocate_grads
  // leaves it zeroed.
  void allocate_grads();
  void release_grads();
  bool grads_allocated() const;
  void zero_grad();

  // The seeded initial values of rows [row0, row0 + rows) of p's block (this
  // rank's tp slice), fp32 on the host: normal(0, init_std) for weights, 1 for
  // norm weights.
  void init_values(const Param& p, int64_t row0, int64_t rows, float* out) const;

  // ---- Pipeline-stage API. forward_backward() is built on it. ----
  // Forward one micro-batch (id `micro`, any int unique among those in
  // flight; several may be in flight, e.g. 1F1B keeps up to pp). B, T are
  // the micro-batch's global shape (T <= seq_len). tokens [B, T] host: first
  // stage (full sequence on every cp rank); x_in: other stages, the previous
  // stage's x_out on the same tp/cp coordinates (boundary_elems(B, T)
  // elements of the compute dtype); targets [B, T] host: last stage (< 0
  // ignored). Keeps what `mode` says for the backward. Non-last stages move
  // their output into *x_out; the last stage adds its loss share to the loss
  // accumulator (take_loss) and, since the loss is the last op, also runs
  // the head's backward right away (d(loss) times grad_scale): the LM head
  // and the cross-entropy go through the vocabulary in row chunks, each
  // chunk's logits turned into their gradient in place, so the [rows,
  // vocab] logits never exist whole and are never stored for the backward.
  void stage_forward(int micro, const int32_t* tokens, const Tensor* x_in, const int32_t* targets,
                     int B, int T, ActCkpt mode, float grad_scale, Tensor* x_out);
  // Backward of a micro-batch forwarded earlier. dy: d(loss)/d(x_out) from
  // the next stage (non-last stages; already includes grad_scale); the last
  // stage continues from its forward (grad_scale must equal the forward's).
  // ADDS into every Param::g; non-first stages move d(loss)/d(x_in) into
  // *dx_in. Frees the micro's activations.
  void stage_backward(int micro, const Tensor* dy, float grad_scale, Tensor* dx_in);
  // Elements of x_in / x_out / dy / dx_in per micro-batch on this rank:
  // B * T / cp (/ tp under sp) * d_model.
  int64_t boundary_elems(int B, int T) const;
  // Micro-batches forwarded and not yet backwarded.
  int in_flight() const;
  // Synchronises the compute stream and returns the sum of the loss shares
  // of the micro-batches forwarded since the last call (0 off the last stage).
  double take_loss();
  // Forward and backward device seconds (StepMeasured's fwd and bwd, from
  // events on the compute stream), summed over micro-batches since the last
  // call (call after a synchronisation, e.g. take_loss).
  StepMeasured take_times();

  // pp = 1 convenience (this rank holds every layer, embedding and head).
  // tokens, targets: host [B, T] int32 row-major, T <= seq_len. Runs forward
  // and backward, ADDS d(mean loss)/dw * grad_scale into every Param::g, and
  // returns the mean cross-entropy over the B*T targets (under cp: this cp
  // rank's share). Synchronises.
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                         float grad_scale, ActCkpt mode);

  // Forward only (pp = 1): mean cross-entropy (no activations kept; under cp,
  // this rank's share). Synchronises.
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parameter count of a config (embedding + layers + final norm + head).
int64_t count_params(const ModelCfg& cfg);
// Global token positions cp rank r of cp holds of a sequence of Tg tokens:
// chunks r and 2cp-1-r of 2cp equal chunks (the causal load balance).
std::vector<int32_t> cp_positions(int r, int cp, int64_t Tg);
}  // namespace st
