// Campaign analysis (see campaign.hpp). A series is weak scaling when every
// run holds the same tokens per GPU per step, strong scaling when every run
// holds the same global batch; otherwise it is refused, never averaged.
#include "analyze/campaign.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/error.hpp"

namespace st::analysis {
namespace {

std::string model_key(const RunSummary& r) {
  std::ostringstream os;
  os << r.model << " (N=" << r.n_params << ", L=" << r.n_layers << ", d=" << r.d_model
     << ", heads=" << r.n_heads << ", seq_len=" << r.seq_len << ")";
  return os.str();
}

Series make_series(const std::vector<RunSummary>& runs, std::vector<size_t> idx) {
  Series s;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return runs[a].gpus < runs[b].gpus; });
  s.runs = idx;
  s.model = runs[idx.front()].model;
  const RunSummary& base = runs[idx.front()];
  s.base_gpus = base.gpus;
  if (idx.size() == 1) {
    s.kind = "single";
    s.efficiency = {1.0};
    return s;
  }
  bool same_per_gpu = true, same_global = true;
  for (size_t i : idx) {
    const RunSummary& r = runs[i];
    // Tokens per GPU per step: compare exactly as integers (gbt * base_gpus).
    if (r.global_batch_tokens * base.gpus != base.global_batch_tokens * r.gpus)
      same_per_gpu = false;
    if (r.global_batch_tokens != base.global_batch_tokens) same_global = false;
  }
  bool all_same_gpus = runs[idx.front()].gpus == runs[idx.back()].gpus;
  if (same_per_gpu && !(same_global && all_same_gpus))
    s.kind = "weak";
  else if (same_global)
    s.kind = "strong";
  else {
    std::string msg = "scaling series of " + s.model +
                      " holds neither the per-GPU batch nor the global batch fixed:\n";
    for (size_t i : idx)
      msg += "  " + runs[i].dir + ": " + std::to_string(runs[i].gpus) + " GPUs, " +
             std::to_string(runs[i].global_batch_tokens) + " global batch tokens\n";
    throw UsageError(msg +
                     "weak scaling needs tokens per GPU fixed, strong scaling the global batch");
  }
  for (size_t i : idx) {
    const RunSummary& r = runs[i];
    const double ideal = base.tok_s * double(r.gpus) / double(base.gpus);
    s.efficiency.push_back(ideal > 0 ? r.tok_s / ideal : 0.0);
  }
  return s;
}

}  // namespace

Campaign build_campaign(std::vector<RunSummary> runs, bool group_by_model) {
  Campaign c;
  ST_USAGE_CHECK(!runs.empty(), "campaign: no run folders given");
  c.runs = std::move(runs);
  std::map<std::string, std::vector<size_t>> groups;
  std::vector<std::string> order;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    std::string k = model_key(c.runs[i]);
    if (!groups.count(k)) order.push_back(k);
    groups[k].push_back(i);
  }
  if (groups.size() > 1 && !group_by_model) {
    std::string msg = "campaign: refusing to mix models in one weak-scaling series:\n";
    for (auto& k : order)
      msg +=
          "  " + k + ": " + c.runs[groups[k].front()].dir +
          (groups[k].size() > 1 ? " and " + std::to_string(groups[k].size() - 1) + " more" : "") +
          "\n";
    throw UsageError(
        msg + "give one model's runs per campaign, or --group-by-model for one series per model");
  }
  for (auto& k : order) {
    auto& idx = groups[k];
    std::map<int, int> n_at;
    for (size_t i : idx) ++n_at[c.runs[i].gpus];
    for (auto& [g, cnt] : n_at)
      if (cnt > 1)
        c.warnings.push_back(k + ": " + std::to_string(cnt) + " runs at " + std::to_string(g) +
                             " GPUs; each gets its own row, the first is the base if smallest");
    c.series.push_back(make_series(c.runs, idx));
  }
  return c;
}

}  // namespace st::analysis
