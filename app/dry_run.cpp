// --dry-run: the resolved config, the mesh (every rank's pp/dp/cp/tp
// coordinates and pipeline layer range) and each rank's peak memory under the
// chosen layout. The first rank of every pipeline stage runs one step of the
// trainer's own Engine on the recording backend (lib/plan's recorded step,
// the same record scaletrain-plan ranks layouts with; docs/planner.md): the
// bytes its device would hold by category at the step's peak and where the
// peak fell (the other ranks of a stage hold the same shapes), then its
// kernel calls and collectives. The world is the layout's (dp*tp*pp*cp),
// which `--world N` sets without launching N ranks.
#include <cstdio>
#include <map>

#include "convert/hf_llama.hpp"
#include "core/util.hpp"
#include "metrics/metrics.hpp"
#include "parallel/mesh.hpp"
#include "parallel/stages.hpp"
#include "plan/memory.hpp"
#include "plan/recorded_step.hpp"
#include "trainer.hpp"

namespace st {
namespace {

// The calls of the recorded step of each stage's first rank.
void print_recorded(const Config& cfg) {
  const auto& p = cfg.parallel;
  std::vector<record::RankStep> steps;
  for (int s = 0; s < p.pp; ++s) steps.push_back(plan::stage_record(cfg, s)->step);
  std::printf("# recorded calls per step (the first rank of each stage%s)\n",
              cfg.train.grad_accum > plan::recorded_micro(cfg) ? ", fewer micro-batches" : "");
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
  const int world = p.dp * p.tp * p.pp * p.cp;  // resolve_layout made it the planned world
  const metrics::ModelShape s = model_shape(cfg);
  const int64_t gb = global_batch(cfg);
  const double flops_step = metrics::mpt_model_flops_per_seq(s) * double(gb);
  const double hw_step = metrics::mpt_hw_flops_per_seq(s, cfg.train.act_ckpt) * double(gb);
  std::printf("# resolved config\n%s\n", config_to_yaml(cfg).c_str());
  std::printf(
      "# layout\nworld %d = pp %d x dp %d x cp %d x tp %d (tp innermost), sp %s, zero %d, "
      "%d model chunk(s), bucket %.4g MiB\n",
      world, p.pp, p.dp, p.cp, p.tp, p.sp ? "on" : "off", p.zero_stage, p.num_model_chunks,
      p.dp_bucket_mb);
  std::printf("# model\nparameters        %ld (%.2f M)\n", long(s.n_params), s.n_params / 1e6);
  std::printf("global batch      %ld sequences x %d tokens = %ld tokens\n", long(gb),
              cfg.model.seq_len, long(gb * cfg.model.seq_len));
  std::printf("FLOPs per step    %.4g model (MPT 3x fwd), %.4g hardware\n", flops_step, hw_step);
  // What scaletrain-convert export writes for this shape (docs/convert.md).
  const uint64_t shard = 5'000'000'000ull;  // its default --shard-mb 5000
  const uint64_t hf16 = hf::export_bytes(cfg.model, "BF16", shard),
                 hf32 = hf::export_bytes(cfg.model, "F32", shard);
  std::printf(
      "HF export         %s bf16 (%llu bytes, %zu file(s)), %s fp32 (%llu bytes, %zu "
      "file(s)): safetensors headers + parameters + index + config.json, 5 GB shards\n",
      human_bytes(double(hf16)).c_str(), (unsigned long long)hf16,
      hf::plan_shards(cfg.model, "BF16", shard).size(), human_bytes(double(hf32)).c_str(),
      (unsigned long long)hf32, hf::plan_shards(cfg.model, "F32", shard).size());
  // And its time: the CPU measured per parameter, and the bytes it reads
  // (the checkpoint verified, then its masters) and writes at 1 GB/s, a
  // rate to scale by the storage's own (docs/convert.md).
  const hf::ExportCost c16 = hf::export_cost(cfg.model, "BF16", shard),
                       c32 = hf::export_cost(cfg.model, "F32", shard);
  std::printf(
      "HF export time    bf16 %.3g s, fp32 %.3g s at 1 GB/s of storage: CPU %.3g / %.3g s "
      "(measured per parameter) + %s read and %s / %s written\n",
      c16.seconds(1e9), c32.seconds(1e9), c16.cpu_s, c32.cpu_s,
      human_bytes(double(c16.read_bytes)).c_str(), human_bytes(double(c16.write_bytes)).c_str(),
      human_bytes(double(c32.write_bytes)).c_str());
  std::printf(
      "# mesh and peak memory per rank (recorded, the first rank of each stage; act_ckpt=%s, "
      "micro_batch %d, grad_accum %d; total includes buffers and workspace)\n",
      cfg.train.act_ckpt.c_str(), cfg.train.micro_batch, cfg.train.grad_accum);
  std::printf("%5s %3s %3s %3s %3s  %-16s %10s %10s %10s %10s %10s %10s %10s  %s\n", "rank", "pp",
              "dp", "cp", "tp", "layers", "params", "grads", "optim", "activ", "total", "buffers",
              "workspace", "peak at");
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  std::vector<plan::MemoryEstimate> stages;
  for (int st = 0; st < p.pp; ++st) stages.push_back(plan::estimate_memory(cfg, st));
  for (int r = 0; r < world; ++r) {
    const MeshCoords c = mesh_coords(r, d);
    const plan::MemoryEstimate& e = stages[size_t(c.pp)];
    std::string layers;
    for (auto& [a, b] : stage_layers(cfg, c.pp))
      layers += (layers.empty() ? "" : ",") + std::to_string(a) + "-" + std::to_string(b - 1);
    const plan::MemParts& m = e.peak;
    std::printf("%5d %3d %3d %3d %3d  %-16s %10s %10s %10s %10s %10s %10s %10s  %s\n", r, c.pp,
                c.dp, c.cp, c.tp, layers.c_str(), human_bytes(m.weights).c_str(),
                human_bytes(m.grads).c_str(), human_bytes(m.optim).c_str(),
                human_bytes(m.activations).c_str(), human_bytes(m.total()).c_str(),
                human_bytes(m.buffers).c_str(), human_bytes(m.workspace).c_str(),
                e.peak_at.c_str());
  }
  print_recorded(cfg);
}
}  // namespace st
