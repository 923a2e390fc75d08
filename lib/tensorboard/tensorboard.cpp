// Implementation of tensorboard.hpp: the live writer and the export.
#include "tensorboard/tensorboard.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.hpp"
#include "telemetry/paths.hpp"
#include "telemetry/reader.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace st::tensorboard {

void LiveWriter::record(const json& rec, const std::function<void(const std::string&)>& warn) {
  if (failed_) return;
  const auto s = scalars_of(rec, facts_);
  if (!s) return;
  try {
    file_.write(*s);
  } catch (const std::exception& e) {
    failed_ = true;
    warn(std::string(e.what()) + "; no more TensorBoard records this run (telemetry goes on)");
  }
}

std::vector<std::string> run_folders(const std::string& arg) {
  if (!fs::is_directory(arg)) throw UsageError(arg + ": not a folder");
  if (fs::exists(fs::path(arg) / "run.json")) return {arg};
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(arg))
    if (e.is_directory() && fs::exists(e.path() / "run.json")) out.push_back(e.path().string());
  if (out.empty())
    throw UsageError(arg +
                     ": neither a run folder (no run.json) nor a campaign (no sub-folder "
                     "holds a run.json)");
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Rank 0's records in file order, a replayed step (a resumed run) by its
// last record. The reader checks the file first: a bad line is an error
// naming file:line; a cut last line (a killed run) is left out.
std::vector<json> rank0_records(const std::string& run) {
  const std::string path = telemetry::rank_telemetry_path(run, 0);
  const telemetry::RankTelemetry t = telemetry::read_rank_file(path);
  if (!t.ok()) throw UsageError(t.errors.front());
  std::vector<json> recs;
  std::map<int64_t, size_t> step_at;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // the cut last line the reader allowed
    if (j.value("type", "") == "step" && j.contains("step")) {
      const int64_t s = j["step"].get<int64_t>();
      if (auto it = step_at.find(s); it != step_at.end()) {
        recs[it->second] = json();  // replaced by the replay
      }
      step_at[s] = recs.size();
    }
    recs.push_back(std::move(j));
  }
  return recs;
}

bool holds_event_files(const fs::path& d) {
  std::error_code ec;
  if (!fs::is_directory(d, ec)) return false;
  for (const auto& e : fs::directory_iterator(d, ec))
    if (e.path().filename().string().find("tfevents") != std::string::npos) return true;
  return false;
}

}  // namespace

std::vector<ExportedRun> export_runs(const std::vector<std::string>& runs, const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw UsageError("--tensorboard " + out + ": cannot create the folder: " +
                     (ec ? ec.message() : std::string("not a folder")));
  // Names first, so nothing is written when one of them is taken.
  std::vector<ExportedRun> res;
  std::set<std::string> names;
  for (const auto& r : runs) {
    std::string base = fs::path(r).lexically_normal().filename().string();
    if (base.empty() || base == ".") base = fs::path(r).lexically_normal().parent_path().filename();
    if (base.empty()) base = "run";
    std::string name = base;
    for (int k = 2; names.count(name); ++k) name = base + "-" + std::to_string(k);
    names.insert(name);
    ExportedRun e;
    e.run_dir = r;
    e.out_dir = (fs::path(out) / name).string();
    if (holds_event_files(e.out_dir))
      throw UsageError("--tensorboard " + out + ": '" + e.out_dir +
                       "' already holds event files (TensorBoard would show both); "
                       "export into an empty folder or remove them");
    res.push_back(e);
  }
  for (auto& e : res) {
    const RunFacts facts = run_facts_from_file(e.run_dir + "/run.json");
    const std::vector<json> recs = rank0_records(e.run_dir);
    EventFile file(e.out_dir);
    for (const json& rec : recs) {
      const auto s = scalars_of(rec, facts);
      if (!s) continue;
      file.write(*s);
      (rec.value("type", "") == "step" ? e.steps : e.events) += 1;
      e.scalars += long(s->values.size());
    }
  }
  return res;
}

}  // namespace st::tensorboard
