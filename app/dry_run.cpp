// --dry-run: the resolved config, the mesh (every rank's pp/dp/cp/tp
// coordinates and pipeline layer range) and an estimate of each rank's memory
// under the chosen layout: parameters, gradients and AdamW state by ZeRO
// stage, and activations of the micro-batches a pipeline stage keeps in
// flight. The arithmetic is documented in docs/parallelism.md.
#include <algorithm>
#include <cstdio>

#include "core/util.hpp"
#include "metrics/metrics.hpp"
#include "model/model.hpp"
#include "parallel/mesh.hpp"
#include "trainer.hpp"

namespace st {

namespace {
// Activation floats per token of one block, split into the part that stays
// whole under tp (residual stream and norm inputs: divided by tp only under
// sp) and the part tensor parallelism splits (q/k/v, attention output,
// SwiGLU internals, attention statistics).
struct PerTok {
  double resid, split;
};
PerTok per_token(const ModelCfg& m, const std::string& act_ckpt) {
  const double d = m.d_model, hd = double(m.d_model) / m.n_heads;
  const double qkv = (m.n_heads + 2.0 * m.n_kv_heads) * hd;
  if (act_ckpt == "full") return {d, 0};  // block input only
  PerTok p{4 * d, qkv + d + 3.0 * m.ffn_hidden + m.n_heads};
  if (act_ckpt == "selective") p.split -= qkv + m.n_heads;
  return p;
}
}  // namespace

double estimate_activation_bytes(const ModelCfg& m, int micro_batch, const std::string& act_ckpt) {
  const PerTok p = per_token(m, act_ckpt);
  const double BT = double(micro_batch) * m.seq_len;
  return (p.resid + p.split) * m.n_layers * BT * 4.0 +
         BT * (2.0 * m.d_model + 2.0 * m.vocab_size) * 4.0;  // final norm, logits + grad
}

LayoutMemory estimate_layout_memory(const Config& cfg, int rank) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  MeshDims d{p.pp, p.dp, p.cp, p.tp};
  MeshCoords c = mesh_coords(rank, d);
  LayoutMemory r;
  r.layers = stage_layers(m.n_layers, p.pp, p.num_model_chunks, c.pp);
  int nl = 0;
  for (auto& [a, b] : r.layers) nl += b - a;
  const double dm = m.d_model, hd = dm / m.n_heads, tp = p.tp;
  const double per_layer =
      2 * dm + (2 * dm * dm + 2 * dm * m.n_kv_heads * hd) / tp + 3 * dm * m.ffn_hidden / tp;
  double n = per_layer * nl;
  if (c.pp == 0) n += double(m.vocab_size) * dm / tp;
  if (c.pp == p.pp - 1) n += double(m.vocab_size) * dm / tp + dm;
  const double z = double(p.dp) * p.cp;  // ZeRO shards over dp x cp
  // Weights (lib/engine): with fp32 compute the compute weights are the
  // master weights (ZeRO 3 keeps only the shard); with bf16 compute a bf16
  // copy (the shard under ZeRO 3) plus the fp32 master (the shard under ZeRO
  // >= 1). Activations are in the compute precision; gradients and moments
  // stay fp32.
  const bool bf16 = cfg.train.precision == "bf16";
  const double ab = bf16 ? 2 : 4;
  const double compute_copy = (bf16 ? 2 : 4) * n / (p.zero_stage >= 3 ? z : 1);
  const double master = bf16 || p.zero_stage >= 3 ? 4 * n / (p.zero_stage >= 1 ? z : 1) : 0;
  r.params = compute_copy + (p.zero_stage >= 3 && !bf16 ? 0 : master);
  r.grads = 4 * n / (p.zero_stage >= 2 ? z : 1);
  r.optim = 8 * n / (p.zero_stage >= 1 ? z : 1);
  // Activations: tokens of one micro-batch on this rank, times the
  // micro-batches the schedule keeps (1F1B: pp - stage; interleaved: Megatron's
  // warm-up count in chunk units).
  const PerTok pt = per_token(m, cfg.train.act_ckpt);
  const double toks = double(cfg.train.micro_batch) * m.seq_len / p.cp;
  const double per_micro_layer = toks * (pt.resid / (p.sp ? tp : 1) + pt.split / tp) * ab;
  const int M = cfg.train.grad_accum, v = p.num_model_chunks;
  double in_flight;  // in units of "one micro-batch through all this stage's layers"
  if (p.pp == 1)
    in_flight = 1;
  else if (v == 1)
    in_flight = std::min(M, p.pp - c.pp);
  else
    in_flight = double(std::min(M * v, (p.pp - c.pp - 1) * 2 + (v - 1) * p.pp + 1)) / v;
  r.activations = per_micro_layer * nl * in_flight;
  if (c.pp == p.pp - 1) r.activations += toks * (2.0 * dm + 2.0 * m.vocab_size / tp) * ab;
  return r;
}

void print_dry_run(const Runtime& rt, const Config& cfg) {
  if (rt.rank() != 0) return;
  const auto& p = cfg.parallel;
  const metrics::ModelShape s = model_shape(cfg);
  const int64_t gb = global_batch(cfg);
  const double flops_step = metrics::mpt_model_flops_per_seq(s) * double(gb);
  const double hw_step =
      metrics::mpt_hw_flops_per_seq(s, cfg.train.act_ckpt != "none") * double(gb);
  std::printf("# resolved config\n%s\n", config_to_yaml(cfg).c_str());
  std::printf(
      "# layout\nworld %d = pp %d x dp %d x cp %d x tp %d (tp innermost), sp %s, zero %d, "
      "%d model chunk(s), bucket %.4g MiB\n",
      rt.world_size(), p.pp, p.dp, p.cp, p.tp, p.sp ? "on" : "off", p.zero_stage,
      p.num_model_chunks, p.dp_bucket_mb);
  std::printf("# model\nparameters        %ld (%.2f M)\n", long(s.n_params), s.n_params / 1e6);
  std::printf("global batch      %ld sequences x %d tokens = %ld tokens\n", long(gb),
              cfg.model.seq_len, long(gb * cfg.model.seq_len));
  std::printf("FLOPs per step    %.4g model (MPT 3x fwd), %.4g hardware\n", flops_step, hw_step);
  std::printf("# mesh and memory per rank (estimate; act_ckpt=%s, micro_batch %d, grad_accum %d)\n",
              cfg.train.act_ckpt.c_str(), cfg.train.micro_batch, cfg.train.grad_accum);
  std::printf("%5s %3s %3s %3s %3s  %-16s %10s %10s %10s %10s %10s\n", "rank", "pp", "dp", "cp",
              "tp", "layers", "params", "grads", "optim", "activ", "total");
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  for (int r = 0; r < rt.world_size(); ++r) {
    const MeshCoords c = mesh_coords(r, d);
    const LayoutMemory lm = estimate_layout_memory(cfg, r);
    std::string layers;
    for (auto& [a, b] : lm.layers)
      layers += (layers.empty() ? "" : ",") + std::to_string(a) + "-" + std::to_string(b - 1);
    std::printf("%5d %3d %3d %3d %3d  %-16s %10s %10s %10s %10s %10s\n", r, c.pp, c.dp, c.cp, c.tp,
                layers.c_str(), human_bytes(lm.params).c_str(), human_bytes(lm.grads).c_str(),
                human_bytes(lm.optim).c_str(), human_bytes(lm.activations).c_str(),
                human_bytes(lm.total()).c_str());
  }
}
}  // namespace st
