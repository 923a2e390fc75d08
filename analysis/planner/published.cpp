// Implementation of published.hpp.
#include "planner/published.hpp"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/error.hpp"
#include "plan/cluster.hpp"
#include "planner/csv.hpp"

namespace st::plan {
namespace {

// The cluster a row's GPU runs on. torchtitan's H100 tables ran on Meta's
// Grand Teton hosts: H100 with 96 GB HBM2e at 2.4 TB/s and a 500 W limit
// (the table's own hardware notes); the H100 SXM file's rates (700 W) stand
// in for its compute, with its memory and bandwidth replaced.
Cluster cluster_for(const std::string& gpu, const std::string& dir, const std::string& where,
                    const std::string& profile) {
  if (gpu == "h200") return fitted_pricing(load_cluster(dir + "/h200-141gb.yaml"), profile);
  if (gpu == "h100_96gb_500w") {
    Cluster c = fitted_pricing(load_cluster(dir + "/h100-sxm-80gb.yaml"), profile);
    c.name = "h100-hbm2e-96gb-500w";
    c.memory_bytes = 96e9;  // 96 GB as published; what the device reports is not
    c.memory_bandwidth = 2.4e12;
    return c;
  }
  throw UsageError(where + ": column 'gpu': '" + gpu + "' is not one of h100_96gb_500w|h200");
}

// torchtitan 9dec370's default pipeline split (generate_split_points in
// torchtitan/parallelisms/pipelining_utils.py; the 405B rows give no split
// points): `stages` parts of n_layers / stages layers, the remainder one
// each to the middle stages in order, the last part what is left. Llama 3.1
// 405B over pp 8: 15,16*6,15 (1F1B), 7,8*14,7 (interleaved, 2 per rank).
std::string torchtitan_split(int n_layers, int stages) {
  const int base = n_layers / stages;
  int extra = n_layers % stages, used = 0;
  std::string s;
  for (int i = 0; i < stages; ++i) {
    int n = base;
    if (i == stages - 1)
      n = n_layers - used;
    else if (i > 0 && extra > 0)
      ++n, --extra;
    used += n;
    s += (i ? "," : "") + std::to_string(n);
  }
  return s;
}

}  // namespace

std::vector<PublishedRow> read_published(const std::string& table_csv,
                                         const std::string& models_csv) {
  const Csv m = load_csv(models_csv);
  std::map<std::string, ModelCfg> models;
  for (size_t i = 0; i < m.rows.size(); ++i) {
    ModelCfg mc;
    mc.name = m.at(i, "model");
    mc.n_layers = int(m.num(i, "n_layers"));
    mc.d_model = int(m.num(i, "d_model"));
    mc.n_heads = int(m.num(i, "n_heads"));
    mc.n_kv_heads = int(m.num(i, "n_kv_heads"));
    mc.ffn_hidden = int(m.num(i, "ffn_hidden"));
    mc.vocab_size = int(m.num(i, "vocab_size"));
    mc.rope_theta = m.num(i, "rope_theta");
    models[mc.name] = mc;
  }
  const Csv t = load_csv(table_csv);
  std::vector<PublishedRow> out;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    PublishedRow r;
    r.line = t.rows[i].first;
    const std::string where = table_csv + ":" + std::to_string(r.line);
    r.table = t.at(i, "table");
    r.gpu = t.at(i, "gpu");
    r.model = t.at(i, "model");
    r.gpus = int(t.num(i, "gpus"));
    r.fsdp = int(t.num(i, "fsdp"));
    r.tp = int(t.num(i, "tp"));
    r.pp = int(t.num(i, "pp"));
    r.cp = int(t.num(i, "cp"));
    r.pp_schedule = t.at(i, "pp_schedule");
    r.seq_len = int(t.num(i, "seq_len"));
    r.local_batch = int(t.num(i, "local_batch"));
    r.global_batch = int(t.num(i, "global_batch"));
    r.micro_batches = int(t.num(i, "micro_batches"));
    r.act_ckpt = t.at(i, "act_ckpt");
    r.precision = t.at(i, "precision");
    r.compile = t.num(i, "compile") != 0;
    r.async_tp = t.num(i, "async_tp") != 0;
    r.tps_gpu = t.num(i, "tps_gpu");
    r.memory_gib = t.num(i, "memory_gib");
    if (r.fsdp * r.tp * r.pp * r.cp != r.gpus)
      throw UsageError(where +
                       ": fsdp x tp x pp x cp = " + std::to_string(r.fsdp * r.tp * r.pp * r.cp) +
                       ", not gpus " + std::to_string(r.gpus));
    if (r.local_batch % r.micro_batches != 0)
      throw UsageError(where + ": local_batch " + std::to_string(r.local_batch) +
                       " is not a multiple of micro_batches " + std::to_string(r.micro_batches));
    auto it = models.find(r.model);
    if (it == models.end())
      throw UsageError(where + ": model '" + r.model + "' is not in " + models_csv);
    Config& c = r.cfg;
    c.model = it->second;
    c.model.seq_len = r.seq_len;
    c.train.precision = "bf16";
    c.runtime.device = "cuda";
    if (r.pp > 1) {
      c.parallel.pipeline_layers =
          torchtitan_split(c.model.n_layers, r.pp * (r.pp_schedule == "interleaved_1f1b" ? 2 : 1));
      // Under PP torchtitan's FSDP keeps the gathered parameters for the step
      // (parallelize_llama.py: reshard_after_forward=False) and the pipeline
      // stage reduces gradients on the last backward only (torch's
      // PipelineStage.backward_maybe_with_nosync): ZeRO 2 with full gradients.
      c.parallel.zero_full_grads = true;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<PublishedResult> predict_published(const std::vector<PublishedRow>& rows,
                                               const std::string& clusters_dir,
                                               const std::string& profile) {
  std::vector<PublishedResult> out;
  for (const PublishedRow& r : rows) {
    const Cluster cl = cluster_for(r.gpu, clusters_dir, "row " + std::to_string(r.line), profile);
    // torchtitan's FSDP2 is ZeRO 3 over the fsdp ranks with one unit per
    // block (one bucket each), fp32 gradient reduction (ZeRO 2 with full
    // gradients under PP, split as torchtitan did); its TP is Megatron
    // TP with sequence parallelism; its pipeline splits the local batch into
    // micro_batches, interleaved with two stages per rank.
    KnobRanges k;
    k.devices = {r.gpus};
    k.dp = {r.fsdp}, k.tp = {r.tp}, k.pp = {r.pp}, k.cp = {r.cp};
    k.sp = {r.tp > 1 ? 1 : 0};
    k.zero_stage = {r.pp > 1 ? 2 : 3};  // see read_published
    k.num_model_chunks = {r.pp_schedule == "interleaved_1f1b" ? 2 : 1};
    k.micro_batch = {r.local_batch / r.micro_batches};
    k.grad_accum = {r.micro_batches};
    k.dp_bucket_mb = {1e6};
    k.act_ckpt = {r.act_ckpt};
    std::vector<Candidate> c = plan_space(r.cfg, k, cl);
    if (c.size() != 1)
      throw Error("published row " + std::to_string(r.line) + ": " + std::to_string(c.size()) +
                  " layouts planned, expected one");
    out.push_back({&r, std::move(c[0])});
  }
  return out;
}

double published_mape(const std::vector<PublishedResult>& res, const std::string& precision) {
  double s = 0;
  int n = 0;
  for (const auto& x : res)
    if (x.plan.timed && (precision.empty() || x.row->precision == precision))
      s += std::abs(x.error()), ++n;
  return n ? s / n : std::nan("");
}

void write_published(const std::vector<PublishedResult>& res, std::ostream& out) {
  std::ostringstream o;
  o << std::fixed;
  o << "| line | table | layout | precision | compile | published tok/s/GPU | predicted | error "
       "| published GiB | predicted GiB | plan |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : res) {
    const PublishedRow& r = *x.row;
    o << "| " << r.line << " | " << r.table << " | fsdp" << r.fsdp << " tp" << r.tp << " pp" << r.pp
      << " cp" << r.cp << " seq" << r.seq_len << " lb" << r.local_batch << " " << r.act_ckpt
      << (r.pp > 1 ? " " + r.pp_schedule : "") << " | " << r.precision << " | "
      << (r.compile ? "yes" : "no") << " | " << std::setprecision(0) << r.tps_gpu << " | ";
    if (x.plan.timed)
      o << x.plan.time.tokens_per_s_device << " | " << std::setprecision(1) << 100 * x.error()
        << "% | ";
    else
      o << "- | - | ";
    o << std::setprecision(1) << r.memory_gib << " | "
      << x.plan.mem.peak.total() / double(1ull << 30) << " | "
      << (x.plan.feasible ? "fits" : x.plan.reason) << " |\n";
  }
  // Where each timed row's predicted step goes: compute by kind and the
  // communication the step waits for (total in brackets), milliseconds.
  o << "\nPredicted step parts, ms (exposed communication, total in brackets):\n\n"
       "| line | step | gemm | attention | elementwise | optimizer | fsdp gather | fsdp "
       "reduce | tp | cp | other |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : res) {
    if (!x.plan.timed) continue;
    const StepPrediction& t = x.plan.time;
    auto ms = [](double s) { return 1e3 * s; };
    auto comm = [&](CommPart part) {
      const CommTime& c = t.part(part);
      std::ostringstream p;
      p << std::fixed << std::setprecision(0) << ms(c.exposed) << " (" << ms(c.total) << ")";
      return p.str();
    };
    o << std::setprecision(0) << "| " << x.row->line << " | " << ms(t.step) << " | " << ms(t.gemm)
      << " | " << ms(t.attention) << " | " << ms(t.elementwise) << " | " << ms(t.optimizer) << " | "
      << comm(CommPart::Zero) << " | " << comm(CommPart::Dp) << " | " << comm(CommPart::Tp) << " | "
      << comm(CommPart::Cp) << " | " << comm(CommPart::Other) << " |\n";
  }
  auto pct = [](double v) {
    std::ostringstream p;
    p << std::fixed << std::setprecision(1) << 100 * v << "%";
    return std::isnan(v) ? std::string("-") : p.str();
  };
  o << "\nMAPE of tokens/s per GPU: bf16 rows " << pct(published_mape(res, "bf16"))
    << ". Float8 rows apart: " << pct(published_mape(res, "fp8"))
    << " (the trainer has no fp8 path, so the planner predicts its bf16 step for them; "
       "the gap includes Float8's speed-up and is not a validation figure); all rows "
    << pct(published_mape(res, "")) << "\n";
  out << o.str();
}

}  // namespace st::plan
