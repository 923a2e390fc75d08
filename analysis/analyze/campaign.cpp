// Campaign analysis (see campaign.hpp). Runs with the same model, layout and
// size are repeats of one point; a series holds the points of one model and
// layout over sizes. A series is weak scaling when every point holds the
// same tokens per GPU per step, strong scaling when every point holds the
// same global batch; otherwise it is refused, never averaged.
#include "analyze/campaign.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "analyze/prediction.hpp"
#include "analyze/stats.hpp"
#include "core/error.hpp"
#include "metrics/metrics.hpp"

namespace st::analysis {
namespace {

std::string model_key(const RunSummary& r) {
  std::ostringstream os;
  os << r.model << " (N=" << r.n_params << ", L=" << r.n_layers << ", d=" << r.d_model
     << ", heads=" << r.n_heads << ", seq_len=" << r.seq_len << ")";
  return os.str();
}

// What stays the same along a scaling series (the size-free layout).
std::string layout_text(const RunSummary& r) {
  std::ostringstream os;
  os << "tp" << r.tp << " pp" << r.pp << " cp" << r.cp << " ZeRO" << r.zero_stage << " act "
     << r.act_ckpt << " mb" << r.micro_batch << " " << r.precision;
  if (r.ckpt_interval > 0) os << " ckpt " << r.ckpt_mode << "/" << r.ckpt_interval;
  if (r.ckpt_load_s > 0) os << " resumed";  // a restore run is not a repeat of a fresh start
  return os.str();
}

// The layout without its checkpoint setting (a checkpoint study varies it).
std::string base_layout_text(const RunSummary& r) {
  RunSummary b;
  b.tp = r.tp, b.pp = r.pp, b.cp = r.cp, b.zero_stage = r.zero_stage, b.act_ckpt = r.act_ckpt;
  b.micro_batch = r.micro_batch, b.precision = r.precision;
  return layout_text(b);
}

// What repeats share: the layout and the size.
std::string point_key(const RunSummary& r) {
  std::ostringstream os;
  os << model_key(r) << " | " << layout_text(r) << " | " << r.gpus << " ranks dp" << r.dp << " ga"
     << r.grad_accum << " gbt" << r.global_batch_tokens;
  return os.str();
}

// The run folder's own name ("runs/n1-r0001/" -> "n1-r0001").
std::string run_name(const std::string& dir) {
  auto p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

Spread spread(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

// MFU / HFU again at another peak (the campaign's one).
void repeak(RunSummary& r, double peak, const std::string& source) {
  if (r.peak <= 0 || peak <= 0) {
    r.peak = peak;
  } else {
    r.mfu *= r.peak / peak;
    r.hfu *= r.peak / peak;
    r.peak = peak;
  }
  if (r.mfu == 0 && peak > 0) {
    r.mfu = 100 * metrics::utilization(r.model_flops_per_seq, r.seq_s, r.gpus, peak);
    r.hfu = 100 * metrics::utilization(r.hw_flops_per_seq, r.seq_s, r.gpus, peak);
  }
  r.peak_source = source;
}

}  // namespace

std::string percent_text(double x, bool sign) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  if (sign && x >= 0) o << '+';
  o << 100 * x << '%';
  return o.str();
}

RepeatCheck check_repeats(const std::vector<RunSummary>& runs, const std::vector<size_t>& idx) {
  RepeatCheck c;
  if (idx.size() < 2) return c;
  size_t fast = idx.front(), slow = idx.front();
  for (size_t i : idx) {
    if (runs[i].step_p50 < runs[fast].step_p50) fast = i;
    if (runs[i].step_p50 > runs[slow].step_p50) slow = i;
  }
  c.step_spread = runs[slow].step_p50 / runs[fast].step_p50 - 1;
  c.cpu_recorded = runs[slow].cpu_s_step > 0 && runs[fast].cpu_s_step > 0;
  if (c.cpu_recorded) c.cpu_change = runs[slow].cpu_s_step / runs[fast].cpu_s_step - 1;
  if (c.step_spread <= kRepeatTolerance)
    c.verdict = "agree";
  else if (c.cpu_recorded && c.cpu_change >= 0.5 * c.step_spread)
    c.verdict = "host speed moved";
  else
    c.verdict = "not the host's CPU speed";
  return c;
}

namespace {

Point make_point(const std::vector<RunSummary>& runs, const std::vector<size_t>& idx) {
  Point p;
  const RunSummary& f = runs[idx.front()];
  p.key = point_key(f);
  p.layout = layout_text(f);
  p.gpus = f.gpus;
  p.nodes = f.nodes;
  p.runs = idx;
  std::vector<double> tok, tokg, mfu, hfu, step, step_tokg, step_mfu;
  std::vector<double> ptok, pmfu, unattr, cpu;
  std::array<std::vector<double>, kStepParts> step_parts;
  std::array<std::vector<double>, kCommParts> parts;
  for (size_t i : idx) {
    const RunSummary& r = runs[i];
    tok.push_back(r.tok_s);
    tokg.push_back(r.tok_s_gpu);
    mfu.push_back(r.mfu);
    hfu.push_back(r.hfu);
    step.push_back(r.step_p50);
    if (r.cpu_s_step > 0) cpu.push_back(r.cpu_s_step);
    for (double s : r.step_s_window)
      if (s > 0) {
        const double tg = r.tokens_per_step / s / std::max(1, r.gpus);
        step_tokg.push_back(tg);
        step_mfu.push_back(r.tok_s_gpu > 0 ? r.mfu * tg / r.tok_s_gpu : 0);
      }
    // The median step in parts at the window's shares (the checkpoint stall:
    // its average over the window's steps, as a median step has none).
    for (size_t k = 0; k < kStepParts; ++k) step_parts[k].push_back(r.step_p50 * r.part_share[k]);
    for (size_t k = 0; k < parts.size(); ++k) parts[k].push_back(r.step_p50 * r.comm_part_share[k]);
    unattr.push_back(r.step_p50 * r.comm_unattributed_share);
    p.mem_peak_bytes = std::max(p.mem_peak_bytes, r.mem_peak_bytes);
    if (r.mem_capacity_bytes > 0)
      p.mem_capacity_bytes = p.mem_capacity_bytes < 0
                                 ? r.mem_capacity_bytes
                                 : std::min(p.mem_capacity_bytes, r.mem_capacity_bytes);
    const PredictionCheck pc = check_prediction(r);
    if (p.pred_cluster.empty()) p.pred_cluster = pc.cluster;
    for (const auto& row : pc.rows) {
      if (row.what == "tokens/s") ptok.push_back(row.predicted / std::max(1, r.gpus));
      if (row.what == "MFU (at the run's peak)") pmfu.push_back(row.predicted);
    }
  }
  p.tok_s = spread(tok);
  p.tok_s_gpu = spread(tokg);
  p.mfu = spread(mfu);
  p.hfu = spread(hfu);
  p.step_s = spread(step);
  p.cpu_s_step = spread(cpu);
  p.repeats = check_repeats(runs, idx);
  p.tok_s_gpu_p10 = percentile(step_tokg, 10);
  p.tok_s_gpu_p90 = percentile(step_tokg, 90);
  p.mfu_p10 = percentile(step_mfu, 10);
  p.mfu_p90 = percentile(step_mfu, 90);
  p.pred_tok_s_gpu = median(ptok);
  p.pred_mfu = median(pmfu);
  // Medians over repeats need not add up to the median step: scale them to
  // it, and the comm parts to the comm part.
  double step_sum = 0;
  for (size_t k = 0; k < kStepParts; ++k) step_sum += p.part_s[k] = median(step_parts[k]);
  if (step_sum > 0)
    for (double& v : p.part_s) v *= p.step_s.med / step_sum;
  const double comm_s = p.part_s[ix(StepPart::Comm)];
  double part_sum = 0;
  for (size_t k = 0; k < parts.size(); ++k) part_sum += p.comm_part_s[k] = median(parts[k]);
  p.comm_unattributed_s = median(unattr);
  part_sum += p.comm_unattributed_s;
  if (part_sum > 0) {
    for (double& v : p.comm_part_s) v *= comm_s / part_sum;
    p.comm_unattributed_s *= comm_s / part_sum;
  } else {
    p.comm_unattributed_s = comm_s;
  }
  return p;
}

Series make_series(const Campaign& c, std::vector<size_t> pts) {
  Series s;
  std::stable_sort(pts.begin(), pts.end(),
                   [&](size_t a, size_t b) { return c.points[a].gpus < c.points[b].gpus; });
  s.points = pts;
  const RunSummary& base = c.runs[c.points[pts.front()].runs.front()];
  s.model = base.model;
  s.layout = c.points[pts.front()].layout;
  s.base_gpus = base.gpus;
  const double base_tok = c.points[pts.front()].tok_s.med;
  auto eff = [&](double tok, int gpus) {
    const double ideal = base_tok * double(gpus) / double(s.base_gpus);
    return ideal > 0 ? tok / ideal : 0.0;
  };
  if (pts.size() == 1) {
    s.kind = "single";
    const Point& p = c.points[pts.front()];
    s.efficiency = {{1.0, eff(p.tok_s.lo, p.gpus), eff(p.tok_s.hi, p.gpus)}};
    return s;
  }
  bool same_per_gpu = true, same_global = true;
  for (size_t pi : pts) {
    const RunSummary& r = c.runs[c.points[pi].runs.front()];
    // Tokens per GPU per step: compare exactly as integers (gbt * base_gpus).
    if (r.global_batch_tokens * base.gpus != base.global_batch_tokens * r.gpus)
      same_per_gpu = false;
    if (r.global_batch_tokens != base.global_batch_tokens) same_global = false;
  }
  if (same_per_gpu && !same_global)
    s.kind = "weak";
  else if (same_global)
    s.kind = "strong";
  else {
    std::string msg = "scaling series of " + s.model + " (" + s.layout +
                      ") holds neither the per-GPU batch nor the global batch fixed:\n";
    for (size_t pi : pts)
      for (size_t i : c.points[pi].runs)
        msg += "  " + c.runs[i].dir + ": " + std::to_string(c.runs[i].gpus) + " GPUs, " +
               std::to_string(c.runs[i].global_batch_tokens) + " global batch tokens\n";
    throw UsageError(msg +
                     "weak scaling needs tokens per GPU fixed, strong scaling the global batch");
  }
  for (size_t pi : pts) {
    const Point& p = c.points[pi];
    s.efficiency.push_back(
        {eff(p.tok_s.med, p.gpus), eff(p.tok_s.lo, p.gpus), eff(p.tok_s.hi, p.gpus)});
  }
  return s;
}

// One peak per CPU campaign: the median of the peaks the smallest size's
// runs measured, applied to every run.
void campaign_peak(Campaign& c, double peak_override) {
  if (peak_override > 0) return;
  bool all_cpu = true;
  for (const auto& r : c.runs) all_cpu = all_cpu && r.device.rfind("cpu", 0) == 0;
  if (!all_cpu) return;
  int smallest = c.runs.front().gpus;
  for (const auto& r : c.runs) smallest = std::min(smallest, r.gpus);
  std::vector<double> peaks;
  std::string from;
  for (const auto& r : c.runs)
    if (r.gpus == smallest && r.peak > 0) {
      peaks.push_back(r.peak);
      if (peaks.size() <= 3) from += (from.empty() ? "" : ", ") + run_name(r.dir);
    }
  if (peaks.size() > 3) from += " and " + std::to_string(peaks.size() - 3) + " more";
  if (peaks.empty()) return;
  c.campaign_peak = median(peaks);
  std::ostringstream os;
  os.precision(4);
  os << "one peak for the campaign: " << c.campaign_peak / 1e9
     << " GFLOP/s per rank, the median measured by the smallest size's run(s) (" << from
     << "), used for every run";
  c.campaign_peak_source = os.str();
  for (auto& r : c.runs) repeak(r, c.campaign_peak, c.campaign_peak_source);
}

}  // namespace

Campaign build_campaign(std::vector<RunSummary> runs, bool group_by_model, double peak_override) {
  Campaign c;
  ST_USAGE_CHECK(!runs.empty(), "campaign: no run folders given");
  c.runs = std::move(runs);
  campaign_peak(c, peak_override);
  std::map<std::string, std::vector<size_t>> models;
  std::vector<std::string> order;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    std::string k = model_key(c.runs[i]);
    if (!models.count(k)) order.push_back(k);
    models[k].push_back(i);
  }
  if (models.size() > 1 && !group_by_model) {
    std::string msg = "campaign: refusing to mix models in one weak-scaling series:\n";
    for (auto& k : order)
      msg +=
          "  " + k + ": " + c.runs[models[k].front()].dir +
          (models[k].size() > 1 ? " and " + std::to_string(models[k].size() - 1) + " more" : "") +
          "\n";
    throw UsageError(
        msg + "give one model's runs per campaign, or --group-by-model for one series per model");
  }
  // Points: repeats of one model, layout and size, in first-seen order.
  std::map<std::string, size_t> point_of;
  std::vector<std::vector<size_t>> point_runs;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const std::string k = point_key(c.runs[i]);
    auto [it, fresh] = point_of.try_emplace(k, point_runs.size());
    if (fresh) point_runs.emplace_back();
    point_runs[it->second].push_back(i);
  }
  for (const auto& pr : point_runs) c.points.push_back(make_point(c.runs, pr));
  for (const auto& p : c.points) {
    const RepeatCheck& q = p.repeats;
    if (q.verdict == "one run" || q.verdict == "agree") continue;
    std::ostringstream w;
    w << p.layout << ", " << p.gpus << " ranks: its " << p.runs.size() << " repeats' steps are "
      << percent_text(q.step_spread) << " apart (more than " << percent_text(kRepeatTolerance)
      << "); ";
    if (!q.cpu_recorded)
      w << "the runs recorded no cpu_s, so whether the host's speed moved is not known";
    else
      w << "the slower one's work cost " << percent_text(q.cpu_change, true) << " CPU time a step "
        << (q.verdict == "host speed moved"
                ? "against the faster one's: the host's speed moved between them"
                : "against the faster one's: not the host's CPU speed alone");
    c.warnings.push_back(w.str());
  }
  // Series: the points of one model and layout, one point per size; two
  // points of one layout at one size (a different grad_accum or batch) each
  // stand alone.
  std::map<std::string, std::vector<size_t>> series_pts;
  std::vector<std::string> series_order;
  for (size_t pi = 0; pi < c.points.size(); ++pi) {
    const RunSummary& r = c.runs[c.points[pi].runs.front()];
    const std::string k = model_key(r) + " | " + c.points[pi].layout;
    if (!series_pts.count(k)) series_order.push_back(k);
    series_pts[k].push_back(pi);
  }
  // Layouts (without their checkpoint setting) that some point runs without
  // checkpoints: their checkpointed variants are the checkpoint study's.
  std::set<std::string> has_plain;
  for (const auto& p : c.points) {
    const RunSummary& r = c.runs[p.runs.front()];
    if (r.ckpt_interval == 0 && r.ckpt_load_s == 0)
      has_plain.insert(model_key(r) + base_layout_text(r));
  }
  for (const auto& k : series_order) {
    const auto& pts = series_pts[k];
    const RunSummary& r0 = c.runs[c.points[pts.front()].runs.front()];
    const bool variant = (r0.ckpt_interval > 0 || r0.ckpt_load_s > 0) &&
                         has_plain.count(model_key(r0) + base_layout_text(r0));
    const size_t first = c.series.size();
    std::map<int, int> at;
    for (size_t pi : pts) ++at[c.points[pi].gpus];
    bool clash = false;
    for (auto& [g, n] : at) clash = clash || n > 1;
    if (clash) {
      c.warnings.push_back(k + ": several configurations at one size; each is its own point, " +
                           "no scaling series is built");
      for (size_t pi : pts) c.series.push_back(make_series(c, {pi}));
    } else {
      c.series.push_back(make_series(c, pts));
    }
    for (size_t si = first; si < c.series.size(); ++si) c.series[si].ckpt_variant = variant;
  }
  return c;
}

std::vector<const Series*> scaling_series(const Campaign& c) {
  std::vector<const Series*> out;
  for (const auto& s : c.series)
    if (!s.ckpt_variant) out.push_back(&s);
  return out;
}

}  // namespace st::analysis
