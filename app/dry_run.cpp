// --dry-run: the resolved config, the mesh (every rank's pp/dp/cp/tp
// coordinates and pipeline layer range) and each rank's peak memory under the
// chosen layout. The estimate is lib/plan's memory model, the same code
// scaletrain-plan ranks layouts with (docs/planner.md): parameters,
// gradients and AdamW state by ZeRO stage, activations of the micro-batches a
// pipeline stage keeps in flight, and the communication buffers.
#include <cstdio>

#include "core/util.hpp"
#include "metrics/metrics.hpp"
#include "parallel/mesh.hpp"
#include "plan/memory.hpp"
#include "trainer.hpp"

namespace st {

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
  std::printf(
      "# mesh and peak memory per rank (estimate; act_ckpt=%s, micro_batch %d, grad_accum %d; "
      "total includes buffers and workspace)\n",
      cfg.train.act_ckpt.c_str(), cfg.train.micro_batch, cfg.train.grad_accum);
  std::printf("%5s %3s %3s %3s %3s  %-16s %10s %10s %10s %10s %10s %10s %10s  %s\n", "rank", "pp",
              "dp", "cp", "tp", "layers", "params", "grads", "optim", "activ", "total", "buffers",
              "workspace", "peak at");
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  std::vector<plan::MemoryEstimate> stages;
  for (int st = 0; st < p.pp; ++st) stages.push_back(plan::estimate_memory(cfg, st));
  for (int r = 0; r < rt.world_size(); ++r) {
    const MeshCoords c = mesh_coords(r, d);
    const plan::MemoryEstimate& e = stages[size_t(c.pp)];
    std::string layers;
    for (auto& [a, b] : e.shape.chunks)
      layers += (layers.empty() ? "" : ",") + std::to_string(a) + "-" + std::to_string(b - 1);
    const plan::MemParts& m = e.peak;
    std::printf("%5d %3d %3d %3d %3d  %-16s %10s %10s %10s %10s %10s %10s %10s  %s\n", r, c.pp,
                c.dp, c.cp, c.tp, layers.c_str(), human_bytes(m.weights).c_str(),
                human_bytes(m.grads).c_str(), human_bytes(m.optim).c_str(),
                human_bytes(m.activations).c_str(), human_bytes(m.total()).c_str(),
                human_bytes(m.buffers).c_str(), human_bytes(m.workspace).c_str(),
                e.peak_at.c_str());
  }
}
}  // namespace st
