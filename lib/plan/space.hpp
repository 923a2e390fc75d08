// The layout space scaletrain-plan searches: every combination of the knob
// ranges for a device count, each checked by the trainer's own config rules
// (divisibility, unsupported combinations: the same messages the trainer
// would print), then recorded (the trainer's engine on the recording
// backend): its peak against the cluster's device memory less the reserve,
// and its replay on the cluster's prices for the step time. Ranked by predicted tokens/s,
// feasible layouts first.
#pragma once
#include <string>
#include <vector>

#include "config/config.hpp"
#include "plan/cluster.hpp"
#include "plan/memory.hpp"
#include "plan/time_model.hpp"

namespace st::plan {

struct KnobRanges {
  std::vector<int> devices;         // world sizes to plan for
  std::vector<int> dp, tp, pp, cp;  // empty: every power of two dividing the world size
  std::vector<int> sp;              // 0/1; sp=1 is tried only with tp > 1
  std::vector<int> zero_stage, num_model_chunks, micro_batch, grad_accum;
  std::vector<double> dp_bucket_mb;
  std::vector<std::string> act_ckpt;
  // How the layers split over the pipeline's model chunks (pp > 1), each one
  // a parallel.pipeline_layers value: "even" (the key unset: n_layers /
  // (pp * chunks) each), "ends" (pipeline_split_ends: the first and the last
  // chunk one layer fewer, for the embedding and the head), "config" (the
  // base config's own parallel.pipeline_layers). Empty: the base's own
  // ("config" when it sets the key, else "even").
  std::vector<std::string> pipeline_split;
  // > 0: the global batch in sequences is fixed; grad_accum = global / (dp *
  // micro_batch) (grad_accum's range is then ignored).
  long global_batch = 0;
};
// The ranges from the base config's own values where a knob is not given
// (pipeline_split: "config" when the base sets parallel.pipeline_layers, else
// both "even" and "ends").
KnobRanges default_ranges(const Config& base, const std::vector<int>& devices);

struct Candidate {
  Config cfg;  // the layout (parallel.*, train.micro_batch/grad_accum/act_ckpt set)
  int devices = 0;
  std::string split = "even";  // KnobRanges::pipeline_split entry (cfg.parallel.pipeline_layers)
  bool feasible = false;
  std::string reason;    // why not: "divisibility: ...", "memory: ...", "unsupported: ..."
  MemoryEstimate mem;    // worst stage (when the layout is valid)
  double available = 0;  // device bytes the model may use (memory - reserved)
  StepPrediction time;   // when valid
  bool timed = false;
  // Why the config rules refuse the layout on the cluster's device
  // (runtime.device=cuda, bf16) though they accept it on CPU ranks; "" when
  // they accept it (today every valid layout: what a device runs is its
  // backend's answer at run time, lib/backend).
  std::string not_runnable;
  // e.g. "dp4-tp2-pp1-cp1-z1-mb2-ga4-b25-none"; "-ends" after the pp part
  // for that split ("dp1-tp8-pp16-ends-cp1-sp-...").
  std::string name() const;
  // The layers of each model chunk as parallel.pipeline_layers text
  // ("7,8*14,7"; "8*16" for the even split), "" when the split is invalid.
  std::string chunk_layers() const;
  double margin() const { return available - mem.peak.total(); }
};

// Every layout of the ranges with its validity (the trainer's rules; `device`
// cpu or cuda for what this build's trainer runs there); not yet sized.
std::vector<Candidate> enumerate_layouts(const Config& base, const KnobRanges& r,
                                         const std::string& device);
// Sizes (memory) and times every valid candidate on the cluster, then ranks:
// feasible by tokens/s (descending), then those over memory by how far over
// (nearest first), then the invalid ones.
void evaluate(std::vector<Candidate>& cands, const Cluster& cl);
// Both.
std::vector<Candidate> plan_space(const Config& base, const KnobRanges& r, const Cluster& cl);

}  // namespace st::plan
