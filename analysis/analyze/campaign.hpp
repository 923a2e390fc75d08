// Campaign analysis. Runs with the same model, layout and size are repeats
// of one point (median and spread over the repeats and over their
// steady-state steps); a scaling series is built over the points of one
// model and layout at different sizes, never over repeats.
#pragma once
#include <string>
#include <vector>

#include "analyze/run_summary.hpp"

namespace st::analysis {

// A value over repeats: median, min and max.
struct Spread {
  double med = 0, lo = 0, hi = 0;
};

// Repeats of one point against each other. Their work is the same, so when
// the slower repeat's work also cost more CPU time a step (telemetry cpu_s:
// the host's clock, steal time a guest cannot see, other tenants in its
// caches), the host's speed moved between them rather than the layout's
// timing. A repeat agrees within kRepeatTolerance of the fastest.
inline constexpr double kRepeatTolerance = 0.10;
struct RepeatCheck {
  double step_spread = 0;     // slowest / fastest repeat's median step - 1
  double cpu_change = 0;      // the slowest's CPU-s a step / the fastest's - 1
  bool cpu_recorded = false;  // both have cpu_s
  // "agree", "host speed moved" (the CPU cost moved by at least half the
  // step's spread, the same way), "not the host's CPU speed", or "one run"
  std::string verdict = "one run";
};
// The check of a point's runs (indices into runs).
RepeatCheck check_repeats(const std::vector<RunSummary>& runs, const std::vector<size_t>& idx);
// A fraction as a percentage with one decimal: 0.137 -> "13.7%", signed
// "+13.7%" (the repeats' warnings and report.md's Repeats table).
std::string percent_text(double x, bool sign = false);

struct Point {
  std::string key;           // model, layout and size (what repeats share)
  std::string layout;        // the layout in words (tp/pp/cp, ZeRO, act ckpt, micro-batch, ckpt)
  int gpus = 0, nodes = 1;   // ranks / devices and hosts
  std::vector<size_t> runs;  // indices into Campaign::runs (the repeats)
  Spread tok_s, tok_s_gpu, mfu, hfu, step_s;  // over repeats (each run's window median)
  Spread cpu_s_step;                          // over repeats (RunSummary::cpu_s_step)
  RepeatCheck repeats;
  // p10 / p90 of tokens/s per device over the steady-state steps of every repeat
  double tok_s_gpu_p10 = 0, tok_s_gpu_p90 = 0;
  double mfu_p10 = 0, mfu_p90 = 0;  // the same for MFU (percent)
  // the planner's prediction from the runs' run.json (0 when absent): tok/s per device, MFU %
  double pred_tok_s_gpu = 0, pred_mfu = 0;
  std::string pred_cluster;  // the cluster file those predictions priced with (run.json)
  // The median step by StepPart (seconds: each repeat's median step at its
  // window's shares, medians over repeats scaled to add up to step_s.med).
  StepParts part_s{};
  // The comm part by CommPart and what no wait explains; they add up to it.
  std::array<double, kCommParts> comm_part_s{};
  double comm_unattributed_s = 0;
  int64_t mem_peak_bytes = 0;       // max over repeats
  int64_t mem_capacity_bytes = -1;  // min over repeats that recorded it (-1: none did)
};

struct Series {
  std::string model, layout;
  std::string kind;  // "weak" (per-GPU batch fixed), "strong" (global batch fixed), "single"
  // A checkpoint study's variant (its runs checkpoint or resume, and the
  // campaign holds the same layout without checkpoints): its points belong
  // to the checkpoint study (ckpt_study.hpp), the scaling reports and plots
  // show the series without checkpoints instead.
  bool ckpt_variant = false;
  int base_gpus = 0;
  std::vector<size_t> points;      // indices into Campaign::points, ascending size
  std::vector<Spread> efficiency;  // same order: tok/s(N) / (tok/s(base) * N/base), medians;
                                   // lo/hi from the repeats' min/max against the base median
};

struct Campaign {
  std::vector<RunSummary> runs;
  std::vector<Point> points;
  std::vector<Series> series;
  // One peak for every run of a CPU campaign (each run measures its own, and
  // the measurement drops as more ranks share a node): the median of the
  // peaks measured by the smallest point's runs, unless --peak-flops.
  double campaign_peak = 0;
  std::string campaign_peak_source;  // "" when each run keeps its own (GPU table peaks)
  std::vector<std::string> warnings;
  // The checkpoint study's inputs (ckpt_study.hpp): the MTBFs to answer for
  // (--mtbf) and the storage's sequential-write measurement (storage.json).
  std::vector<double> mtbf_s = {6 * 3600.0, 24 * 3600.0, 7 * 86400.0};
  std::string storage_json;
};

// The series a report shows as scaling series: every one but the
// checkpoint study's variants.
std::vector<const Series*> scaling_series(const Campaign& c);

// Builds points and scaling series. Without group_by_model, runs of different
// models are refused (UsageError naming the runs). peak_override > 0 is the
// --peak-flops given (then no campaign peak is chosen).
Campaign build_campaign(std::vector<RunSummary> runs, bool group_by_model,
                        double peak_override = 0);

}  // namespace st::analysis
