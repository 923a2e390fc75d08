// scaletrain-plan command line (see cli.hpp and docs/planner.md): its
// sub-commands and their options on the shared parser (lib/cli).
#include "planner/cli.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>

#include "cli/subcommands.hpp"
#include "config/layout_tools.hpp"
#include "core/error.hpp"
#include "core/util.hpp"
#include "plan/cluster.hpp"
#include "plan/space.hpp"
#include "planner/calibrate.hpp"
#include "planner/compare.hpp"
#include "planner/gpu_rates.hpp"
#include "planner/mpt_fit.hpp"
#include "planner/published.hpp"
#include "planner/report.hpp"
#include "scaletrain/build_config.hpp"

namespace fs = std::filesystem;

namespace st::plan {
namespace {

const char* kFooter =
    "environment: SCALETRAIN_MPIEXEC (launcher for the probe, default mpiexec),\n"
    "  SCALETRAIN_PLAN_PROBE (probe binary, default next to scaletrain-plan), SCALETRAIN_GNUPLOT\n"
    "exit codes: 0 ok, 1 internal error, 2 bad input, 3 no layout predicted to fit (plan.md "
    "lists the nearest)\n";

template <typename T>
std::vector<T> parse_list(const std::string& flag, const std::string& v) {
  std::vector<T> out;
  for (const std::string& s : split(v, ',')) {
    try {
      size_t pos = 0;
      const double d = std::stod(s, &pos);
      if (pos != s.size()) throw std::invalid_argument(s);
      if constexpr (std::is_integral_v<T>) {
        if (d != double(int64_t(d)) || d < 0) throw std::invalid_argument(s);
      }
      if (d < 0) throw std::invalid_argument(s);
      out.push_back(T(d));
    } catch (const std::logic_error&) {
      throw UsageError(flag + ": '" + s + "' in '" + v + "' is not a " +
                       (std::is_integral_v<T> ? "non-negative integer" : "non-negative number") +
                       " (give a comma-separated list, e.g. " + flag + " 1,2,4)");
    }
  }
  if (out.empty()) throw UsageError(flag + ": empty list");
  return out;
}

struct Args {
  std::string config, cluster, out,
      name = "cpu-local", campaign_name, benchmarks, models, placement, clusters_dir, add_to,
      bench = "scaletrain-bench-gemm", nccl_intra, nccl_inter, attn_bench, profile, mem_bench;
  std::vector<std::string> sets;
  KnobRanges r;
  int top = 10, near = 2, campaign_steps = 20, devices_per_node = 0;
  bool plots = true, attn_blocks = false;
  double op_seconds = 0.05, coll_seconds = 0.2;
  std::vector<long> sizes;
  std::vector<int> weak;
  long global_batch = 0;
  double weak_batch = 0;  // --weak-batch (0: micro_batch x grad_accum)
};

std::string fx_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Option values: each parses, checks and stores its text, naming the flag
// when it refuses it.
using Check = std::function<void(const std::string&)>;
// A list of counts >= 1 (or >= 0 with `lo` 0).
Check counts(const char* flag, std::vector<int>* dst, int lo = 1) {
  return [=](const std::string& v) {
    *dst = parse_list<int>(flag, v);
    for (int x : *dst)
      if (x < lo) throw UsageError(std::string(flag) + ": counts must be >= " + std::to_string(lo));
  };
}
template <typename T>
Check one_int(const char* flag, T* dst, long lo) {
  return [=](const std::string& v) {
    const auto l = parse_list<long>(flag, v);
    if (l.size() != 1 || l[0] < lo)
      throw UsageError(std::string(flag) + ": expected one integer >= " + std::to_string(lo) +
                       ", got '" + v + "'");
    *dst = T(l[0]);
  };
}
Check seconds(const char* flag, double* dst, const char* what = "seconds") {
  return [=](const std::string& v) {
    const auto l = parse_list<double>(flag, v);
    if (l.size() != 1 || l[0] <= 0)
      throw UsageError(std::string(flag) + ": expected one positive number of " + what + ", got '" +
                       v + "'");
    *dst = l[0];
  };
}
Check sp_list(std::vector<int>* dst) {
  return [=](const std::string& v) {
    dst->clear();
    for (const auto& s : split(v, ',')) {
      if (s == "0" || s == "off" || s == "false")
        dst->push_back(0);
      else if (s == "1" || s == "on" || s == "true")
        dst->push_back(1);
      else
        throw UsageError("--sp: '" + s + "' is not one of 0, 1 (off, on)");
    }
  };
}
Check zero_list(std::vector<int>* dst) {
  return [=](const std::string& v) {
    *dst = parse_list<int>("--zero", v);
    for (int z : *dst)
      if (z > 3) throw UsageError("--zero: " + std::to_string(z) + " is not one of 0,1,2,3");
  };
}
Check bucket_list(std::vector<double>* dst) {
  return [=](const std::string& v) {
    *dst = parse_list<double>("--bucket-mb", v);
    for (double b : *dst)
      if (b <= 0) throw UsageError("--bucket-mb: sizes must be > 0");
  };
}
Check placement_word(std::string* dst) {
  return [=](const std::string& v) {
    if (v != "block" && v != "cyclic")
      throw UsageError("--placement: '" + v + "' is not one of block, cyclic");
    *dst = v;
  };
}
Check sizes_list(std::vector<long>* dst) {
  return [=](const std::string& v) { *dst = parse_list<long>("--sizes", v); };
}
Check split_list(std::vector<std::string>* dst) {
  return [=](const std::string& v) {
    *dst = split(v, ',');
    for (const auto& s : *dst)
      if (s != "even" && s != "ends" && s != "config")
        throw UsageError("--pipeline-split: '" + s + "' is not one of even, ends, config");
  };
}
Check act_ckpt_list(std::vector<std::string>* dst) {
  return [=](const std::string& v) {
    *dst = split(v, ',');
    for (const auto& s : *dst)
      if (s != "none" && s != "selective" && s != "full")
        throw UsageError("--act-ckpt: '" + s + "' is not one of none, selective, full");
  };
}

// The model and the --set keys; `checked`: with the trainer's cross-field
// rules. A plan loads unchecked: its knobs (--grad-accum, --pp, ...) apply
// to every layout first, and each layout is then validated once
// (enumerate_layouts), so a --set that only the knobs make valid is no error.
Config base_config(const Args& a, bool checked) {
  std::string cfg = a.config;
  if (cfg.empty()) cfg = std::string(SCALETRAIN_SOURCE_DIR) + "/configs/default.yaml";
  // The planner reads no data, so no data key may refuse a plan (a
  // vocabulary beyond a uint16 token file's, a file that is not here).
  std::vector<std::string> sets = a.sets;
  sets.push_back("data.source=synthetic");
  return checked ? load_config(cfg, sets) : load_config_unchecked(cfg, sets);
}

// Knob ranges: the flags, else the config's own values.
KnobRanges ranges_from(const Args& a, const Config& base, const std::vector<int>& devices) {
  KnobRanges r = default_ranges(base, devices);
  r.dp = a.r.dp, r.tp = a.r.tp, r.pp = a.r.pp, r.cp = a.r.cp;
  if (!a.r.sp.empty()) r.sp = a.r.sp;
  if (!a.r.zero_stage.empty()) r.zero_stage = a.r.zero_stage;
  if (!a.r.num_model_chunks.empty()) r.num_model_chunks = a.r.num_model_chunks;
  if (!a.r.micro_batch.empty()) r.micro_batch = a.r.micro_batch;
  if (!a.r.grad_accum.empty()) r.grad_accum = a.r.grad_accum;
  if (!a.r.dp_bucket_mb.empty()) r.dp_bucket_mb = a.r.dp_bucket_mb;
  if (!a.r.act_ckpt.empty()) r.act_ckpt = a.r.act_ckpt;
  if (!a.r.pipeline_split.empty()) r.pipeline_split = a.r.pipeline_split;
  r.global_batch = a.global_batch;
  return r;
}

// Knobs first, then the rules once: when the trainer's config rules refuse
// every layout the --set config and the knobs make, the plan is bad input,
// and the first refusal names the key and what is valid.
void require_a_valid_layout(const std::vector<Candidate>& cands) {
  if (cands.empty()) return;
  for (const Candidate& c : cands)
    if (c.reason.empty() || c.timed) return;
  const std::string& why = cands.front().reason;
  const auto colon = why.find(": ");
  throw UsageError("the config rules refuse every one of the " + std::to_string(cands.size()) +
                   " layouts of --set and the knobs; the first (" + cands.front().name() +
                   "): " + (colon == std::string::npos ? why : why.substr(colon + 2)));
}

std::string joined(const std::vector<std::string>& args) {
  std::string s = "scaletrain-plan";
  for (const auto& x : args) s += " " + (x.find(' ') == std::string::npos ? x : "'" + x + "'");
  return s;
}

int run_plan(const Args& a, const std::vector<std::string>& argv, std::ostream& out) {
  if (a.cluster.empty()) throw UsageError("plan: give --cluster FILE (configs/clusters/*.yaml)");
  if (a.r.devices.empty() && a.weak.empty())
    throw UsageError("plan: give --devices N[,N...] (or --weak-scaling N,...)");
  Cluster cl = load_cluster(a.cluster);
  if (!a.profile.empty()) cl = with_profile(cl, a.profile);
  if (a.devices_per_node > 0) cl.devices_per_node = a.devices_per_node;
  if (!a.placement.empty()) cl.placement = a.placement;
  const Config base = base_config(a, false);
  ReportOptions o;
  o.top = a.top;
  o.near = a.near;
  o.plots = a.plots;
  o.campaign_name = a.campaign_name;
  o.campaign_steps = a.campaign_steps;
  o.command = joined(argv);
  o.out_dir = !a.out.empty() ? a.out
                             : "results/plans/plan-" + base.model.name + "-" + cl.name + "-" +
                                   timestamp_compact();
  std::vector<Candidate> cands;
  if (!a.r.devices.empty()) {
    cands = plan_space(base, ranges_from(a, base, a.r.devices), cl);
    require_a_valid_layout(cands);
  }
  if (!a.weak.empty()) {
    // Weak scaling: a fixed batch per device, --weak-batch sequences (a
    // fraction where one sequence spans model-parallel ranks), else the base
    // (or first given) micro_batch x grad_accum.
    const KnobRanges r0 = ranges_from(a, base, {});
    const double per_device =
        a.weak_batch > 0 ? a.weak_batch : double(r0.micro_batch.front()) * r0.grad_accum.front();
    std::vector<Candidate> weak;
    for (int n : a.weak) {
      const double g = per_device * n;
      if (g < 1 || g != std::floor(g))
        throw UsageError("--weak-scaling " + std::to_string(n) + ": a batch of " +
                         fx_text(per_device) + " sequences per device makes " + fx_text(g) +
                         " sequences; give sizes (or --weak-batch) whose product is a whole "
                         "number >= 1");
      KnobRanges r = ranges_from(a, base, {n});
      r.global_batch = long(g);
      auto c = plan_space(base, r, cl);
      require_a_valid_layout(c);
      weak.insert(weak.end(), c.begin(), c.end());
    }
    ReportOptions wo = o;
    write_weak_scaling(weak, a.weak, cl, wo, out);
    if (cands.empty()) return 0;
  }
  // Nothing fits: the plan is written (with the nearest layouts), and the
  // status says so.
  return write_plan(cands, base, cl, o, out) > 0 ? 0 : 3;
}

int run_calibrate(const Args& a, const std::vector<std::string>& argv, std::ostream& out) {
  CalibrateOptions o;
  o.base = base_config(a, true);
  std::vector<int> ranks = a.r.devices.empty() ? std::vector<int>{1, 2, 4} : a.r.devices;
  o.ranges = ranges_from(a, o.base, ranks);
  o.out = a.out;
  o.name = a.name;
  o.op_seconds = a.op_seconds;
  o.coll_seconds = a.coll_seconds;
  if (!a.sizes.empty()) o.sizes = a.sizes;
  o.command = joined(argv);
  o.add_to = a.add_to;
  return calibrate(o, out);
}

int run_calibrate_gpu(const Args& a, const std::vector<std::string>& argv, std::ostream& out) {
  if (a.cluster.empty() || a.out.empty())
    throw UsageError("calibrate-gpu: give --cluster BASE.yaml (a kind: gpu file) and --out FILE");
  if (a.attn_blocks && a.attn_bench.empty())
    throw UsageError("calibrate-gpu: --attn-blocks needs --attn-bench PATH");
  // With a model (--config / --set), its step's own GEMM shapes too.
  std::vector<GemmShape> model;
  if (!a.config.empty() || !a.sets.empty())
    model = model_gemm_shapes(base_config(a, true), default_gemm_shapes());
  calibrate_gpu(a.cluster, a.out, a.bench, joined(argv), out, a.nccl_intra, a.nccl_inter,
                a.attn_bench, a.mem_bench, a.attn_blocks, model);
  return 0;
}

int run_compare(const Args& a, const std::vector<std::string>& dirs, std::ostream& out) {
  if (a.cluster.empty()) throw UsageError("compare: give --cluster FILE");
  Cluster cl = load_cluster(a.cluster);
  if (!a.profile.empty()) cl = with_profile(cl, a.profile);
  const auto rows = compare_runs(dirs, cl);
  const std::string dir =
      !a.out.empty() ? a.out : (fs::path(dirs[0]).parent_path() / "compare").string();
  write_compare(rows, cl, dir, out);
  out << "written: " << dir << "/compare.md, compare.csv, compare.json\n";
  return 0;
}

// `published` and `mpt-fit`: the reference tables in the source tree unless given.
int run_reference(const std::string& cmd, const Args& a, std::ostream& out) {
  const std::string src = SCALETRAIN_SOURCE_DIR;
  const std::string cdir = !a.clusters_dir.empty() ? a.clusters_dir : src + "/configs/clusters";
  const std::string ref = src + "/analysis/reference/";
  const std::string profile = a.profile.empty() ? kPublishedProfile : a.profile;
  if (cmd == "published") {
    const auto rows =
        read_published(!a.benchmarks.empty() ? a.benchmarks : ref + "torchtitan_llama3.csv",
                       !a.models.empty() ? a.models : ref + "torchtitan_llama3_models.csv");
    write_published(predict_published(rows, cdir, profile), out);
    return 0;
  }
  const auto rows = read_mpt_rows(!a.benchmarks.empty() ? a.benchmarks : ref + "mpt_benchmarks.csv",
                                  !a.models.empty() ? a.models : ref + "mpt_models.csv");
  const auto groups = mpt_fit(rows,
                              {{"h100_80gb", cdir + "/h100-sxm-80gb.yaml"},
                               {"a100_80gb", cdir + "/a100-sxm-80gb.yaml"},
                               {"a100_40gb", cdir + "/a100-sxm-40gb.yaml"}},
                              profile);
  write_mpt_fit(groups, a.out, out);
  return 0;
}

// The option groups of calibrate-gpu, compare and the reference commands
// (mpt-fit, published), stored into an Args.
struct ToolOptions {
  cli::po::options_description gpu{"calibrate-gpu options"}, compare{"options"},
      ref{"reference tables (default: analysis/reference/)"}, fit{"options"};
};
void tool_options(Args& a, ToolOptions& t) {
  // clang-format off
  t.gpu.add_options()
      ("cluster", cli::text(&a.cluster, "BASE.yaml"), "the kind: gpu cluster file to start from")
      ("out", cli::text(&a.out, "FILE.yaml"), "cluster file to write")
      ("bench", cli::text(&a.bench, "PATH"), "GEMM benchmark (default scaletrain-bench-gemm on PATH)")
      ("attn-bench", cli::text(&a.attn_bench, "PATH"),
       "measure rates.attention with it (scaletrain-bench-attention)")
      ("attn-blocks", cli::flag(&a.attn_blocks, true),
       "also the ring-attention blocks (--block): `full` rows at the chunk length")
      ("mem-bench", cli::text(&a.mem_bench, "PATH"),
       "measure rates.memory and rates.launch_us with it (scaletrain-bench-memory)")
      ("nccl-intra", cli::text(&a.nccl_intra, "CMD"),
       "nccl-tests command inside one node (e.g. 'all_reduce_perf -b 1M -e 8G -f 2 -g 8'): "
       "its busbw rows become rates.busbw_intra")
      ("nccl-inter", cli::text(&a.nccl_inter, "CMD"),
       "the same across nodes (an mpirun of it): rates.busbw_inter");
  t.compare.add_options()
      ("cluster", cli::text(&a.cluster, "FILE"), "cluster file the plan used")
      ("profile", cli::text(&a.profile, "NAME"),
       "price by the cluster file's fitted profile NAME instead of its pricing")
      ("out", cli::text(&a.out, "DIR"), "output folder (default <first RUN_DIR's parent>/compare)");
  t.ref.add_options()
      ("benchmarks", cli::text(&a.benchmarks, "CSV"), "published benchmark rows")
      ("models", cli::text(&a.models, "CSV"), "their models")
      ("clusters", cli::text(&a.clusters_dir, "DIR"), "cluster files (default configs/clusters)")
      ("profile", cli::text(&a.profile, "NAME"),
       "the fitted profile a rates-priced cluster file is priced by (default mpt-fit)");
  t.fit.add_options()
      ("out", cli::text(&a.out, "DIR"), "output folder");
  // clang-format on
}

// The option groups of plan and calibrate (the model, the knobs, plan's
// outputs, calibrate's), stored into an Args.
struct PlanOptions {
  cli::po::options_description model{"model (as the trainer takes it)"},
      knobs{"knobs (comma-separated lists; a knob left out keeps the config's value)"},
      plan{"plan outputs"}, calibrate{"calibrate options"};
};

// The model (--config, --set) and the knob ranges, each list checked as it is stored.
void model_and_knob_options(Args& a, PlanOptions& p) {
  using cli::checked;
  using cli::text;
  // clang-format off
  p.model.add_options()
      ("config", text(&a.config, "F.yaml"),
       "run config or model preset file (default: configs/default.yaml)")
      ("set", cli::po::value(&a.sets)->composing()->value_name("section.key=value"),
       "any config key, repeatable (e.g. model.preset=llama-7b)");
  p.knobs.add_options()
      ("devices", checked("N,...", counts("--devices", &a.r.devices)),
       "devices (ranks) to plan for; calibrate: rank counts to measure")
      ("dp", checked("N,...", counts("--dp", &a.r.dp)),
       "data-parallel sizes (default: every power of two dividing the device count)")
      ("tp", checked("N,...", counts("--tp", &a.r.tp)), "tensor-parallel sizes (likewise)")
      ("pp", checked("N,...", counts("--pp", &a.r.pp)), "pipeline-parallel sizes (likewise)")
      ("cp", checked("N,...", counts("--cp", &a.r.cp)), "context-parallel sizes (likewise)")
      ("sp", checked("0,1", sp_list(&a.r.sp)), "sequence parallelism (tried with tp > 1 only)")
      ("zero", checked("0,1,2,3", zero_list(&a.r.zero_stage)), "ZeRO stages")
      ("chunks", checked("1,2", counts("--chunks", &a.r.num_model_chunks)),
       "model chunks per pipeline stage (interleaved when > 1)")
      ("micro-batch", checked("B,...", counts("--micro-batch", &a.r.micro_batch)),
       "sequences per micro-batch")
      ("grad-accum", checked("M,...", counts("--grad-accum", &a.r.grad_accum)),
       "micro-batches per step")
      ("global-batch", checked("G", one_int("--global-batch", &a.global_batch, 1)),
       "fix the global batch (sequences): grad_accum = G / (dp * micro_batch)")
      ("bucket-mb", checked("X,...", bucket_list(&a.r.dp_bucket_mb)),
       "gradient bucket sizes (MiB)")
      ("act-ckpt", checked("none,selective,full", act_ckpt_list(&a.r.act_ckpt)),
       "activation checkpointing")
      ("pipeline-split", checked("even,ends,config", split_list(&a.r.pipeline_split)),
       "layers per pipeline chunk (pp > 1): even; ends = first and last chunk one layer "
       "fewer for the embedding and the head (e.g. 7,8*14,7); config = "
       "parallel.pipeline_layers as set (default: config when it is set, else even,ends)");
  // clang-format on
}

// plan's outputs: the cluster and its pricing, the ranking, the campaign,
// the weak-scaling projection and the plots.
void plan_output_options(Args& a, PlanOptions& p) {
  using cli::checked;
  using cli::flag;
  using cli::text;
  // clang-format off
  p.plan.add_options()
      ("cluster", text(&a.cluster, "FILE"), "cluster file (configs/clusters/*.yaml)")
      ("profile", text(&a.profile, "NAME"),
       "price by the cluster file's fitted profile NAME (profiles:, e.g. mpt-fit) instead of "
       "its pricing: another framework's runs, not our trainer's")
      ("devices-per-node", checked("N", one_int("--devices-per-node", &a.devices_per_node, 1)),
       "override the cluster file's devices per node")
      ("placement", checked("block|cyclic", placement_word(&a.placement)),
       "override the cluster file's rank placement: block (devices-per-node consecutive "
       "ranks a node) or cyclic (round robin over the nodes, srun --distribution=cyclic)")
      ("top", checked("K", one_int("--top", &a.top, 1)),
       "layouts in the table and the campaign (default 10)")
      ("near", checked("K", one_int("--near", &a.near, 0)),
       "predicted-infeasible layouts nearest the limit added to the campaign (default 2)")
      ("out", text(&a.out, "DIR"),
       "output folder (default results/plans/plan-<model>-<cluster>-<UTC time>)")
      ("campaign-name", text(&a.campaign_name, "NAME"),
       "name in campaign.yaml (default plan-<model>-<devices>)")
      ("campaign-steps", checked("N", one_int("--campaign-steps", &a.campaign_steps, 1)),
       "steps per campaign job (default 20)")
      ("weak-scaling", checked("N,...", counts("--weak-scaling", &a.weak)),
       "also project weak scaling over these sizes at the per-device batch "
       "micro_batch x grad_accum (weak_scaling.md/.csv/.json/.svg)")
      ("weak-batch", checked("S", seconds("--weak-batch", &a.weak_batch, "sequences")),
       "weak scaling's sequences per device per step, a fraction allowed (0.125 at seq "
       "8192: 1024 tokens per device; default micro_batch x grad_accum)")
      ("no-plots", flag(&a.plots, false), "tables only");
  // clang-format on
}

// calibrate's: the file to write, its name, the timing budgets, the
// collectives' sizes and --add-to.
void calibrate_options(Args& a, PlanOptions& p) {
  using cli::checked;
  using cli::text;
  // clang-format off
  p.calibrate.add_options()
      ("out", text(&a.out, "FILE.yaml"),
       "cluster file to write (e.g. configs/clusters/cpu-local.yaml)")
      ("name", text(&a.name, "NAME"), "cluster name (default cpu-local)")
      ("op-seconds", checked("S", seconds("--op-seconds", &a.op_seconds)),
       "timing budget per kernel call shape (default 0.05)")
      ("coll-seconds", checked("S", seconds("--coll-seconds", &a.coll_seconds)),
       "timing budget per collective and size (default 0.2)")
      ("sizes", checked("B,...", sizes_list(&a.sizes)),
       "collective message sizes in bytes (default 4K,64K,1M,4M,16M)")
      ("add-to", text(&a.add_to, "FILE.yaml"),
       "time only the kernel calls FILE lacks (another model's shapes), keep its "
       "collectives; write the union to --out");
  // clang-format on
}

}  // namespace

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return cli::guarded("scaletrain-plan", err, [&] {
    Args a;
    // The option groups and the sub-commands: an option is one entry of its
    // group (its value checked as it is stored), a sub-command one add().
    PlanOptions o;
    model_and_knob_options(a, o);
    plan_output_options(a, o);
    calibrate_options(a, o);
    ToolOptions tools;
    tool_options(a, tools);

    cli::Program p("scaletrain-plan", kFooter);
    // clang-format off
    p.add({"plan", "", "every layout of the knob ranges: feasible or not, memory, step time",
           0, 0, {&o.plan, &o.model, &o.knobs},
           [&](const auto&) { return run_plan(a, args, out); }});
    p.add({"calibrate", "", "measure this machine's kernels and collectives into a cluster file",
           0, 0, {&o.calibrate, &o.model, &o.knobs},
           [&](const auto&) { return run_calibrate(a, args, out); }});
    p.add({"compare", "RUN_DIR...", "predicted against measured runs",
           1, cli::kMany, {&tools.compare},
           [&](const auto& dirs) { return run_compare(a, dirs, out); }});
    p.add({"mpt-fit", "", "the planner against the published MPT tables",
           0, 0, {&tools.ref, &tools.fit},
           [&](const auto&) { return run_reference("mpt-fit", a, out); }});
    p.add({"published", "", "the planner against torchtitan's published Llama 3 rows",
           0, 0, {&tools.ref},
           [&](const auto&) { return run_reference("published", a, out); }});
    p.add({"calibrate-gpu", "", "a GPU cluster file from the GEMM benchmark and nccl-tests",
           0, 0, {&tools.gpu, &o.model},
           [&](const auto&) { return run_calibrate_gpu(a, args, out); }});
    // clang-format on
    p.default_command("plan");
    return p.main(args, out, err);
  });
}

}  // namespace st::plan
