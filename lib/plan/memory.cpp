// Implementation of memory.hpp: element counts of what the engine keeps per
// micro-batch chunk, walked over the stage's pipeline schedule and the
// gradient buckets' launches to find the largest moment of the step.
#include "plan/memory.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"

namespace st::plan {
namespace {

// Activation elements of one block and of the head, by checkpointing mode
// (lib/model/model_impl.hpp BlockActs, block.cpp, stage.cpp).
struct ActSizes {
  double block_full = 0;   // every activation of a block (during its forward / backward)
  double block_saved = 0;  // what the mode keeps between forward and backward
  double fwd_extra = 0;    // transients at a block forward's end: output copy, tp partial sums
  double bwd_extra = 0;    // at a block backward's start: incoming gradient (+ its gather under sp)
  double head_kept = 0;    // final norm input/output, logits, lse (last stage)
  double head_bwd = 0;     // head backward: kept set less lse, plus d(norm output)
};

ActSizes act_sizes(const Config& cfg) {
  const MicroDims D = micro_dims(cfg);
  const int tp = cfg.parallel.tp;
  const bool sp = cfg.parallel.sp;
  const double N = double(D.N), Ns = double(D.Ns), d = double(D.d);
  ActSizes a;
  const double x = Ns * d, rstd = Ns, xn = N * d, q = N * D.qd, kv = 2 * N * D.kd, att = N * D.qd,
               lse = N * D.Hq, h2 = Ns * d, gua = 3 * N * D.F;
  a.block_full = x + rstd + xn + q + kv + att + lse + h2 + rstd + xn + gua;
  const std::string& mode = cfg.train.act_ckpt;
  if (mode == "full")
    a.block_saved = x;
  else if (mode == "selective")
    a.block_saved = x + q + kv + h2 + 2 * N * D.F;
  else
    a.block_saved = a.block_full;
  // Forward, MLP half: the output copy of h2 [Ns, d]; with tp the partial
  // sum [N, d] (and under sp its reduce-scattered rows).
  a.fwd_extra = Ns * d + (tp > 1 ? N * d + (sp ? Ns * d : 0) : 0);
  a.bwd_extra = Ns * d + (sp ? N * d : 0);
  a.head_kept = Ns * d + Ns + N * d + N * D.V + N;
  a.head_bwd = a.head_kept - N + N * d;
  return a;
}

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, int stage) {
  const auto& p = cfg.parallel;
  const bool gpu = cfg.runtime.device == "cuda";
  const bool bf16 = cfg.train.precision == "bf16";
  const double ab = bf16 ? 2 : 4;  // bytes per activation / compute-weight element
  const int z = p.zero_stage;
  const double Z = double(p.dp) * p.cp;  // ZeRO shards over dp x cp
  MemoryEstimate est;
  est.shape = stage_shape(cfg, stage);
  const StageShape& s = est.shape;
  const double P = double(s.params);
  const MicroDims D = micro_dims(cfg);
  const ActSizes A = act_sizes(cfg);

  // What exists for the whole step (lib/engine/engine.cpp init_masters):
  // the compute weights (none under ZeRO 3), and a separate fp32 master
  // (the shard from ZeRO 1) unless the compute weights are fp32 and
  // replicated; AdamW moments (the shard from ZeRO 1); the model's flat
  // gradient buffer (ZeRO 0/1: kept, reduced in place; ZeRO 2/3: the shard
  // kept, and during backward a pool of bucket staging buffers, or with
  // parallel.zero_full_grads the whole buffer, lib/parallel/grad_buckets.hpp).
  MemParts base;
  // ZeRO 3 keeps no compute copy: a layer's gather casts the master shard.
  const double compute_copy = z >= 3 ? 0 : ab * P;
  const double master = bf16 || z >= 3 ? 4 * P / (z >= 1 ? Z : 1) : 0;
  base.weights = compute_copy + master;
  base.optim = 8 * P / (z >= 1 ? Z : 1);
  base.grads = z >= 2 ? 4 * P / Z : 4 * P;
  if (gpu) base.workspace = 32.0 * (1 << 20);  // cuBLASLt workspace (kernels/cuda/gemm_lt.hpp)
  const bool staged = z >= 2 && !p.zero_full_grads && p.num_model_chunks == 1;
  double step_grads = z >= 2 ? 4 * P : 0;
  double head_bucket = 0;  // staged: the head's staging, taken in its forward
  // With grad_reduce_dtype=bf16 a bucket is cast to a bf16 wire buffer (and
  // a received part under ZeRO 2/3) from its launch to the end of the
  // reduction (lib/parallel/grad_buckets.cpp).
  const bool bucket_copies = p.grad_reduce_dtype == "bf16";

  // ZeRO 3: the layer in use plus the one being prefetched (its gather buffers).
  double layer_max = 0;
  const std::vector<StageParam> ps = stage_params(cfg, s);
  {
    std::map<int, double> per_layer;
    for (const StageParam& q : ps) per_layer[q.layer] += q.n;
    for (auto& [l, n] : per_layer) layer_max = std::max(layer_max, n);
  }
  // ZeRO 3 gathers a layer into the model's own weight storage: the layer in
  // use and the one prefetched, whose gather lands in a staging buffer first
  // (lib/parallel/zero3.cpp).
  const double gathered = z >= 3 ? 3 * ab * layer_max : 0;
  const double prefetch = 0;

  // Buckets (ZeRO 2/3: each flat buffer exists from its launch to the end of
  // the reduction).
  const std::vector<GradBucket> bks = grad_buckets(cfg, ps);
  if (staged) {
    // Staged buckets never span layers (the engine splits them as under
    // ZeRO 3), and the pool holds parallel.grad_staging_layers layers'
    // worth of them; the head's are taken in its forward.
    double head = 0;
    for (const StageParam& q : ps)
      if (q.layer == cfg.model.n_layers) head += q.n;
    head_bucket = 4 * head;
    step_grads = 4 * p.grad_staging_layers * layer_max;
  }
  // Gradient staging at each moment (staged): none in the first forward
  // but the head's (its backward runs in its forward), the whole pool in
  // backward and, left in flight by the previous backward, in later forwards.
  double staging = step_grads;
  std::vector<char> ready(ps.size(), 0);
  size_t launched = 0;
  double flats = 0;
  auto mark_ready = [&](int layer, int chunk) {
    for (size_t i = 0; i < ps.size(); ++i)
      if (ps[i].layer == layer && ps[i].chunk == chunk) ready[i] = 1;
    while (launched < bks.size() && ready[size_t(bks[launched].first)]) {
      // Launched in bucket order once every member (the earliest last) is ready.
      bool all = true;
      for (int i = bks[launched].first; i < int(ps.size()) && all; ++i) all = ready[size_t(i)];
      if (!all) break;
      if (bucket_copies) flats += 2 * bks[launched].n * (z >= 2 ? 1.0 + 1.0 / Z : 1.0);
      ++launched;
    }
  };

  // Walk the schedule. Units in flight keep their saved activations.
  const int M = cfg.train.grad_accum, v = p.num_model_chunks;
  auto chunk_layers = [&](int c) {
    return double(s.chunks[size_t(c)].second - s.chunks[size_t(c)].first);
  };
  auto has_head = [&](int c) { return s.last && c == v - 1; };
  auto saved = [&](int c) {
    return chunk_layers(c) * A.block_saved + (has_head(c) ? A.head_kept : 0);
  };
  std::map<std::pair<int, int>, double> held;  // (micro, chunk) -> saved elements
  double held_sum = 0;
  const double bound = double(D.Ns * D.d);  // one pipeline boundary tensor
  // Pipeline sends are kept to the step's end (lib/engine/engine_pipeline.cpp),
  // and the tensor received for a forward or a backward is alive while it runs.
  double sends = 0;
  double best = -1, act_best = 0;
  MemParts at_best;
  double untracked_best = 0;
  auto moment = [&](double act_el, double received, const char* what) {
    act_best = std::max(act_best, act_el * ab);
    MemParts m = base;
    m.activations = act_el * ab;
    m.grads += staging;
    m.weights += gathered;
    m.buffers += flats + prefetch + (sends + received) * ab;
    if (m.total() > best) {
      best = m.total();
      at_best = m;
      est.peak_at = what;
      untracked_best = gpu ? base.workspace : 0;  // library workspaces are not tracked
    }
  };
  for (const PipeStep& op : pipeline_ops(p.pp, v, M, stage)) {
    const auto key = std::make_pair(op.micro, op.chunk);
    const double nl = chunk_layers(op.chunk);
    const bool first_vs = s.first && op.chunk == 0, last_vs = has_head(op.chunk);
    if (staged) staging = op.micro > 0 ? step_grads : 0;
    if (op.forward) {
      const double before = held_sum + std::max(0.0, nl - 1) * A.block_saved;
      moment(before + A.block_full + A.fwd_extra, (p.pp > 1 && !first_vs) ? bound : 0,
             "forward of a block");
      if (staged) staging += head_bucket;
      if (last_vs) moment(held_sum + nl * A.block_saved + A.head_kept, 0, "head forward");
      held[key] = saved(op.chunk);
      held_sum += held[key];
      if (p.pp > 1 && !last_vs) sends += bound;
    } else {
      held_sum -= held[key];
      held.erase(key);
      const bool collect = op.micro == M - 1;
      if (last_vs) {
        if (staged) staging += head_bucket;
        moment(held_sum + nl * A.block_saved + A.head_bwd, 0, "head backward");
        if (collect) mark_ready(cfg.model.n_layers, op.chunk);
      }
      if (staged) staging = step_grads;
      const auto [l0, l1] = s.chunks[size_t(op.chunk)];
      for (int l = l1 - 1; l >= l0; --l) {
        moment(held_sum + double(l - l0) * A.block_saved + A.block_full + A.bwd_extra,
               (p.pp > 1 && !last_vs) ? bound : 0, "backward of a block");
        if (collect) mark_ready(l, op.chunk);
      }
      if (first_vs && collect) mark_ready(-1, op.chunk);
      if (p.pp > 1 && !first_vs) sends += bound;
    }
  }
  // The end of the gradient reduction: every bucket buffer (ZeRO 2/3), the
  // last backward's output gradient.
  staging = step_grads;
  moment(double(D.Ns * D.d), 0, "end of gradient reduction");
  est.peak = at_best;
  est.activations_max = act_best;
  est.untracked = untracked_best;
  return est;
}

MemoryEstimate estimate_memory_worst(const Config& cfg) {
  MemoryEstimate worst;
  for (int s = 0; s < cfg.parallel.pp; ++s) {
    MemoryEstimate e = estimate_memory(cfg, s);
    if (s == 0 || e.peak.total() > worst.peak.total()) worst = std::move(e);
  }
  return worst;
}

}  // namespace st::plan
