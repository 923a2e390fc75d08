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
  // sum [N, d] (and under sp its reduce-scattered rows); under sp the norm
  // output [Ns, d] that was all-gathered stays alive to the block's end.
  a.fwd_extra = Ns * d + (tp > 1 ? N * d + (sp ? Ns * d : 0) : 0) + (sp ? Ns * d : 0);
  a.bwd_extra = Ns * d + (sp ? N * d : 0);
  a.head_kept = Ns * d + Ns + N * d + N * D.V + N;
  a.head_bwd = a.head_kept - N + N * d;
  return a;
}

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, int stage) {
  const auto& p = cfg.parallel;
  const bool gpu = cfg.runtime.device == "cuda";
  const double ab = gpu ? 2 : 4;  // bytes per activation element
  const int z = p.zero_stage;
  const double Z = double(p.dp) * p.cp;  // ZeRO shards over dp x cp
  MemoryEstimate est;
  est.shape = stage_shape(cfg, stage);
  const StageShape& s = est.shape;
  const double P = double(s.params);
  const MicroDims D = micro_dims(cfg);
  const ActSizes A = act_sizes(cfg);

  // What exists for the whole step.
  MemParts base;
  if (gpu) {
    base.weights = (z >= 3 ? 2 * P / Z : 2 * P) + (z == 0 ? 4 * P : 0);
    base.optim = z >= 1 ? 12 * P / Z : 8 * P;
  } else {
    base.weights = z >= 3 ? 4 * P / Z : 4 * P;
    base.optim = z >= 1 ? 8 * P / Z : 8 * P;
  }
  // CPU engine: ZeRO 0/1 keep the full gradients and every bucket's flat
  // buffer; ZeRO 2/3 keep the shard, allocate the full gradients per step
  // and a bucket's buffer from its launch to the end of the reduction.
  // GPU (the CUDA engine's flat gradient buffer, reduced in place): the full
  // fp32 buffer at every stage (it accumulates the micro-batches), no bucket
  // copies, a bf16 staging copy with grad_reduce_dtype=bf16.
  base.grads = !gpu && z >= 2 ? 4 * P / Z : 4 * P;
  if (gpu)
    base.buffers = p.grad_reduce_dtype == "bf16" ? 2 * P : 0;
  else
    base.buffers = z >= 2 ? 0 : 4 * P;
  if (gpu) base.workspace = 32.0 * (1 << 20);  // cuBLASLt workspace (kernels/cuda/gemm_lt.hpp)
  const double step_grads = !gpu && z >= 2 ? 4 * P : 0;
  const bool bucket_copies = !gpu && z >= 2;

  // ZeRO 3: the layer in use plus the one being prefetched (its gather buffers).
  double layer_max = 0;
  const std::vector<StageParam> ps = stage_params(cfg, s);
  {
    std::map<int, double> per_layer;
    for (const StageParam& q : ps) per_layer[q.layer] += q.n;
    for (auto& [l, n] : per_layer) layer_max = std::max(layer_max, n);
  }
  const double gathered = z >= 3 ? (gpu ? 2 : 4) * layer_max : 0;
  const double prefetch = z >= 3 ? (gpu ? 2 : 4) * layer_max : 0;

  // Buckets (ZeRO 2/3: each flat buffer exists from its launch to the end of
  // the reduction).
  const std::vector<GradBucket> bks = grad_buckets(cfg, ps);
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
      if (bucket_copies) flats += 4 * bks[launched].n;
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
  const double ring = p.cp > 1 ? 8.0 * D.N * D.kd : 0;  // ring attention's K/V (+dK/dV) messages
  const double bound = double(D.Ns * D.d);              // one pipeline boundary tensor
  double sends = 0;                                     // pipeline sends kept to the step's end
  double best = -1, act_best = 0;
  MemParts at_best;
  double untracked_best = 0;
  auto moment = [&](double act_el, double extra_untracked, const char* what) {
    act_best = std::max(act_best, act_el * ab);
    MemParts m = base;
    m.activations = act_el * ab;
    m.grads += step_grads;
    m.weights += gathered;
    m.buffers += flats + prefetch + (sends + extra_untracked) * 4;
    if (m.total() > best) {
      best = m.total();
      at_best = m;
      est.peak_at = what;
      untracked_best = (sends + extra_untracked) * 4 + (gpu ? base.workspace : 0);
    }
  };
  for (const PipeStep& op : pipeline_ops(p.pp, v, M, stage)) {
    const auto key = std::make_pair(op.micro, op.chunk);
    const double nl = chunk_layers(op.chunk);
    const bool first_vs = s.first && op.chunk == 0, last_vs = has_head(op.chunk);
    if (op.forward) {
      const double before = held_sum + std::max(0.0, nl - 1) * A.block_saved;
      moment(before + A.block_full + A.fwd_extra, (p.pp > 1 && !first_vs) ? bound : 0,
             "forward of a block");
      if (last_vs) moment(held_sum + nl * A.block_saved + A.head_kept, 0, "head forward");
      held[key] = saved(op.chunk);
      held_sum += held[key];
      if (p.pp > 1 && !last_vs && !gpu) sends += bound;
    } else {
      held_sum -= held[key];
      held.erase(key);
      const bool collect = op.micro == M - 1;
      if (last_vs) {
        moment(held_sum + nl * A.block_saved + A.head_bwd, 0, "head backward");
        if (collect) mark_ready(cfg.model.n_layers, op.chunk);
      }
      const auto [l0, l1] = s.chunks[size_t(op.chunk)];
      for (int l = l1 - 1; l >= l0; --l) {
        moment(held_sum + double(l - l0) * A.block_saved + A.block_full + A.bwd_extra,
               ring + ((p.pp > 1 && !last_vs) ? bound : 0), "backward of a block");
        if (collect) mark_ready(l, op.chunk);
      }
      if (first_vs && collect) mark_ready(-1, op.chunk);
      if (p.pp > 1 && !first_vs && !gpu) sends += bound;
    }
  }
  // The end of the gradient reduction: every bucket buffer (ZeRO 2/3), the
  // last backward's output gradient.
  moment(double(D.Ns * D.d), 0, "end of gradient reduction");
  // ZeRO 1/2 after the update: this rank's shard packed for the all-gather
  // (and, ZeRO 2, one bucket's buffer at a time); no activations, and under
  // ZeRO 2 the full gradients are already freed.
  if (z == 1 || z == 2) {
    double max_bucket = 0;
    for (const GradBucket& b : bks) max_bucket = std::max(max_bucket, b.n);
    MemParts m = base;
    m.buffers += 4 * P / Z + (z == 2 ? 4 * max_bucket : 0);
    if (m.total() > best) {
      best = m.total();
      at_best = m;
      est.peak_at = "parameter all-gather after the update";
      untracked_best = gpu ? base.workspace : 0;
    }
  }
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
