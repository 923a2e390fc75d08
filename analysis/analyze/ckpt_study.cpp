// The checkpoint-overhead study (see ckpt_study.hpp).
#include "analyze/ckpt_study.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "analyze/ckpt_cost.hpp"
#include "analyze/stats.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st::analysis {
namespace {
Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}
}  // namespace

double young_interval(double cost_s, double mtbf_s) {
  if (cost_s <= 0 || mtbf_s <= 0) return 0;
  return std::sqrt(2 * cost_s * mtbf_s);
}

double daly_interval(double cost_s, double mtbf_s) {
  if (cost_s <= 0 || mtbf_s <= 0) return 0;
  if (cost_s >= 2 * mtbf_s) return mtbf_s;
  const double x = cost_s / (2 * mtbf_s);
  return std::sqrt(2 * cost_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - cost_s;
}

double expected_waste(double interval_s, double cost_s, double persist_s, double restore_s,
                      double mtbf_s) {
  if (interval_s <= 0 || mtbf_s <= 0) return 0;
  return cost_s / interval_s + (interval_s / 2 + persist_s + restore_s) / mtbf_s;
}

std::vector<double> parse_mtbf_list(const std::string& text) {
  std::vector<double> out;
  for (const auto& item : split(text, ',')) {
    const auto bad = [&] {
      return UsageError("--mtbf: invalid value '" + item +
                        "' (valid: a positive number of seconds, or with a unit s, m, h, d; "
                        "comma-separated, e.g. 6h,24h,7d)");
    };
    if (item.empty()) throw bad();
    double unit = 1;
    std::string num = item;
    switch (item.back()) {
      case 's':
        unit = 1;
        num.pop_back();
        break;
      case 'm':
        unit = 60;
        num.pop_back();
        break;
      case 'h':
        unit = 3600;
        num.pop_back();
        break;
      case 'd':
        unit = 86400;
        num.pop_back();
        break;
      default:
        break;
    }
    double v = 0;
    try {
      size_t pos = 0;
      v = std::stod(num, &pos);
      if (pos != num.size()) throw bad();
    } catch (const std::logic_error&) {
      throw bad();
    }
    if (!std::isfinite(v) || v <= 0) throw bad();
    out.push_back(v * unit);
  }
  if (out.empty()) throw UsageError("--mtbf: no value given (e.g. --mtbf 6h,24h,7d)");
  return out;
}

namespace {
// The optimal interval per size and mode: C and P are the medians over
// the steady-state checkpoints of every interval and repeat of that size
// and mode, so C does not depend on the interval the runs used.
void optimal_intervals(CkptStudy& st, const std::vector<double>& mtbf_s) {
  std::map<std::pair<int, std::string>, std::vector<const CkptPoint*>> by;
  for (const auto& k : st.points) by[{k.gpus, k.mode}].push_back(&k);
  for (const auto& [key, ks] : by) {
    std::vector<double> cost, persist, first, step, pcost, ppersist;
    for (const auto* k : ks) {
      cost.insert(cost.end(), k->steady_cost_s.begin(), k->steady_cost_s.end());
      persist.insert(persist.end(), k->steady_persist_s.begin(), k->steady_persist_s.end());
      first.insert(first.end(), k->first_costs_s.begin(), k->first_costs_s.end());
      pcost.push_back(k->cost_s);
      ppersist.push_back(k->persist_s);
      step.push_back(k->step_s);
    }
    double rs = 0;
    for (const auto& [g, sp] : st.restore_s)
      if (g == key.first) rs = sp.med;
    for (double m : mtbf_s) {
      OptimalInterval o;
      o.gpus = key.first;
      o.mode = key.second;
      o.mtbf_s = m;
      o.steady_n = int(cost.size());
      o.cost_s = cost.empty() ? median(pcost) : median(cost);
      o.persist_s = persist.empty() ? median(ppersist) : median(persist);
      o.first_cost_s = median(first);
      o.restore_s = rs;
      o.step_s = median(step);
      o.young_s = young_interval(o.cost_s, m);
      o.daly_s = daly_interval(o.cost_s, m);
      // An async save cannot start before the previous one persisted.
      o.interval_s = std::max(o.daly_s, o.mode == "async" ? o.persist_s : 0.0);
      o.steps = o.step_s > 0 ? o.interval_s / o.step_s : 0;
      o.waste = expected_waste(o.interval_s, o.cost_s, o.persist_s, o.restore_s, m);
      st.optimal.push_back(o);
    }
  }
}

// The disk's own rate measured beside the study (a storage.json), if given.
void read_storage(CkptStudy& st, const std::string& storage_json) {
  if (!storage_json.empty() && std::filesystem::is_regular_file(storage_json)) {
    try {
      const auto j = nlohmann::json::parse(read_file(storage_json));
      st.storage.bytes = j.at("bytes").get<double>();
      st.storage.seconds = j.at("seconds").get<double>();
      st.storage.bandwidth = st.storage.seconds > 0 ? st.storage.bytes / st.storage.seconds : 0;
      st.storage.path = j.value("path", "");
      st.storage.method = j.value("method", "");
      st.storage.measured = st.storage.bandwidth > 0;
    } catch (const std::exception& e) {
      throw UsageError(storage_json + ": not a storage measurement (" + e.what() +
                       "); expected {\"bytes\": B, \"seconds\": S, ...}");
    }
  }
}

}  // namespace

CkptStudy checkpoint_study(const Campaign& c, const std::vector<double>& mtbf_s,
                           const std::string& storage_json) {
  CkptStudy st;
  std::map<int, std::vector<double>> restore, restore_all, restore_bytes, probed_read;
  std::map<int, int> nodes_of;
  for (size_t pi = 0; pi < c.points.size(); ++pi) {
    const Point& p = c.points[pi];
    std::vector<double> ov, ss, is, bw, bytes, load, first_persist, disk, node, probed;
    CkptPoint k;
    const RunSummary& f = c.runs[p.runs.front()];
    int min_run = -1;
    for (size_t i : p.runs) {
      const RunSummary& r = c.runs[i];
      if (r.ckpt_load_s > 0) load.push_back(r.ckpt_load_s);
      if (r.ckpt_restore_s > 0 && r.ckpt_restore_bytes > 0) {
        restore_all[p.gpus].push_back(r.ckpt_restore_s);
        restore_bytes[p.gpus].push_back(r.ckpt_restore_bytes);
      }
      nodes_of[p.gpus] = std::max(1, r.nodes);
      if (r.storage.is_object() && r.storage.value("read_all_Bps", 0.0) > 0)
        probed_read[p.gpus].push_back(r.storage.value("read_all_Bps", 0.0));
      if (r.ckpt_cost.empty()) continue;
      ss.push_back(r.ckpt_stall_share);
      is.push_back(r.ckpt_interference_share);
      ov.push_back(r.ckpt_stall_share + std::max(0.0, r.ckpt_interference_share));
      const SteadyCkpt sc = steady_checkpoints(r.ckpt_cost);
      k.first_costs_s.push_back(sc.first_cost_s);
      first_persist.push_back(sc.first_persist_s);
      k.steady_cost_s.insert(k.steady_cost_s.end(), sc.cost_s.begin(), sc.cost_s.end());
      k.steady_persist_s.insert(k.steady_persist_s.end(), sc.persist_s.begin(), sc.persist_s.end());
      const int n = int(sc.cost_s.size());
      min_run = min_run < 0 ? n : std::min(min_run, n);
      bw.push_back(r.ckpt_agg_bw);
      bytes.push_back(r.ckpt_agg_bytes);
      if (r.ckpt_of_disk > 0) disk.push_back(r.ckpt_of_disk);
      if (r.ckpt_node_Bps > 0) node.push_back(r.ckpt_node_Bps);
      if (r.storage.is_object() && r.storage.value("write_all_Bps", 0.0) > 0)
        probed.push_back(r.storage.value("write_all_Bps", 0.0));
    }
    for (double l : load) restore[p.gpus].push_back(l);
    if (ov.empty() || f.ckpt_interval <= 0) continue;
    k.point = pi;
    k.gpus = p.gpus;
    k.interval = f.ckpt_interval;
    k.mode = f.ckpt_mode;
    k.overhead = spread_of(ov);
    k.stall_share = spread_of(ss);
    k.interference_share = spread_of(is);
    k.first_cost_s = median(k.first_costs_s);
    k.first_persist_s = median(first_persist);
    k.steady_n = int(k.steady_cost_s.size());
    k.steady_min_run = std::max(0, min_run);
    // Without a steady checkpoint the first is all there is: C then carries
    // the one-time costs, and the notes say so.
    k.cost_s = k.steady_n > 0 ? median(k.steady_cost_s) : k.first_cost_s;
    k.persist_s = k.steady_n > 0 ? median(k.steady_persist_s) : k.first_persist_s;
    k.agg_bw = median(bw);
    k.of_disk = disk.empty() ? 0 : median(disk);
    k.node_Bps = node.empty() ? 0 : median(node);
    k.probed_write_Bps = probed.empty() ? 0 : median(probed);
    k.bytes = median(bytes);
    k.step_s = p.step_s.med;
    if (k.steady_min_run < kMinSteadyCheckpoints)
      st.notes.push_back(detail::cat(
          k.gpus, " rank(s), ", k.mode, ", interval ", k.interval, ": ", k.steady_min_run,
          " checkpoint(s) after the first in a run (fewer than ", kMinSteadyCheckpoints, "); ",
          k.steady_n > 0 ? "C from few checkpoints"
                         : "C from the first checkpoint, one-time costs included",
          "; run more steps (train.steps >= ", (kMinSteadyCheckpoints + 1) * k.interval, ")"));
    st.points.push_back(k);
  }
  std::sort(st.points.begin(), st.points.end(), [](const CkptPoint& a, const CkptPoint& b) {
    return std::tie(a.gpus, a.mode, a.interval) < std::tie(b.gpus, b.mode, b.interval);
  });
  for (auto& [g, v] : restore) st.restore_s.push_back({g, spread_of(v)});
  for (auto& [g, v] : restore_all) {
    RestoreRate rr;
    rr.gpus = g;
    rr.nodes = nodes_of[g];
    rr.restore_s = median(v);
    rr.bytes = median(restore_bytes[g]);
    rr.node_Bps = rr.restore_s > 0 ? rr.bytes / rr.restore_s / rr.nodes : 0;
    rr.probed_read_Bps = probed_read[g].empty() ? 0 : median(probed_read[g]);
    st.restore_rate.push_back(rr);
  }
  optimal_intervals(st, mtbf_s);
  read_storage(st, storage_json);
  return st;
}

}  // namespace st::analysis
