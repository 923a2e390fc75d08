// scaletrain-analyze command line (see cli.hpp and docs/analysis.md).
#include "analyze/cli.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>

#include "analyze/campaign.hpp"
#include "analyze/ckpt_study.hpp"
#include "analyze/report.hpp"
#include "analyze/trace.hpp"
#include "core/error.hpp"

namespace st::analysis {
namespace {

const char* kUsage =
    "usage:\n"
    "  scaletrain-analyze run DIR [options]\n"
    "  scaletrain-analyze campaign DIR... [options] [--group-by-model]\n"
    "  scaletrain-analyze mpt BENCHMARKS_CSV MODELS_CSV [--out DIR]\n"
    "  scaletrain-analyze trace DIR [--steps A..B] [--out DIR]   (all ranks on one timeline)\n"
    "  scaletrain-analyze hang DIR     (which collective a hung job waited in, for whom)\n"
    "options:\n"
    "  --out DIR              output folder (default: DIR/analysis for run,\n"
    "                         <first DIR's parent>/analysis for campaign)\n"
    "  --warmup N             steps dropped before the window (default 1)\n"
    "  --window W             back-half (default) | last:K | range:FIRST:LAST\n"
    "  --flops-formula F      mpt (default) | 6n12lhqt\n"
    "  --peak-flops X         peak FLOP/s per device (overrides table and run.json)\n"
    "  --ckpt-k K             steps after a checkpoint for the step-time excess (default 12)\n"
    "  --allow-bad-ranks      analyse the other ranks when some rank files are bad\n"
    "  --group-by-model       campaign: one scaling series per model instead of refusing\n"
    "  --mtbf LIST            campaign: mean times between failures for the optimal\n"
    "                         checkpoint interval, e.g. 6h,24h,7d (default 6h,24h,7d)\n"
    "  --no-plots             write tables only\n"
    "exit codes: 0 ok, 1 internal error, 2 bad input\n";

double parse_num(const std::string& flag, const std::string& v) {
  try {
    size_t pos;
    double d = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(d)) return d;
  } catch (const std::logic_error&) {
  }
  throw UsageError(flag + ": not a finite number: '" + v + "'");
}

}  // namespace

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help") {
      (args.empty() ? err : out) << kUsage;
      return args.empty() ? 2 : 0;
    }
    const std::string cmd = args[0];
    if (cmd == "trace") return trace_cli(args, out, err);
    if (cmd == "hang") return hang_cli(args, out, err);
    std::vector<std::string> pos;
    Options opt;
    std::string out_dir, window = "back-half";
    int64_t warmup = 1;
    bool plots = true, group = false, warmup_set = false;
    std::vector<double> mtbf;
    for (size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= args.size()) throw UsageError(a + ": needs a value");
        return args[++i];
      };
      if (a == "--out")
        out_dir = val();
      else if (a == "--warmup") {
        double w = parse_num(a, val());
        if (w < 0 || w > 1e15 || w != double(int64_t(w)))
          throw UsageError("--warmup: must be an integer >= 0");
        warmup = int64_t(w);
        warmup_set = true;
      } else if (a == "--window")
        window = val();
      else if (a == "--flops-formula") {
        std::string f = val();
        if (f == "mpt")
          opt.formula = FlopsFormula::Mpt;
        else if (f == "6n12lhqt")
          opt.formula = FlopsFormula::SixN12LHQT;
        else
          throw UsageError("--flops-formula: invalid value '" + f + "' (valid: mpt, 6n12lhqt)");
      } else if (a == "--peak-flops") {
        opt.peak_override = parse_num(a, val());
        if (opt.peak_override <= 0) throw UsageError("--peak-flops: must be positive");
      } else if (a == "--ckpt-k") {
        const double k = parse_num(a, val());
        if (k < 0 || k > 1e9 || k != double(int64_t(k)))
          throw UsageError("--ckpt-k: must be an integer in [0, 1000000000]");
        opt.ckpt_k = int(k);
      } else if (a == "--allow-bad-ranks")
        opt.allow_bad_ranks = true;
      else if (a == "--group-by-model")
        group = true;
      else if (a == "--mtbf")
        mtbf = parse_mtbf_list(val());
      else if (a == "--no-plots")
        plots = false;
      else if (a.rfind("--", 0) == 0)
        throw UsageError("unknown option '" + a + "'\n" + kUsage);
      else
        pos.push_back(a);
    }
    opt.window = parse_window(window, warmup);
    opt.window.warmup_set = warmup_set;

    if (cmd == "mpt") {
      if (pos.size() != 2)
        throw UsageError(std::string("mpt: needs BENCHMARKS_CSV MODELS_CSV\n") + kUsage);
      if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
      double wm, wh;
      return mpt_check(pos[0], pos[1], out_dir, out, wm, wh);
    }
    if (cmd != "run" && cmd != "campaign")
      throw UsageError("unknown command '" + cmd + "'\n" + kUsage);
    if (pos.empty() || (cmd == "run" && pos.size() != 1))
      throw UsageError(cmd + ": needs " + (cmd == "run" ? "one run folder" : "run folders") + "\n" +
                       kUsage);
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
      w = write_run_outputs(runs[0], out_dir, plots);
      const auto& s = runs[0];
      out << "window: " << s.window_text << "\n"
          << "tok/s " << s.tok_s << ", tok/s/GPU " << s.tok_s_gpu << ", MFU " << s.mfu << "%, HFU "
          << s.hfu << "% (peak: " << s.peak_source << ")\n";
    } else {
      Campaign c = build_campaign(std::move(runs), group, opt.peak_override);
      if (!mtbf.empty()) c.mtbf_s = mtbf;
      // The storage's own limit, measured by finish.sbatch beside runs/.
      {
        auto run0 = std::filesystem::path(pos[0]).lexically_normal();
        if (run0.filename().empty()) run0 = run0.parent_path();
        c.storage_json = (run0.parent_path().parent_path() / "storage.json").string();
      }
      if (out_dir.empty()) {
        auto parent = std::filesystem::path(pos[0]).lexically_normal().parent_path();
        if (std::filesystem::path(pos[0]).filename().empty()) parent = parent.parent_path();
        out_dir = (parent.empty() ? std::filesystem::path(".") : parent).string() + "/analysis";
      }
      w = write_campaign_outputs(c, out_dir, plots);
      for (auto& x : c.warnings) err << "warning: " << x << "\n";
      for (auto& s : c.series) {
        out << s.model << ", " << s.layout << " (" << s.kind
            << (s.kind == "single" ? "" : " scaling") << ", base " << s.base_gpus << " ranks):";
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
            << x.mtbf_s << " s, C " << x.cost_s << " s -> Young " << x.young_s << " s, Daly "
            << x.daly_s << " s, " << x.steps << " steps\n";
    }
    out << "wrote " << out_dir << "/report.md";
    for (auto& f : w.files) out << " " << f;
    out << "\n";
    for (auto& s : w.skipped_plots) err << "skipped plot " << s << "\n";
    return 0;
  } catch (const UsageError& e) {
    err << "scaletrain-analyze: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "scaletrain-analyze: internal error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace st::analysis
