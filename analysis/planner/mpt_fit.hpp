// Validation of the step-time model on published GPU tables: the MosaicML
// MPT benchmark rows (analysis/reference/mpt_benchmarks.csv: FSDP full
// shard = ZeRO 3 over every GPU, bf16 or fp8, activation checkpointing on or
// off, 8 to 512 GPUs). Per GPU type (and fp8 as its own type) three
// constants of the cluster file are fitted on half of the rows, the rows at
// even positions of the type's rows in file order: efficiency.gemm,
// efficiency.attention and efficiency.network. The other half (odd
// positions) is predicted with them; the mean absolute percentage error of
// tokens/s per GPU is reported for single-node (8 GPUs) and multi-node rows
// separately. Everything else comes from the type's cluster file
// (configs/clusters/) and the model shapes (analysis/reference/mpt_models.csv).
#pragma once
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"
#include "plan/time_model.hpp"

namespace st::plan {

struct MptRow {
  int line = 0;  // in the benchmarks CSV
  std::string table, model, gpu, precision, mp_mode;
  int seq_len = 0, gpus = 0, micro_batch = 0, grad_accum = 0, n_layers = 0, d_model = 0;
  bool act_ckpt = false;
  double tok_s_gpu = 0, mfu = 0;
};
// Reads both CSVs; UsageError names file:line and column on bad input.
std::vector<MptRow> read_mpt_rows(const std::string& benchmarks_csv, const std::string& models_csv);
// The planner's config for a row: the MPT shape as a Llama-style model with the
// same GEMM FLOPs (SwiGLU ffn 8d/3 for MPT's 4d GELU MLP, head dim 128,
// vocabulary 50368), ZeRO 3 over all GPUs with one bucket per block (FSDP's
// wrapping), the row's batch and checkpointing.
Config mpt_config(const MptRow& r);

struct MptGroup {
  std::string name;         // "h100_80gb", "h100_80gb fp8", "a100_80gb", "a100_40gb"
  Cluster cluster;          // with the fitted efficiencies
  double c[3] = {0, 0, 0};  // gemm, attention, network
  std::vector<const MptRow*> fit, holdout;
  std::map<const MptRow*, double> pred;  // tokens/s per GPU
  std::map<const MptRow*, StepPrediction> parts;
  // tokens/s per GPU from the cluster file's hardware `rates` alone, before
  // any fit (empty when the file has none, and for fp8)
  std::map<const MptRow*, double> rates_pred;
  double mape(const std::vector<const MptRow*>& rows,
              int single) const;  // single: 1 one node, 0 many, -1 all
  double mape_of(const std::map<const MptRow*, double>& p, const std::vector<const MptRow*>& rows,
                 int single) const;
};

// Fits every group; `clusters` maps a GPU key to its cluster file, whose
// fitted `profile` (fitted_pricing) supplies what the fit holds fixed
// (memory fraction, kernel overhead, network_intra).
std::vector<MptGroup> mpt_fit(const std::vector<MptRow>& rows,
                              const std::map<std::string, std::string>& clusters,
                              const std::string& profile = kPublishedProfile);

// Writes mpt_fit.md / .csv / .json into out_dir (when not empty) and prints the table.
void write_mpt_fit(const std::vector<MptGroup>& groups, const std::string& out_dir,
                   std::ostream& out);

// Minimises f over x > 0 (Nelder-Mead in log space); returns the best x.
std::vector<double> minimise_positive(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x0, int iterations);

}  // namespace st::plan
