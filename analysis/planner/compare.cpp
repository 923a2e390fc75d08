// Implementation of compare.hpp.
#include "planner/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyze/run_summary.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "parallel/stages.hpp"
#include "plan/memory.hpp"
#include "plan/time_model.hpp"
#include "telemetry/reader.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st::plan {

Config config_from_run_json(const std::string& dir) {
  const std::string path = (fs::path(dir) / "run.json").string();
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw UsageError(path + ": not valid JSON: " + e.what());
  }
  if (!j.contains("config") || !j["config"].is_object())
    throw UsageError(path + ": no 'config' object (a run folder written by scaletrain?)");
  std::vector<std::string> sets;
  for (const char* sec : {"model", "parallel", "train", "runtime"}) {
    if (!j["config"].contains(sec)) continue;
    for (auto& [k, v] : j["config"][sec].items()) {
      if (std::string(sec) == "model" && k == "preset") continue;
      if (std::string(sec) == "runtime" && (k == "out" || k == "name")) continue;
      std::string val;
      if (v.is_string())
        val = v.get<std::string>();
      else if (v.is_boolean())
        val = v.get<bool>() ? "true" : "false";
      else
        val = v.dump();
      if (val.empty()) continue;
      sets.push_back(std::string(sec) + "." + k + "=" + val);
    }
  }
  Config c;
  try {
    c = load_config("", sets);
    resolve_layout(c, j.value("world_size", 0));
  } catch (const UsageError& e) {
    throw UsageError(path + ": config: " + e.what());
  }
  return c;
}

