// Implementation of prediction.hpp.
#include "prediction.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/cluster.hpp"
#include "plan/time_model.hpp"
#include "record/step.hpp"
#include "scaletrain/build_config.hpp"

namespace st {
namespace {

nlohmann::json memory_part(const Config& cfg, int world) {
  // Ranks are laid out tp innermost, then cp, dp, pp: stage s starts at
  // s * world / pp.
  record::RankStep best;
  for (int s = 0; s < cfg.parallel.pp; ++s) {
    record::RankStep r = record::record_step(cfg, s * (world / cfg.parallel.pp));
    if (s == 0 || r.step.peak_total > best.step.peak_total) best = std::move(r);
  }
  nlohmann::json cats = nlohmann::json::object();
  for (size_t c = 0; c < kMemCats; ++c) cats[memcat_name(MemCat(c))] = best.step.peak[c];
  return {{"rank", best.rank},
          {"peak_bytes", best.step.peak_total},
          {"peak_by_category", cats},
          {"source", "recording backend (lib/record): the trainer's engine, one step"}};
}

std::string cluster_path(const Config& cfg, std::string& why_none) {
  if (!cfg.runtime.cluster.empty()) return cfg.runtime.cluster;  // checked when the config loaded
  if (const char* e = std::getenv("SCALETRAIN_CLUSTER_FILE"); e && *e) return e;
  if (cfg.runtime.device != "cpu") {
    why_none = "no cluster file for a " + cfg.runtime.device +
               " run: set runtime.cluster (configs/clusters/*.yaml)";
    return "";
  }
  const std::string p = std::string(SCALETRAIN_SOURCE_DIR) + "/configs/clusters/cpu-local.yaml";
  if (!std::filesystem::is_regular_file(p)) {
    why_none = "no runtime.cluster, no SCALETRAIN_CLUSTER_FILE and no " + p +
               " (write one with `scaletrain-plan calibrate`)";
    return "";
  }
  return p;
}

// The cluster file as run.json records it: relative to the repository it
// lies in (the source tree this trainer was built from, else the git
// checkout holding the file: a campaign's copy, another checkout), so a
// committed run names no machine's checkout path; as given only when it
// lies in no repository.
std::string recorded_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path f = fs::weakly_canonical(path, ec);
  if (ec) return path;
  auto inside = [&f](const fs::path& root) -> std::string {
    std::error_code e;
    const fs::path r = fs::weakly_canonical(root, e);
    if (e) return "";
    const fs::path rel = f.lexically_relative(r);
    return rel.empty() || *rel.begin() == ".." ? "" : rel.string();
  };
  if (std::string rel = inside(SCALETRAIN_SOURCE_DIR); !rel.empty()) return rel;
  for (fs::path d = f.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path())
    if (fs::exists(d / ".git", ec)) return inside(d);
  return path;
}

nlohmann::json time_part(const Config& cfg) {
  std::string why;
  const std::string file = cluster_path(cfg, why);
  if (file.empty()) return {{"absent", why}};
  const std::string path = recorded_path(file);
  try {
    const plan::Cluster cl = plan::load_cluster(file);
    // A CPU cluster file holds kernel times measured in its own precision
    // (the op keys carry no dtype): a run in another one is not priced.
    if (cl.kind == "cpu" && cl.precision != cfg.train.precision)
      return {{"cluster", path},
              {"absent", "the cluster file's kernel times were measured in " + cl.precision +
                             " and this run is " + cfg.train.precision +
                             " (scaletrain-plan calibrate measures fp32 kernels only)"}};
    const plan::StepPrediction p = plan::predict_step(cfg, cl);
    const StepParts sp = p.parts();
    nlohmann::json step_parts = nlohmann::json::object();
    for (StepPart k : kAllStepParts) step_parts[step_part_name(k)] = sp[ix(k)];
    return {{"cluster", path},
            {"step_s", p.step},
            {"parts_s",
             {{"gemm", p.gemm},
              {"attention", p.attention},
              {"elementwise", p.elementwise},
              {"recompute", p.recompute},
              {"bubble", p.bubble},
              {"imbalance", p.imbalance},
              {"comm_exposed", p.exposed_comm()},
              {"optimizer", p.optimizer}}},
            {"step_parts_s", step_parts},
            {"tokens_per_s", p.tokens_per_s},
            {"mfu", p.mfu},
            {"peak_flops", cl.peak_flops}};
  } catch (const std::exception& e) {
    return {{"cluster", path}, {"absent", e.what()}};
  }
}

}  // namespace

nlohmann::json predict_run(const Config& cfg, int world) {
  nlohmann::json j = time_part(cfg);
  try {
    j["memory"] = memory_part(cfg, world);
  } catch (const std::exception& e) {
    j["memory"] = {{"absent", e.what()}};
  }
  return j;
}

void add_prediction(const std::string& path, const Config& cfg, int world) {
  try {
    nlohmann::json run = nlohmann::json::parse(read_file(path));
    run["prediction"] = predict_run(cfg, world);
    write_file_atomic(path, run.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaletrain: warning: no prediction in %s: %s\n", path.c_str(), e.what());
  }
}

}  // namespace st
