// Per-run analysis: the steady-state window, throughput, MFU/HFU, memory,
// communication share, checkpoint overhead (two ways) and stragglers, computed
// from a run folder loaded by the telemetry reader. Pure computation: the
// writers (report.hpp) and plots (plots.hpp) take a RunSummary.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analyze/ckpt_cost.hpp"
#include "telemetry/reader.hpp"

namespace st::analysis {

struct WindowSpec {
  enum class Kind { BackHalf, LastK, Range } kind = Kind::BackHalf;
  int64_t k = 0;                // LastK
  int64_t first = 0, last = 0;  // Range (step numbers, inclusive)
  int64_t warmup = 1;           // steps dropped first (BackHalf and LastK)
  bool warmup_set = false;      // --warmup given: more than the run holds is refused
};
// Parses "back-half", "last:K", "range:A:B"; throws UsageError naming the value.
WindowSpec parse_window(const std::string& text, int64_t warmup);

enum class FlopsFormula { Mpt, SixN12LHQT };

struct Options {
  WindowSpec window;
  FlopsFormula formula = FlopsFormula::Mpt;
  double peak_override = 0;  // --peak-flops (FLOP/s per device); 0 = none
  int ckpt_k = 12;           // steps after a checkpoint for the step-time-excess method
  double share_tol = 0.05;   // minimum absolute share deviation flagged as out of line
  bool allow_bad_ranks = false;
};

struct RankStat {
  int rank = 0;
  std::string host;
  double step_med = 0, busy_med = 0;  // busy = step_s - comm_exposed_s
  double busy_min = 0, busy_p25 = 0, busy_p75 = 0, busy_max = 0;
  StepParts part_share{};  // median over the window's steps, by StepPart
  double dist = 0;         // (busy_med - median over ranks) / median over ranks
  std::vector<std::pair<int64_t, double>> busy_steps;  // (window step, busy s): the heat map
};
struct HostStat {
  std::string host;
  std::vector<int> ranks;
  double busy = 0;  // its slowest rank's busy_med
  double dist = 0;
};
struct OutOfLine {
  int rank;
  std::string what;  // the StepPart's name
  double share, median_share;
};

struct StepRow {  // one global step (over all analysed ranks)
  int64_t step;
  double step_max, step_med, stall_max;
  int64_t global_tokens;
  bool in_window, ckpt;
};

struct RunSummary {
  std::string dir, name, model, device, precision, act_ckpt, sharding;
  std::string precision_choice;  // why train.precision=auto chose (empty when set)
  int gpus = 0, seq_len = 0, micro_batch = 0, grad_accum = 0;
  int64_t n_params = 0, global_batch = 0, global_batch_tokens = 0;
  int n_layers = 0, d_model = 0, n_heads = 0;
  // layout (what makes two runs repeats of one point, campaign.hpp)
  int dp = 1, tp = 1, pp = 1, cp = 1, zero_stage = 0, nodes = 1;
  int ckpt_interval = 0;  // config checkpoint.interval (0: off)
  std::string ckpt_mode;  // config checkpoint.mode when checkpoints are on
  // window
  std::string window_text;
  int64_t win_first = 0, win_last = 0, win_n = 0, steps_total = 0;
  // throughput
  double step_p50 = 0, step_p90 = 0, step_max = 0, tokens_per_step = 0;
  double tok_s = 0, tok_s_gpu = 0, seq_s = 0;
  std::vector<double> step_s_window;  // global step time of every window step (spreads)
  // What a step's work cost the ranks in CPU time (telemetry cpu_s): the
  // median over the window's steps of the median over ranks; 0 when the
  // records have none. Between repeats of one point the work is the same, so
  // a change of it is the host's speed moving (campaign.hpp, Repeat).
  double cpu_s_step = 0;
  // utilization
  std::string formula, peak_source;
  double peak = 0, model_flops_per_seq = 0, hw_flops_per_seq = 0;
  double mfu = 0, hfu = 0, model_tflops_gpu = 0;  // mfu/hfu in percent
  // memory and shares (window, all ranks)
  int64_t mem_peak_bytes = 0;
  // what the device's memory is measured against (run.json
  // device.memory_capacity_bytes; -1: not recorded)
  int64_t mem_capacity_bytes = -1;
  std::string mem_capacity_source;
  // The step's parts (core/step_parts.hpp: data, compute, optimizer, comm,
  // ckpt_stall, other) as shares of the window's step time, all ranks; they
  // add up to 1. The comm part (exposed communication: comm_exposed_s plus
  // the tp/cp waits inside the forward and backward) by CommPart from the
  // step records' comm_wait_s: tp and cp as measured, comm_exposed_s over
  // pp/dp/zero/other in proportion to their waits; what no wait explains
  // (records without comm_wait_s, GPU streams) is comm_unattributed_share.
  // The CommParts and the unattributed share add up to the comm part.
  // comm_share: the time inside collectives, hidden or not (not a part).
  StepParts part_share{};
  double comm_share = 0;
  std::array<double, kCommParts> comm_part_share{};  // by CommPart
  double comm_unattributed_share = 0;
  // checkpoints
  std::vector<int64_t> ckpt_steps;
  double total_step_s = 0;
  double ckpt_stall_sum = 0, ckpt_overhead_instr = 0;  // fraction
  std::string ckpt_instr_source;
  double ckpt_excess_sum = 0, ckpt_overhead_excess = 0;  // fraction
  std::vector<double> ckpt_excess;                       // per checkpoint
  double ckpt_write_s_mean = 0, ckpt_bytes_mean = 0, ckpt_bw_mean = 0;
  // in three parts (ckpt_cost.hpp): per checkpoint, and summed as shares
  // of total_step_s (persistence: seconds, it overlaps training)
  std::vector<CkptCost> ckpt_cost;
  double ckpt_stall_share = 0, ckpt_interference_s = 0, ckpt_interference_share = 0;
  double ckpt_persist_s = 0;
  // the restore at start (the ckpt_resume event; 0 when the run did not resume):
  // the load, and the whole restore (the step's choice and its metadata check,
  // then the load; load_s for a trainer that did not record restore_s), the
  // slowest rank's; and the checkpoint's tensor bytes
  double ckpt_load_s = 0, ckpt_restore_s = 0, ckpt_restore_bytes = 0;
  // The node's write bandwidth per commit (rank 0's ckpt_commit
  // node_write_Bps, median) and its share of the probed disk (of_disk);
  // run.json `storage` (the trainer's storage probe), absent when not probed.
  double ckpt_node_Bps = 0, ckpt_of_disk = 0;
  nlohmann::json storage;
  // every rank's bytes of one checkpoint, and over the slowest rank's write time
  double ckpt_agg_bytes = 0, ckpt_agg_bw = 0;
  // stragglers
  std::vector<RankStat> ranks;
  std::vector<HostStat> hosts;
  double rank_step_skew = 0, rank_busy_skew = 0, host_busy_skew = 0;  // (max-min)/median
  std::vector<int> slowest_ranks;  // by busy_med, descending, up to 5
  std::vector<int> slowest_hosts;  // indices into hosts, up to 3
  std::vector<OutOfLine> out_of_line;
  // Seconds the others waited at collectives for each rank and host to
  // arrive last, over the window (the trace records' per-collective last
  // arrival, trace.hpp); empty when the run recorded no traces.
  std::map<int, double> waited_for_rank;
  std::map<std::string, double> waited_for_host;
  std::vector<int> flagged_ranks;  // excluded (errors) with --allow-bad-ranks
  std::vector<StepRow> steps;
  // (step, loss): training (finite values of the first analysed rank) and the
  // validation split's `eval` events.
  std::vector<std::pair<int64_t, double>> loss, val_loss;
  std::vector<std::string> warnings, errors;
};

// Throws UsageError listing every problem when the run has errors (unless
// opt.allow_bad_ranks, which excludes flagged ranks and reports them).
RunSummary summarize_run(const telemetry::RunTelemetry& run, const Options& opt);

// A short model label: the preset name, else "<n_params/1e9>B-L<n_layers>-d<d_model>".
std::string model_label(const telemetry::RunInfo& ri);

}  // namespace st::analysis
