// The checkpoint-overhead study of a campaign (slurm/campaigns/ckpt_overhead.sh):
// overhead against interval per mode and size, aggregate write bandwidth
// against ranks beside the storage's own sequential-write limit, restore
// time per size, and the interval that minimises lost work plus overhead for
// a mean time between failures (Young 1974, Daly 2006). docs/analysis.md
// states the formula and its assumptions.
#pragma once
#include <string>
#include <vector>

#include "analyze/campaign.hpp"

namespace st::analysis {

// Young's first-order optimum: sqrt(2 C M) for a checkpoint cost C and MTBF M
// (seconds).
double young_interval(double cost_s, double mtbf_s);
// Daly's higher-order optimum: sqrt(2CM) (1 + sqrt(C/2M)/3 + C/(18M)) - C when
// C < 2M, else M.
double daly_interval(double cost_s, double mtbf_s);
// Expected fraction of time lost at interval T: C/T (checkpointing) plus
// (T/2 + P + R)/M (the work since the last persisted checkpoint, the
// persistence window P that a failure can also cost, and the restart R).
double expected_waste(double interval_s, double cost_s, double persist_s, double restore_s,
                      double mtbf_s);

// The checkpoints a point needs per run after its first for a steady-state C.
inline constexpr int kMinSteadyCheckpoints = 4;

struct CkptPoint {   // one (size, mode, interval) point of the study
  size_t point = 0;  // index into Campaign::points
  int gpus = 0, interval = 0;
  std::string mode;
  Spread overhead;  // (stall + interference) / step time of the run, over repeats
  Spread stall_share, interference_share;
  // Per checkpoint (ckpt_cost.hpp): C = stall + interference, P = first
  // snapshot to last commit. cost_s and persist_s are the medians over the
  // steady-state checkpoints (each run's checkpoints after its first) of
  // every repeat; the first checkpoint of a run is reported apart (median
  // over repeats), so C does not depend on how many checkpoints a run took.
  double cost_s = 0, persist_s = 0;
  double first_cost_s = 0, first_persist_s = 0;
  std::vector<double> steady_cost_s, steady_persist_s, first_costs_s;  // pooled by the optimum
  int steady_n = 0;        // steady checkpoints behind cost_s, over repeats
  int steady_min_run = 0;  // the fewest in one repeat
  double agg_bw = 0;       // aggregate write bandwidth (B/s), median over repeats
  double of_disk = 0;      // the node's write bandwidth / its run's storage probe, median; 0: none
  double node_Bps = 0;     // the node's write bandwidth (rank 0's commits), median; 0: none
  double probed_write_Bps = 0;  // run.json storage.write_all_Bps (the node's writers), median
  double bytes = 0;             // every rank's bytes of one checkpoint
  double step_s = 0;            // median step time
};
struct OptimalInterval {
  int gpus = 0;
  std::string mode;
  // cost_s, persist_s: medians over the steady-state checkpoints of every
  // interval and repeat of this size and mode; first_cost_s: the first
  // checkpoint's cost (median over runs), not part of C.
  double mtbf_s = 0, cost_s = 0, persist_s = 0, restore_s = 0, step_s = 0;
  double first_cost_s = 0;
  int steady_n = 0;
  double young_s = 0, daly_s = 0, interval_s = 0;  // interval_s: max(daly, persist)
  double steps = 0, waste = 0;                     // at interval_s
};
struct StorageLimit {
  bool measured = false;
  double bytes = 0, seconds = 0, bandwidth = 0;
  std::string path, method;
};
// The restore's bandwidth per size: the checkpoint's bytes over the median
// restore time (choice, metadata check and load; the slowest rank), per
// node, beside the cold read the storage probe measured for that size's
// node (run.json storage.read_all_Bps, median over the size's runs).
struct RestoreRate {
  int gpus = 0, nodes = 1;
  double bytes = 0, restore_s = 0, node_Bps = 0, probed_read_Bps = 0;
};
struct CkptStudy {
  std::vector<CkptPoint> points;
  std::vector<std::pair<int, Spread>> restore_s;  // (ranks, load time over resumed runs)
  std::vector<RestoreRate> restore_rate;
  std::vector<OptimalInterval> optimal;
  StorageLimit storage;
  // Points whose runs took fewer than kMinSteadyCheckpoints steady
  // checkpoints (C from few or, with none, from the first checkpoint), in words.
  std::vector<std::string> notes;
  bool empty() const { return points.empty(); }
};

// The study from a campaign's points; mtbf_s: the MTBFs to answer for.
// storage_json: the campaign's storage.json ("" or missing: not measured).
CkptStudy checkpoint_study(const Campaign& c, const std::vector<double>& mtbf_s,
                           const std::string& storage_json);

// "3600", "90m", "24h", "7d" -> seconds; throws UsageError naming the value.
std::vector<double> parse_mtbf_list(const std::string& text);

}  // namespace st::analysis
