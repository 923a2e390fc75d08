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

namespace {

// The event files in `dir` (none when it does not exist).
std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find("tfevents") != std::string::npos)
      out.push_back(it->path().string());
  return out;
}

}  // namespace

LiveWriter::LiveWriter(const std::string& dir) : earlier_files_(event_files(dir)), file_(dir) {}

LiveWriter::~LiveWriter() {
  // A start that ended before its first step: what the earlier ones wrote
  // still goes into this file (not when it never started: a failed set-up
  // leaves the earlier files alone).
  if (!started_ || caught_up_) return;
  try {
    catch_up(INT64_MAX, [](const std::string&) {});
  } catch (...) {
  }
}

void LiveWriter::start(const std::string& run_json_path, const std::string& rank0_telemetry,
                       const Warn& warn) {
  facts_ = run_facts_from_file(run_json_path);
  started_ = true;
  try {
    if (fs::exists(rank0_telemetry)) earlier_ = rank0_records(rank0_telemetry);
  } catch (const std::exception& e) {
    // Unreadable: the earlier starts' event files stay as they are.
    earlier_files_.clear();
    warn(std::string(e.what()) + "; this start's TensorBoard file holds only its own records");
  }
}

void LiveWriter::record(const json& rec, const Warn& warn) {
  if (!caught_up_) {
    if (rec.value("type", "") != "step") {
      pending_.push_back(rec);
      return;
    }
    catch_up(rec.value("step", int64_t(0)), warn);
  }
  write(rec, warn);
}

void LiveWriter::catch_up(int64_t first_step, const Warn& warn) {
  caught_up_ = true;
  for (const json& r : earlier_)
    if (!(r["type"] == "step" && r["step"].get<int64_t>() >= first_step)) write(r, warn);
  for (const json& r : pending_) write(r, warn);
  earlier_.clear();
  pending_.clear();
  if (failed_) return;  // the earlier files stay: this one is incomplete
  for (const std::string& f : earlier_files_) {
    std::error_code ec;
    fs::remove(f, ec);
    if (ec) warn("cannot remove the earlier event file '" + f + "': " + ec.message());
  }
  earlier_files_.clear();
}

void LiveWriter::write(const json& rec, const Warn& warn) {
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

// The reader checks the file first: a bad line is an error naming
// file:line; a cut last line (a killed run) is left out.
std::vector<json> rank0_records(const std::string& path) {
  const telemetry::RankTelemetry t = telemetry::read_rank_file(path);
  if (!t.ok()) throw UsageError(t.errors.front());
  std::vector<json> recs;
  std::map<int64_t, size_t> step_at;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;  // the cut last line the reader allowed
    const std::string type = j.value("type", "");
    if ((type != "step" && type != "event") || !j.contains("step") ||
        !j["step"].is_number_integer())
      continue;  // no scalars (the header, trace records)
    if (type == "step") {
      const int64_t s = j["step"].get<int64_t>();
      if (auto it = step_at.find(s); it != step_at.end()) {
        recs[it->second] = json();  // replaced by the replay
      }
      step_at[s] = recs.size();
    }
    recs.push_back(std::move(j));
  }
  std::erase_if(recs, [](const json& r) { return r.is_null(); });
  return recs;
}

namespace {

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
    const std::vector<json> recs = rank0_records(telemetry::rank_telemetry_path(e.run_dir, 0));
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
