// scaletrain-analyze command line (see cli.hpp and docs/analysis.md): its
// sub-commands and their options on the shared parser (lib/cli).
#include "analyze/cli.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>

#include "analyze/campaign.hpp"
#include "analyze/ckpt_study.hpp"
#include "analyze/report.hpp"
#include "analyze/trace.hpp"
#include "cli/subcommands.hpp"
#include "core/error.hpp"

namespace st::analysis {
namespace {

double parse_num(const std::string& flag, const std::string& v) {
  try {
    size_t pos;
    double d = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(d)) return d;
  } catch (const std::logic_error&) {
  }
  throw UsageError(flag + ": not a finite number: '" + v + "'");
}

// Where every option lands; the option groups below bind to it.
struct Args {
  Options opt;
  std::string out_dir, window = "back-half", steps, tensorboard;
  int64_t warmup = 1;
  bool warmup_set = false, plots = true, group = false;
  std::vector<double> mtbf;  // --mtbf (empty: the campaign's default)
};

// Value checks: each parses its option's text, refuses it naming the option,
// and stores it.
using Check = std::function<void(const std::string&)>;
Check warmup_into(Args& a) {
  return [&a](const std::string& v) {
    const double w = parse_num("--warmup", v);
    if (w < 0 || w > 1e15 || w != double(int64_t(w)))
      throw UsageError("--warmup: must be an integer >= 0");
    a.warmup = int64_t(w), a.warmup_set = true;
  };
}
Check formula_into(FlopsFormula& f) {
  return [&f](const std::string& v) {
    if (v == "mpt")
      f = FlopsFormula::Mpt;
    else if (v == "6n12lhqt")
      f = FlopsFormula::SixN12LHQT;
    else
      throw UsageError("--flops-formula: invalid value '" + v + "' (valid: mpt, 6n12lhqt)");
  };
}
Check peak_into(double& x) {
  return [&x](const std::string& v) {
    x = parse_num("--peak-flops", v);
    if (x <= 0) throw UsageError("--peak-flops: must be positive");
  };
}
Check ckpt_k_into(int& k) {
  return [&k](const std::string& v) {
    const double d = parse_num("--ckpt-k", v);
    if (d < 0 || d > 1e9 || d != double(int64_t(d)))
      throw UsageError("--ckpt-k: must be an integer in [0, 1000000000]");
    k = int(d);
  };
}

Check mtbf_into(std::vector<double>& m) {
  return [&m](const std::string& v) { m = parse_mtbf_list(v); };
}

// `run DIR` and `campaign DIR...`.
int report(const std::string& cmd, const std::vector<std::string>& pos, Args& a, std::ostream& out,
           std::ostream& err) {
  Options opt = a.opt;
  opt.window = parse_window(a.window, a.warmup);
  opt.window.warmup_set = a.warmup_set;
  std::string out_dir = a.out_dir;
  std::vector<RunSummary> runs;
  for (auto& d : pos) {
    if (!std::filesystem::is_directory(d)) throw UsageError(d + ": not a folder");
    // The run report's straggler section reads the trace records too.
    auto tel = telemetry::read_run(d, 0, cmd == "run");
    for (auto& w : tel.warnings) err << "warning: " << w << "\n";
    runs.push_back(summarize_run(tel, opt));
    for (auto& e : runs.back().errors) err << "error (rank excluded): " << e << "\n";
  }
  Written w;
  if (cmd == "run") {
    if (out_dir.empty()) out_dir = pos[0] + "/analysis";
    w = write_run_outputs(runs[0], out_dir, a.plots);
    const auto& s = runs[0];
    out << "window: " << s.window_text << "\n"
        << "tok/s " << s.tok_s << ", tok/s/GPU " << s.tok_s_gpu << ", MFU " << s.mfu << "%, HFU "
        << s.hfu << "% (peak: " << s.peak_source << ")\n";
  } else {
    Campaign c = build_campaign(std::move(runs), a.group, opt.peak_override);
    if (!a.mtbf.empty()) c.mtbf_s = a.mtbf;
    {  // The storage's own limit, measured by finish.sbatch beside runs/.
      auto run0 = std::filesystem::path(pos[0]).lexically_normal();
      if (run0.filename().empty()) run0 = run0.parent_path();
      c.storage_json = (run0.parent_path().parent_path() / "storage.json").string();
    }
    if (out_dir.empty()) {
      auto parent = std::filesystem::path(pos[0]).lexically_normal().parent_path();
      if (std::filesystem::path(pos[0]).filename().empty()) parent = parent.parent_path();
      out_dir = (parent.empty() ? std::filesystem::path(".") : parent).string() + "/analysis";
    }
    w = write_campaign_outputs(c, out_dir, a.plots);
    for (auto& x : c.warnings) err << "warning: " << x << "\n";
    size_t variants = 0;
    for (const auto& s : c.series) variants += s.ckpt_variant ? 1 : 0;
    if (variants > 0)
      out << variants << " checkpointed variant(s) of a layout: in the checkpoint study\n";
    for (const Series* sp : scaling_series(c)) {
      const Series& s = *sp;
      out << s.model << ", " << s.layout << " (" << s.kind << (s.kind == "single" ? "" : " scaling")
          << ", base " << s.base_gpus << " ranks):";
      for (size_t k = 0; k < s.points.size(); ++k) {
        const Point& p = c.points[s.points[k]];
        out << " " << p.gpus << "->" << s.efficiency[k].med;
        if (p.runs.size() > 1)
          out << " [" << s.efficiency[k].lo << ", " << s.efficiency[k].hi << "; " << p.runs.size()
              << " repeats]";
      }
      out << "\n";
    }
    const CkptStudy st = checkpoint_study(c, c.mtbf_s, c.storage_json);
    for (const auto& x : st.optimal)
      out << "optimal checkpoint interval (" << x.gpus << " ranks, " << x.mode << "): MTBF "
          << x.mtbf_s << " s, C " << x.cost_s << " s (median of " << x.steady_n
          << " steady checkpoints; first checkpoint stall " << x.first_cost_s
          << " s, not in C) -> Young " << x.young_s << " s, Daly " << x.daly_s << " s, " << x.steps
          << " steps\n";
    for (const auto& n : st.notes) err << "note: " << n << "\n";
  }
  out << "wrote " << out_dir << "/report.md";
  for (auto& f : w.files) out << " " << f;
  out << "\n";
  for (auto& s : w.skipped_plots) err << "skipped plot " << s << "\n";
  return 0;
}

int mpt(const std::vector<std::string>& csvs, const std::string& out_dir, std::ostream& out) {
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  double worst_mfu, worst_hfu;
  return mpt_check(csvs[0], csvs[1], out_dir, out, worst_mfu, worst_hfu);
}

}  // namespace

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  using cli::checked;
  using cli::flag;
  using cli::text;
  return cli::guarded("scaletrain-analyze", err, [&] {
    Args a;
    // The option groups and the sub-commands: an option is one entry of its
    // group (its value checked as it is stored), a sub-command one add().
    // clang-format off
    cli::po::options_description report_o("options");
    report_o.add_options()
        ("out", text(&a.out_dir, "DIR"),
         "output folder (default: DIR/analysis for run, <first DIR's parent>/analysis for "
         "campaign)")
        ("warmup", checked("N", warmup_into(a)),
         "steps dropped before the window (default: the run's train.warmup_steps_excluded)")
        ("window", text(&a.window, "W"), "back-half (default) | last:K | range:FIRST:LAST")
        ("flops-formula", checked("F", formula_into(a.opt.formula)), "mpt (default) | 6n12lhqt")
        ("peak-flops", checked("X", peak_into(a.opt.peak_override)),
         "peak FLOP/s per device (overrides the table and run.json)")
        ("ckpt-k", checked("K", ckpt_k_into(a.opt.ckpt_k)),
         "steps after a checkpoint for the step-time excess (default 12)")
        ("allow-bad-ranks", flag(&a.opt.allow_bad_ranks),
         "analyse the other ranks when some rank files are bad")
        ("no-plots", flag(&a.plots, false), "write tables only");
    cli::po::options_description campaign_o("campaign options");
    campaign_o.add_options()
        ("group-by-model", flag(&a.group),
         "one scaling series per model instead of refusing a mixed campaign")
        ("mtbf", checked("LIST", mtbf_into(a.mtbf)),
         "mean times between failures for the optimal checkpoint interval, e.g. 6h,24h,7d "
         "(default 6h,24h,7d)");
    cli::po::options_description mpt_o("options");
    mpt_o.add_options()
        ("out", text(&a.out_dir, "DIR"), "output folder for the comparison");
    cli::po::options_description trace_o("options");
    trace_o.add_options()
        ("steps", text(&a.steps, "A..B"), "steps to draw (either side may be empty; default all)")
        ("out", text(&a.out_dir, "DIR"), "output folder (default DIR/analysis)");

    cli::po::options_description export_o("options");
    export_o.add_options()
        ("tensorboard", text(&a.tensorboard, "OUT"),
         "write TensorBoard event files, one sub-folder of OUT per run (required)");

    cli::Program p("scaletrain-analyze", "exit codes: 0 ok, 1 internal error, 2 bad input\n");
    p.add({"run", "DIR", "one run's report (throughput, MFU/HFU, parts, stragglers, checkpoints)",
           1, 1, {&report_o},
           [&](const auto& pos) { return report("run", pos, a, out, err); }});
    p.add({"campaign", "DIR...", "runs side by side: scaling efficiency, one report",
           1, cli::kMany, {&report_o, &campaign_o},
           [&](const auto& pos) { return report("campaign", pos, a, out, err); }});
    p.add({"mpt", "BENCHMARKS_CSV MODELS_CSV", "MFU/HFU of the published MPT rows, recomputed",
           2, 2, {&mpt_o},
           [&](const auto& pos) { return mpt(pos, a.out_dir, out); }});
    p.add({"trace", "DIR", "all ranks on one timeline (trace.json, step.svg, waits)",
           1, 1, {&trace_o},
           [&](const auto& pos) { return trace_cli(pos[0], a.out_dir, a.steps, out, err); }});
    p.add({"hang", "DIR", "which collective a hung job waited in, and for whom",
           1, 1, {},
           [&](const auto& pos) { return hang_cli(pos[0], out); }});
    p.add({"export", "RUN...", "TensorBoard event files of finished runs or campaigns",
           1, cli::kMany, {&export_o},
           [&](const auto& pos) { return export_cli(pos, a.tensorboard, out); }});
    // clang-format on
    return p.main(args, out, err);
  });
}

}  // namespace st::analysis
