// Implementation of prediction.hpp.
#include "analyze/prediction.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/util.hpp"

namespace st::analysis {

namespace {
// The prediction's step by part (run.json prediction.step_parts_s; a
// run.json written before that field: from its parts_s, as
// StepPrediction::parts() splits them).
StepParts predicted_parts(const nlohmann::json& j, double step) {
  StepParts p{};
  if (j.contains("step_parts_s") && j["step_parts_s"].is_object()) {
    for (StepPart k : kAllStepParts) p[ix(k)] = j["step_parts_s"].value(step_part_name(k), 0.0);
    return p;
  }
  const nlohmann::json parts = j.value("parts_s", nlohmann::json::object());
  auto v = [&](const char* k) { return parts.value(k, 0.0); };
  p[ix(StepPart::Compute)] = v("gemm") + v("attention") + v("elementwise");
  p[ix(StepPart::Optimizer)] = v("optimizer");
  p[ix(StepPart::Comm)] = v("comm_exposed") + v("bubble") + v("imbalance");
  p[ix(StepPart::Other)] =
      step - p[ix(StepPart::Compute)] - p[ix(StepPart::Optimizer)] - p[ix(StepPart::Comm)];
  return p;
}
}  // namespace

PredictionCheck check_prediction(const RunSummary& s) {
  PredictionCheck p;
  const std::string path = s.dir + "/run.json";
  if (!std::filesystem::is_regular_file(path)) return p;
  nlohmann::json run;
  try {
    run = nlohmann::json::parse(read_file(path));
  } catch (const std::exception&) {
    return p;
  }
  if (!run.contains("prediction") || !run["prediction"].is_object()) return p;
  const nlohmann::json& j = run["prediction"];
  p.in_run_json = true;
  p.cluster = j.value("cluster", "");
  p.time_absent = j.value("absent", "");
  if (p.time_absent.empty() && j.contains("step_s")) {
    const double step = j["step_s"].get<double>();
    p.rows.push_back({"step time", "s", step, s.step_p50});
    // The step by part against the run's own parts of its median step: the
    // parts the prediction has (it models no data loading nor checkpoint
    // stall, and its `other` is the replay's rounding).
    const StepParts pred = predicted_parts(j, step);
    for (StepPart k : kAllStepParts)
      if (pred[ix(k)] > 1e-6 * step)
        p.rows.push_back({std::string(step_part_name(k)) + " part", "s", pred[ix(k)],
                          s.step_p50 * s.part_share[ix(k)]});
    p.rows.push_back({"tokens/s", "", j.value("tokens_per_s", 0.0), s.tok_s});
    // MFU at the run's own peak, so both use one denominator.
    const double mfu_at_run_peak =
        s.peak > 0 ? 100 * j.value("mfu", 0.0) * j.value("peak_flops", 0.0) / s.peak : 0;
    p.rows.push_back({"MFU (at the run's peak)", "%", mfu_at_run_peak, s.mfu});
  }
  const nlohmann::json mem = j.value("memory", nlohmann::json::object());
  p.memory_absent = mem.value("absent", "");
  if (p.memory_absent.empty() && mem.contains("peak_bytes"))
    p.rows.push_back({"peak memory", "MiB", mem["peak_bytes"].get<double>() / 1048576.0,
                      double(s.mem_peak_bytes) / 1048576.0});
  return p;
}

std::string prediction_markdown(const PredictionCheck& p) {
  if (!p.in_run_json) return "";
  std::ostringstream o;
  o << "\n## Predicted vs measured\n\nThe trainer's prediction for this layout at start "
       "(run.json `prediction`: step time from the planner's model"
    << (p.cluster.empty() ? "" : " on `" + p.cluster + "`")
    << ", memory from the recording backend); error = predicted / measured - 1.\n\n";
  if (!p.time_absent.empty()) o << "Step time not predicted: " << p.time_absent << "\n\n";
  if (!p.memory_absent.empty()) o << "Memory not predicted: " << p.memory_absent << "\n\n";
  if (p.rows.empty()) return o.str();
  o << "| quantity | predicted | measured | error |\n|---|---|---|---|\n";
  o.setf(std::ios::fixed);
  for (const auto& r : p.rows) {
    o.precision(r.unit == "s" ? 5 : 2);
    const std::string u = r.unit.empty() ? "" : " " + r.unit;
    o << "| " << r.what << " | " << r.predicted << u << " | " << r.measured << u << " | ";
    o.precision(1);
    o << (r.error() >= 0 ? "+" : "") << 100 * r.error() << "% |\n";
  }
  return o.str();
}

std::string campaign_prediction_markdown(const std::vector<RunSummary>& runs) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  bool any = false;
  for (const RunSummary& s : runs) {
    const PredictionCheck p = check_prediction(s);
    if (!p.in_run_json) continue;
    if (!any)
      o << "## Predicted vs measured\n\nEach run's start-up prediction (run.json "
           "`prediction`); error = predicted / measured - 1; `-`: not predicted (the run's "
           "report.md says why).\n\n| run | step time (s) pred / meas / error | MFU (%) pred "
           "/ meas / error | peak memory (MiB) pred / meas / error |\n|---|---|---|---|\n";
    any = true;
    auto cell = [&](const std::string& what, int prec) {
      for (const auto& r : p.rows)
        if (r.what == what) {
          std::ostringstream c;
          c.setf(std::ios::fixed);
          c.precision(prec);
          c << r.predicted << " / " << r.measured << " / ";
          c.precision(1);
          c << (r.error() >= 0 ? "+" : "") << 100 * r.error() << "%";
          return c.str();
        }
      return std::string("-");
    };
    o << "| " << s.dir << " | " << cell("step time", 5) << " | "
      << cell("MFU (at the run's peak)", 2) << " | " << cell("peak memory", 2) << " |\n";
  }
  if (any) o << "\n";
  return o.str();
}

}  // namespace st::analysis
