// Plot definitions and rendering (see plots.hpp).
#include "analyze/plots.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/util.hpp"

namespace st::analysis {
namespace {
std::string svg_head(const Plot& p) {
  return "set terminal svg size 900,500 dynamic font 'sans,11'\nset output '" + p.name +
         ".svg'\nset title '" + p.title + "'\nset grid\n";
}
}  // namespace

std::vector<Plot> run_plots(const RunSummary& s) {
  std::vector<Plot> out;
  Plot t{"step_timeline", "Step time (slowest rank); checkpoint steps marked; window shaded", "",
         ""};
  std::ostringstream d;
  d << "# step step_max_s step_median_s ckpt_stall_s in_window ckpt\n";
  for (auto& r : s.steps)
    d << r.step << ' ' << r.step_max << ' ' << r.step_med << ' ' << r.stall_max << ' '
      << (r.in_window ? 1 : 0) << ' ' << (r.ckpt ? 1 : 0) << '\n';
  t.data = d.str();
  std::ostringstream sc;
  sc << "set xlabel 'step'\nset ylabel 'seconds'\nset key top left\n"
     << "set object 1 rect from " << s.win_first << ", graph 0 to " << s.win_last
     << ", graph 1 fc rgb '#e8f0ff' fs solid 0.5 noborder behind\n"
     << "plot 'step_timeline.dat' u 1:2 w l lc rgb '#1f77b4' t 'step time (max over ranks)', \\\n"
     << "  '' u 1:($6>0?$2:1/0) w p pt 7 ps 0.6 lc rgb '#d62728' t 'checkpoint step', \\\n"
     << "  '' u 1:($4>0?$4:1/0) w impulses lc rgb '#ff7f0e' t 'ckpt stall', \\\n"
     << "  " << s.step_p50 << " w l dt 2 lc rgb 'black' t 'window median'\n";
  t.script = sc.str();
  out.push_back(t);

  if (!s.loss.empty()) {
    // Training loss per step; the validation split's loss (eval events) as
    // points with a line, in the second block of the data file.
    Plot l{"loss", "Loss: training (every step) and validation (data.val_path)", "", ""};
    std::ostringstream ld;
    ld << "# step training_loss\n";
    for (auto& [k, v] : s.loss) ld << k << ' ' << v << '\n';
    ld << "\n\n# step validation_loss\n";
    for (auto& [k, v] : s.val_loss) ld << k << ' ' << v << '\n';
    l.data = ld.str();
    l.script =
        "set xlabel 'step'\nset ylabel 'loss (nats/token)'\nset key top right\n"
        "plot 'loss.dat' index 0 u 1:2 w l lc rgb '#1f77b4' t 'training'";
    if (!s.val_loss.empty())
      l.script += ", \\\n  '' index 1 u 1:2 w lp pt 7 ps 0.8 lc rgb '#d62728' t 'validation'";
    l.script += "\n";
    out.push_back(l);
  }

  Plot b{"rank_skew", "Per-rank busy time (step - exposed comm) over the window", "", ""};
  std::ostringstream bd;
  bd << "# rank min p25 median p75 max\n";
  for (auto& r : s.ranks)
    bd << r.rank << ' ' << r.busy_min << ' ' << r.busy_p25 << ' ' << r.busy_med << ' ' << r.busy_p75
       << ' ' << r.busy_max << '\n';
  b.data = bd.str();
  // Ranks are integers: whole-number ticks, and a range that shows the
  // first and last box completely.
  const size_t nr = s.ranks.size();
  b.script =
      "set xlabel 'rank'\nset ylabel 'seconds'\nset boxwidth 0.6 absolute\n"
      "set style fill solid 0.25 border\nset xrange [-0.5:" +
      std::to_string(nr ? double(s.ranks.back().rank) + 0.5 : 0.5) + "]\n" +
      (nr <= 32 ? "set xtics 1\n" : "set xtics format '%.0f'\n") + "set key top right\n"
      "plot 'rank_skew.dat' u 1:3:2:6:5 w candlesticks whiskerbars lc rgb '#1f77b4' t "
      "'min/p25/p75/max', \\\n  '' u 1:4:4:4:4 w candlesticks lc rgb 'black' t 'median'\n";
  out.push_back(b);
  return out;
}

std::vector<Plot> campaign_plots(const Campaign& c) {
  std::vector<Plot> out;
  std::ostringstream d;
  d << "# series gpus tok_s_gpu mfu_pct efficiency\n";
  for (size_t si = 0; si < c.series.size(); ++si) {
    for (size_t k = 0; k < c.series[si].runs.size(); ++k) {
      const RunSummary& r = c.runs[c.series[si].runs[k]];
      d << si << ' ' << r.gpus << ' ' << r.tok_s_gpu << ' ' << r.mfu << ' '
        << c.series[si].efficiency[k] << '\n';
    }
    d << "\n\n";  // gnuplot index per series
  }
  auto plot_cmd = [&](const char* name, int col) {
    std::string s = "plot ";
    for (size_t si = 0; si < c.series.size(); ++si)
      s += std::string(si ? ", \\\n  " : "") + "'" + name + ".dat' index " + std::to_string(si) +
           " u 2:" + std::to_string(col) + " w lp pt 7 t '" + c.series[si].model + " (" +
           c.series[si].kind + ")'";
    return s + "\n";
  };
  // CPU campaigns count ranks, not GPUs.
  bool all_cpu = !c.runs.empty();
  for (const auto& r : c.runs) all_cpu = all_cpu && r.device.rfind("cpu", 0) == 0;
  const std::string unit = all_cpu ? "CPU ranks" : "GPUs";
  const std::string x =
      "set logscale x 2\nset xlabel '" + unit + "'\nset key bottom left\n";
  out.push_back(
      {"tok_s_gpu_vs_gpus", "Tokens/s per device vs " + unit, d.str(),
       x + "set ylabel 'tokens/s per device'\nset yrange [0:*]\n" + plot_cmd("tok_s_gpu_vs_gpus", 3)});
  out.push_back({"mfu_vs_gpus", "MFU vs " + unit, d.str(),
                 x + "set ylabel 'MFU (%)'\nset yrange [0:*]\n" + plot_cmd("mfu_vs_gpus", 4)});
  out.push_back(
      {"scaling_efficiency", "Scaling efficiency vs " + unit, d.str(),
       x + "set ylabel 'efficiency'\nset yrange [0:1.1]\n" + plot_cmd("scaling_efficiency", 5)});
  return out;
}

std::string find_gnuplot() {
  if (auto e = st::env("SCALETRAIN_GNUPLOT")) return access(e->c_str(), X_OK) == 0 ? *e : "";
  auto path = st::env("PATH");
  if (!path) return "";
  for (auto& d : st::split(*path, ':')) {
    std::string p = (d.empty() ? "." : d) + "/gnuplot";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string render_plot(const std::string& dir, const Plot& p, const std::string& gnuplot) {
  std::ofstream(dir + "/" + p.name + ".dat") << p.data;
  std::ofstream(dir + "/" + p.name + ".gp") << svg_head(p) << p.script;
  if (gnuplot.empty()) return "gnuplot not found on PATH";
  const std::string cmd = "cd '" + dir + "' && '" + gnuplot + "' '" + p.name + ".gp' 2>&1";
  std::FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "cannot start gnuplot";
  std::string msg;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) msg += buf;
  int rc = pclose(f);
  if (rc != 0) return "gnuplot failed: " + msg.substr(0, 300);
  return "";
}

}  // namespace st::analysis
