// --dry-run: the resolved config, the mesh (every rank's pp/dp/cp/tp
// coordinates and pipeline layer range) and each rank's peak memory under the
// chosen layout. The estimate is lib/plan's memory model, the same code
// scaletrain-plan ranks layouts with (docs/planner.md): parameters,
// gradients and AdamW state by ZeRO stage, activations of the micro-batches a
// pipeline stage keeps in flight, and the communication buffers. Beside it,
// one rank of every pipeline stage runs one step of the trainer's own Engine
// on the recording backend (lib/record): the bytes its device would hold by
// category, the step's peak and where it fell, its kernel calls and
// collectives.
#include <cstdio>
#include <map>

#include "core/util.hpp"
#include "metrics/metrics.hpp"
#include "parallel/mesh.hpp"
#include "plan/memory.hpp"
#include "record/step.hpp"
#include "trainer.hpp"

namespace st {
namespace {

// The recorded step of the first rank (dp, cp, tp = 0) of every stage.
void print_recorded(const Config& cfg, const std::vector<plan::MemoryEstimate>& model) {
  const auto& p = cfg.parallel;
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  std::printf(
      "# recorded step (the trainer's engine on the recording backend, the first rank of each "
      "stage: each category's peak and the total's during step 1; model: the estimate above, "
      "tracked part)\n");
  std::printf("%5s %3s %10s %10s %10s %10s %10s %10s %10s %10s  %s\n", "rank", "pp", "params",
              "grads", "optim", "activ", "comm", "other", "peak", "model", "peak at");
  std::vector<record::RankStep> steps;
  for (int s = 0; s < p.pp; ++s) {
    const int r = mesh_rank(MeshCoords{s, 0, 0, 0}, d);
    steps.push_back(record::record_step(cfg, r));
    const record::RankStep& x = steps.back();
    const MemoryStats& m = x.step;
    const std::string at = x.peak.phase + ", after " + std::to_string(x.peak.kernel_index) +
                           " kernels (" + (x.peak.last_kernel.empty() ? "-" : x.peak.last_kernel) +
                           "), allocating " + human_bytes(double(x.peak.bytes)) + " of " +
                           memcat_name(x.peak.cat);
    std::printf("%5d %3d %10s %10s %10s %10s %10s %10s %10s %10s  %s\n", r, s,
                human_bytes(double(m.pk(MemCat::Params))).c_str(),
                human_bytes(double(m.pk(MemCat::Grads))).c_str(),
                human_bytes(double(m.pk(MemCat::Optim))).c_str(),
                human_bytes(double(m.pk(MemCat::Activations))).c_str(),
                human_bytes(double(m.pk(MemCat::Comm))).c_str(),
                human_bytes(double(m.pk(MemCat::Workspace) + m.pk(MemCat::Other))).c_str(),
                human_bytes(double(m.peak_total)).c_str(),
                human_bytes(model[size_t(s)].tracked()).c_str(), at.c_str());
  }
  std::printf("# recorded calls per step (same ranks)\n");
  for (const record::RankStep& x : steps) {
    double gemm = 0;
    std::map<std::string, int> ops;
    for (const auto& k : x.kernels) {
      ops[k.op] += 1;
      if (k.op == "gemm") gemm += 2.0 * double(k.dims[0]) * double(k.dims[1]) * double(k.dims[2]);
    }
    std::map<std::string, std::pair<int, double>> colls;  // "group kind stream" -> calls, bytes
    for (const auto& c : x.collectives) {
      auto& e = colls[c.group + " " + coll_name(c.kind) + (c.stream == "host" ? " (host)" : "")];
      e.first += 1;
      e.second += double(c.bytes);
    }
    std::printf("rank %d: %zu kernels, GEMM %.4g FLOP;", x.rank, x.kernels.size(), gemm);
    for (auto& [op, n] : ops) std::printf(" %s %d", op.c_str(), n);
    std::printf("\nrank %d: %zu collectives;", x.rank, x.collectives.size());
    for (auto& [k, v] : colls)
      std::printf(" %s %d (%s)", k.c_str(), v.first, human_bytes(v.second).c_str());
    std::printf("\n");
  }
}

}  // namespace

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
  print_recorded(cfg, stages);
}
}  // namespace st
