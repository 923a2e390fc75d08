// Implementation of scalars.hpp: a walk over the record's numbers.
#include "tensorboard/scalars.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "metrics/metrics.hpp"

using nlohmann::json;

namespace st::tensorboard {

RunFacts run_facts(const telemetry::RunInfo& ri) {
  RunFacts f;
  f.world_size = ri.world_size;
  f.seq_len = ri.seq_len;
  f.peak_flops = ri.peak_flops;
  const metrics::ModelShape m{ri.n_params, ri.n_layers, ri.d_model, ri.n_heads, ri.seq_len};
  f.model_flops_per_seq = metrics::mpt_model_flops_per_seq(m);
  f.hw_flops_per_seq = metrics::hw_flops_per_seq(m, f.model_flops_per_seq, ri.act_ckpt);
  return f;
}

RunFacts run_facts_from_file(const std::string& path) {
  std::vector<std::string> errors;
  const telemetry::RunInfo ri = telemetry::read_run_json(path, errors);
  if (!errors.empty()) throw UsageError(errors.front());
  return run_facts(ri);
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every number under `v` (objects walked, lists and strings left out) as
// prefix/key/... ; a null is NaN (the writer's non-finite float).
void walk(const std::string& tag, const json& v, std::vector<Scalar>& out) {
  if (v.is_number())
    out.push_back({tag, v.get<double>()});
  else if (v.is_null())
    out.push_back({tag, kNaN});
  else if (v.is_object())
    for (const auto& [k, x] : v.items()) walk(tag + "/" + k, x, out);
}

bool is_time_or_step(const std::string& k) { return k == "step" || k == "t_start" || k == "t"; }

// The rates at the slowest rank's pace (`slowest_step_s`), as the progress
// line and report.md give them; a record from before that field, at its own.
void add_rates(const json& r, const RunFacts& f, std::vector<Scalar>& out) {
  const double step_s = r.value("slowest_step_s", r.value("step_s", 0.0));
  const auto gt = r.find("global_tokens");
  if (!(step_s > 0) || gt == r.end() || !gt->is_number()) return;
  const double tok_s = gt->get<double>() / step_s;
  out.push_back({"throughput/tokens_per_s", tok_s});
  if (f.world_size > 0)
    out.push_back({"throughput/tokens_per_s_per_device", tok_s / double(f.world_size)});
  if (f.peak_flops > 0 && f.seq_len > 0 && f.world_size > 0) {
    const double seq_s = tok_s / double(f.seq_len);
    out.push_back(
        {"utilization/mfu_percent",
         100 * metrics::utilization(f.model_flops_per_seq, seq_s, f.world_size, f.peak_flops)});
    out.push_back(
        {"utilization/hfu_percent",
         100 * metrics::utilization(f.hw_flops_per_seq, seq_s, f.world_size, f.peak_flops)});
  }
}

}  // namespace

std::optional<Scalars> scalars_of(const json& r, const RunFacts& facts) {
  if (!r.is_object()) return std::nullopt;
  const std::string type = r.value("type", "");
  const auto st = r.find("step");
  if ((type != "step" && type != "event") || st == r.end() || !st->is_number_integer())
    return std::nullopt;
  Scalars s;
  s.step = st->get<int64_t>();
  if (type == "step") {
    s.wall_time = r.value("t_start", 0.0) + r.value("step_s", 0.0);
    for (const auto& [k, v] : r.items()) {
      if (k == "type" || is_time_or_step(k)) continue;
      walk(v.is_object() ? k : "train/" + k, v, s.values);
    }
    add_rates(r, facts, s.values);
  } else {
    const std::string ev = r.value("event", "");
    s.wall_time = r.value("t", 0.0);
    for (const auto& [k, v] : r.items()) {
      if (k == "type" || k == "event" || is_time_or_step(k)) continue;
      walk(ev + "/" + k, v, s.values);
    }
  }
  if (s.values.empty()) return std::nullopt;
  return s;
}

}  // namespace st::tensorboard