namespace {
std::string layout_name(const Config& c) {
  const auto& p = c.parallel;
  std::ostringstream o;
  o << "dp" << p.dp << " tp" << p.tp << " pp" << p.pp << " cp" << p.cp << (p.sp ? " sp" : "")
    << " z" << p.zero_stage
    << (p.num_model_chunks > 1 ? " v" + std::to_string(p.num_model_chunks) : "") << " mb"
    << c.train.micro_batch << " ga" << c.train.grad_accum << " " << c.train.act_ckpt;
  return o.str();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

namespace {
// The measured side per rank over the window: each rank's memory peak
// against its stage's prediction (the row keeps the largest relative
// error), the largest exposed, compute and other time, and each stage's
// longest waits.
std::vector<double> measure_ranks(const Config& cfg, const telemetry::RunTelemetry& run,
                                  const analysis::RunSummary& s, CompareRow& r) {
  std::vector<MemoryEstimate> stage;
  for (int st = 0; st < cfg.parallel.pp; ++st) stage.push_back(estimate_memory(cfg, st));
  const MeshDims dims{cfg.parallel.pp, cfg.parallel.dp, cfg.parallel.cp, cfg.parallel.tp};
  double worst = -1;
  std::vector<double> exposed, compute, other;
  std::vector<double> stage_waits(size_t(cfg.parallel.pp), 0.0);  // the longest of its ranks
  for (size_t k = 0; k < run.ranks.size(); ++k) {
    int64_t peak = 0;
    std::vector<double> ex, cm, ot, wt;
    for (const auto& st : run.ranks[k].steps) {
      peak = std::max(peak, st.mem_peak_bytes);
      if (st.step < s.win_first || st.step > s.win_last) continue;
      ex.push_back(st.comm_exposed_s);
      cm.push_back(st.fwd_s + st.bwd_s + st.optim_s);
      // Not computing: waits; of them, what the exposed communication does not explain.
      const double waits =
          st.step_s - st.fwd_s - st.bwd_s - st.optim_s - st.data_s - st.ckpt_stall_s;
      wt.push_back(waits);
      ot.push_back(waits - st.comm_exposed_s);
    }
    exposed.push_back(median(ex));
    compute.push_back(median(cm));
    other.push_back(median(ot));
    const size_t stg = size_t(mesh_coords(int(k), dims).pp);  // the mesh's own layout rule
    stage_waits[stg] = std::max(stage_waits[stg], median(wt));
    const double pred = stage[stg].peak.total();
    const double e = peak > 0 ? std::abs(pred / double(peak) - 1) : 0;
    if (e > worst) {
      worst = e;
      r.mem_pred = pred;
      r.mem_meas = double(peak);
    }
  }
  auto largest = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  r.exposed_meas = largest(exposed);
  r.compute_meas = largest(compute);
  r.other_meas = largest(other);
  return stage_waits;
}

// The run's node size and placement, from run.json's hosts: each rank is
// predicted on the node it ran on (Cluster::rank_node).
Cluster placed(const Cluster& cl, const telemetry::RunTelemetry& run, const std::string& dir,
               CompareRow& r) {
  Cluster at = cl;
  if (!run.info.hosts.empty()) at.rank_node.assign(size_t(r.ranks), -1);
  for (size_t n = 0; n < run.info.hosts.size(); ++n) {
    const auto& h = run.info.hosts[n];
    r.ranks_per_node = std::max(r.ranks_per_node, int(h.ranks.size()));
    for (size_t i = 1; i < h.ranks.size(); ++i)
      if (h.ranks[i] != h.ranks[i - 1] + 1 || h.ranks[0] % int(h.ranks.size()) != 0)
        r.block_placement = false;
    for (int k : h.ranks) {
      if (k < 0 || k >= r.ranks)
        throw UsageError(dir + "/run.json: hosts: rank " + std::to_string(k) +
                         " is outside the run's " + std::to_string(r.ranks) + " ranks");
      at.rank_node[size_t(k)] = int(n);
    }
  }
  if (std::count(at.rank_node.begin(), at.rank_node.end(), -1) > 0)
    throw UsageError(dir + "/run.json: hosts name no node for some of the run's " +
                     std::to_string(r.ranks) + " ranks");
  if (r.ranks_per_node > 0) at.devices_per_node = r.ranks_per_node;
  return at;
}

// One run predicted on its own placement and measured.
CompareRow compare_run(const std::string& dir, const Cluster& cl) {
  const Config cfg = config_from_run_json(dir);
  const telemetry::RunTelemetry run = telemetry::read_run(dir);
  analysis::Options opt;
  const analysis::RunSummary s = analysis::summarize_run(run, opt);
  CompareRow r;
  r.run = fs::path(dir).filename().string();
  if (r.run.empty()) r.run = fs::path(dir).parent_path().filename().string();
  r.layout = layout_name(cfg);
  r.ranks = s.gpus;
  const std::vector<double> stage_waits = measure_ranks(cfg, run, s, r);
  const Cluster at = placed(cl, run, dir, r);
  const StepPrediction t = predict_step(cfg, at);
  r.step_pred = t.step;
  const auto& ri = run.info;
  // The run's own measured GEMM rate scales the cluster's compute only when
  // it was measured in the cluster file's precision (an fp32 file against a
  // bf16 run's rate would mix two kernels' speeds).
  const std::string measured = cl.precision == "bf16" ? "measured bf16 GEMM" : "measured sgemm";
  if (!cl.gpu() && ri.peak_flops > 0 && ri.peak_source.rfind(measured, 0) == 0) {
    Cluster at_run = at;
    at_run.concurrency = {{std::min(r.ranks, at.devices_per_node), cl.peak_flops / ri.peak_flops}};
    r.step_pred_rt = predict_step(cfg, at_run).step;
  }
  r.step_meas = s.step_p50;
  r.exposed_pred = t.exposed_comm();
  r.compute_pred = t.compute() + t.optimizer;
  r.bubble_pred = t.bubble;
  r.waits_stage =
      int(std::max_element(stage_waits.begin(), stage_waits.end()) - stage_waits.begin());
  r.waits_meas = stage_waits[size_t(r.waits_stage)];
  if (size_t(r.waits_stage) < t.stage_waits.size())
    r.waits_pred = t.stage_waits[size_t(r.waits_stage)];
  r.tok_s_pred = t.tokens_per_s;
  r.tok_s_meas = s.tok_s;
  r.mfu_pred = t.mfu * 100;
  r.mfu_meas = s.mfu;
  return r;
}
}  // namespace

std::vector<CompareRow> compare_runs(const std::vector<std::string>& dirs, const Cluster& cl) {
  std::vector<CompareRow> rows;
  for (const std::string& dir : dirs) rows.push_back(compare_run(dir, cl));
  return rows;
}

namespace {
// compare.json's row of a run.
json row_json(const CompareRow& r) {
  return {{"run", r.run},
          {"layout", r.layout},
          {"ranks", r.ranks},
          {"ranks_per_node", r.ranks_per_node},
          {"block_placement", r.block_placement},
          {"mem_pred_bytes", r.mem_pred},
          {"mem_meas_bytes", r.mem_meas},
          {"mem_err", r.mem_err()},
          {"step_pred_s", r.step_pred},
          {"step_meas_s", r.step_meas},
          {"step_err", r.step_err()},
          {"step_pred_run_speed_s", r.step_pred_rt},
          {"step_run_speed_err", r.step_rt_err()},
          {"exposed_pred_s", r.exposed_pred},
          {"exposed_meas_s", r.exposed_meas},
          {"exposed_err", r.exposed_err()},
          {"compute_pred_s", r.compute_pred},
          {"compute_meas_s", r.compute_meas},
          {"bubble_pred_s", r.bubble_pred},
          {"rest_meas_s", r.other_meas},
          {"tok_s_pred", r.tok_s_pred},
          {"tok_s_meas", r.tok_s_meas},
          {"mfu_pred_pct", r.mfu_pred},
          {"mfu_meas_pct", r.mfu_meas},
          {"waits_stage", r.waits_stage},
          {"waits_pred_s", r.waits_pred},
          {"waits_meas_s", r.waits_meas},
          {"waits_err", r.waits_err()}};
}
}  // namespace

void write_compare(const std::vector<CompareRow>& rows, const Cluster& cl,
                   const std::string& out_dir, std::ostream& out) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  double mem_ape = 0, step_ape = 0, mem_max = 0, rt_ape = 0;
  int rt_n = 0;
  for (const auto& r : rows) {
    mem_ape += std::abs(r.mem_err());
    step_ape += std::abs(r.step_err());
    mem_max = std::max(mem_max, std::abs(r.mem_err()));
    if (r.step_pred_rt > 0) rt_ape += std::abs(r.step_rt_err()), ++rt_n;
  }
  const double n = std::max<size_t>(1, rows.size());
  auto f = [](double v, int p) {
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(p);
    o << v;
    return o.str();
  };
  std::ostringstream md, csv;
  md << "# Predicted against measured\n\ncluster file: `" << cl.path << "` (" << cl.name
     << "); each run predicted with its ranks on the nodes they ran on (run.json hosts)\n\n| run | "
        "layout | "
        "ranks | per node | memory pred MiB | memory meas MiB | error | step pred ms | "
        "step meas ms | error | step pred at run speed ms | error | exposed comm pred ms | "
        "meas ms | error | compute pred ms | meas ms | bubble pred ms | rest meas ms | "
        "waits stage | waits pred ms | meas ms | error |\n|";
  for (int col = 0; col < 23; ++col) md << "---|";
  md << "\n";
  csv << "run,layout,ranks,ranks_per_node,block_placement,mem_pred_bytes,mem_meas_bytes,mem_err,"
         "step_pred_s,step_meas_s,step_err,step_pred_run_speed_s,step_run_speed_err,"
         "exposed_pred_s,exposed_meas_s,exposed_err,compute_pred_s,compute_meas_s,bubble_pred_s,"
         "rest_meas_s,tok_s_pred,tok_s_meas,mfu_pred_pct,mfu_meas_pct,waits_stage,waits_pred_s,"
         "waits_meas_s,waits_err\n";
  json j;
  j["cluster"] = cl.path;
  j["runs"] = json::array();
  int unplaced = 0;
  for (const auto& r : rows) {
    unplaced += r.block_placement ? 0 : 1;
    md << "| " << r.run << " | " << r.layout << " | " << r.ranks << " | " << r.ranks_per_node
       << (r.block_placement ? "" : " (not in blocks)") << " | " << f(r.mem_pred / 1048576, 1)
       << " | " << f(r.mem_meas / 1048576, 1) << " | " << f(100 * r.mem_err(), 1) << "% | "
       << f(r.step_pred * 1e3, 1) << " | " << f(r.step_meas * 1e3, 1) << " | "
       << f(100 * r.step_err(), 1) << "% | "
       << (r.step_pred_rt > 0
               ? f(r.step_pred_rt * 1e3, 1) + " | " + f(100 * r.step_rt_err(), 1) + "%"
               : std::string("- | -"))
       << " | " << f(r.exposed_pred * 1e3, 1) << " | " << f(r.exposed_meas * 1e3, 1) << " | "
       << (r.exposed_meas > 0 ? f(100 * r.exposed_err(), 1) + "%" : std::string("-")) << " | "
       << f(r.compute_pred * 1e3, 1) << " | " << f(r.compute_meas * 1e3, 1) << " | "
       << f(r.bubble_pred * 1e3, 1) << " | " << f(r.other_meas * 1e3, 1) << " | " << r.waits_stage
       << " | " << f(r.waits_pred * 1e3, 1) << " | " << f(r.waits_meas * 1e3, 1) << " | "
       << (r.waits_meas > 0.001 ? f(100 * r.waits_err(), 1) + "%" : std::string("-")) << " |\n";
    csv << r.run << "," << r.layout << "," << r.ranks << "," << r.ranks_per_node << ","
        << (r.block_placement ? 1 : 0) << "," << r.mem_pred << "," << r.mem_meas << ","
        << r.mem_err() << "," << r.step_pred << "," << r.step_meas << "," << r.step_err() << ","
        << r.step_pred_rt << "," << r.step_rt_err() << "," << r.exposed_pred << ","
        << r.exposed_meas << "," << r.exposed_err() << "," << r.compute_pred << ","
        << r.compute_meas << "," << r.bubble_pred << "," << r.other_meas << "," << r.tok_s_pred
        << "," << r.tok_s_meas << "," << r.mfu_pred << "," << r.mfu_meas << "," << r.waits_stage
        << "," << r.waits_pred << "," << r.waits_meas << "," << r.waits_err() << "\n";
    j["runs"].push_back(row_json(r));
  }
  md << "\n"
     << rows.size() << " runs: memory mean |error| " << f(100 * mem_ape / n, 1) << "% (largest "
     << f(100 * mem_max, 1) << "%), step time MAPE " << f(100 * step_ape / n, 1) << "%";
  if (rt_n > 0)
    md << "; at each run's measured speed (" << rt_n << " runs) " << f(100 * rt_ape / rt_n, 1)
       << "%";
  md << "\n";
  if (unplaced > 0)
    md << "\n"
       << unplaced
       << " run(s) did not place their ranks in consecutive blocks (mpirun --rank-by node): "
          "each is predicted with its ranks on the nodes run.json names.\n";
  j["memory_mape"] = mem_ape / n;
  j["step_mape_run_speed"] = rt_n > 0 ? rt_ape / rt_n : 0.0;
  j["memory_max_abs_err"] = mem_max;
  j["step_mape"] = step_ape / n;
  write_file_atomic((fs::path(out_dir) / "compare.md").string(), md.str());
  write_file_atomic((fs::path(out_dir) / "compare.csv").string(), csv.str());
  write_file_atomic((fs::path(out_dir) / "compare.json").string(), j.dump(2) + "\n");
  out << md.str();
}

}  // namespace st::plan
