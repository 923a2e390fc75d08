// Plot definitions and rendering (see plots.hpp).
#include "analyze/plots.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "analyze/stats.hpp"
#include "core/util.hpp"

namespace st::analysis {
namespace {
// Text inside a single-quoted gnuplot string: a quote is written twice.
std::string q(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o;
}
std::string num(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}
std::string svg_head(const Plot& p) {
  return "set terminal svg size 900,500 dynamic font 'sans,11'\nset output '" + p.name +
         ".svg'\nset title '" + q(p.title) + "'\nset grid\n";
}

Plot step_timeline_plot(const RunSummary& s) {
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
  return t;
}

// Training loss per step; the validation split's loss (eval events) as
// points with a line, in the second block of the data file.
Plot loss_plot(const RunSummary& s) {
  Plot l{"loss", "Loss: training (every step) and validation (the held-out split)", "", ""};
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
  return l;
}

// Few ranks: a box per rank. Ranks are integers: whole-number ticks, and a
// range that shows the first and last box completely.
void rank_boxes(const RunSummary& s, Plot& b) {
  const size_t nr = s.ranks.size();
  b.script =
      "set xlabel 'rank'\nset ylabel 'seconds'\nset boxwidth 0.6 absolute\n"
      "set style fill solid 0.25 border\nset xrange [-0.5:" +
      std::to_string(nr ? double(s.ranks.back().rank) + 0.5 : 0.5) +
      "]\nset xtics 1\nset key top right\n"
      "plot 'rank_skew.dat' u 1:3:2:6:5 w candlesticks whiskerbars lc rgb '#1f77b4' t "
      "'min/p25/p75/max', \\\n  '' u 1:4:4:4:4 w candlesticks lc rgb 'black' t 'median'\n";
}

void rank_heat_map(const RunSummary& s, Plot& b) {
  const size_t nr = s.ranks.size();
  // Many ranks: a rank x step heat map, no per-rank whisker. Rows are
  // ranks grouped by host (hosts in name order), each host's ranks sorted
  // by median busy time, slowest first; the colour is a rank's busy time
  // at a step against that step's median over ranks (a straggler is a red
  // row, a slow step a column that stays white).
  std::map<std::string, std::vector<const RankStat*>> by_host;
  for (const auto& r : s.ranks) by_host[r.host].push_back(&r);
  std::map<int64_t, std::vector<double>> at_step;
  for (const auto& r : s.ranks)
    for (const auto& [st, v] : r.busy_steps) at_step[st].push_back(v);
  std::map<int64_t, double> step_med;
  for (auto& [st, v] : at_step) step_med[st] = median(v);
  // At most 32 columns: a long window's steps in blocks of consecutive
  // steps, each cell the mean over its block.
  std::vector<int64_t> steps;
  for (const auto& [st, m] : step_med) steps.push_back(st);
  const size_t per = std::max<size_t>(1, (steps.size() + 31) / 32);
  std::map<int64_t, int64_t> block_of;  // step -> its block's first step
  for (size_t i = 0; i < steps.size(); ++i) block_of[steps[i]] = steps[i - i % per];
  std::ostringstream gd, tics;
  gd << "# heat map, one scan line per rank: step (first of a block of " << per
     << " step(s)) row rank host_index busy_s busy_vs_step_median_pct (means over the "
        "block; NaN: the rank has no record of it)\n";
  size_t row = 0, hi = 0, cols = 0;
  double worst = 1;
  const size_t every = std::max<size_t>(1, by_host.size() / 16);
  const size_t rank_tics = by_host.size() < 4 ? std::max<size_t>(1, nr / 8) : 0;
  for (auto& [h, rs] : by_host) {
    std::sort(rs.begin(), rs.end(),
              [](const RankStat* a, const RankStat* b) { return a->busy_med > b->busy_med; });
    if (hi % every == 0) tics << (tics.tellp() > 0 ? ", " : "") << "'" << q(h) << "' " << row;
    for (const RankStat* r : rs) {
      if (rank_tics && row % rank_tics == rank_tics / 2)
        tics << ", 'rank " << r->rank << "' " << row << " 1";
      std::map<int64_t, std::pair<double, double>> sum;  // block -> (busy, rel) sums
      std::map<int64_t, int> n;
      for (const auto& [st, v] : r->busy_steps) {
        const double med = step_med[st];
        if (med <= 0) continue;
        auto& c = sum[block_of[st]];
        c.first += v;
        c.second += 100 * (v / med - 1);
        ++n[block_of[st]];
      }
      cols = 0;
      for (size_t i = 0; i < steps.size(); i += per, ++cols) {
        gd << steps[i] << ' ' << row << ' ' << r->rank << ' ' << hi << ' ';
        if (!n.count(steps[i])) {
          gd << "NaN NaN\n";
          continue;
        }
        const double k = n[steps[i]], rel = sum[steps[i]].second / k;
        worst = std::max(worst, std::abs(rel));
        gd << sum[steps[i]].first / k << ' ' << rel << '\n';
      }
      gd << '\n';
      ++row;
    }
    ++hi;
  }
  const double cb = std::min(worst, 50.0);
  // Up to 8192 cells, each a rectangle (crisp); beyond, one embedded image
  // (viewers smooth it) keeps the file small.
  const bool pixels = row * cols <= 8192;
  b.title = "Per-rank busy time per step (step - exposed comm) against the step's median over " +
            std::to_string(nr) + " ranks";
  b.data = gd.str();
  b.script = "set xlabel 'step (steady-state window" +
             (per > 1 ? ", blocks of " + std::to_string(per) + " steps" : std::string()) +
             ")'\nset ylabel 'ranks, grouped by host (each host slowest first)'\nset yrange [" +
             num(row - 0.5) + ":-0.5]\nset ytics (" + tics.str() + ") font ',8'\n" +
             (cols <= 16 ? "set xtics " + std::to_string(per) + "\n" : std::string()) +
             "unset grid\nset cblabel 'busy time vs the step median (%)'\nset cbrange [" +
             num(-cb) + ":" + num(cb) +
             "]\nset palette defined (-1 '#2166ac', 0 '#f7f7f7', 1 '#b2182b')\n"
             "plot 'rank_skew.dat' u 1:2:6 w image" +
             (pixels ? " pixels" : "") + " notitle\n";
}
}  // namespace

std::vector<Plot> run_plots(const RunSummary& s) {
  std::vector<Plot> out{step_timeline_plot(s)};
  if (!s.loss.empty()) out.push_back(loss_plot(s));
  Plot b{"rank_skew", "Per-rank busy time (step - exposed comm) over the window", "", ""};
  std::ostringstream bd;
  bd << "# rank min p25 median p75 max\n";
  for (auto& r : s.ranks)
    bd << r.rank << ' ' << r.busy_min << ' ' << r.busy_p25 << ' ' << r.busy_med << ' ' << r.busy_p75
       << ' ' << r.busy_max << '\n';
  b.data = bd.str();
  if (s.ranks.size() <= 32)
    rank_boxes(s, b);
  else
    rank_heat_map(s, b);
  out.push_back(b);
  return out;
}

namespace {
// The x position where jobs leave one node: between the largest one-node
// size and the smallest multi-node size (geometric mean, the x axis is
// log2); 0 when every point is on one node or on several.
double node_mark(const Campaign& c) {
  int one = 0, multi = 0;
  for (const auto& p : c.points) {
    if (p.nodes <= 1) one = std::max(one, p.gpus);
    if (p.nodes > 1) multi = multi == 0 ? p.gpus : std::min(multi, p.gpus);
  }
  if (one == 0 || multi == 0) return 0;
  return std::sqrt(double(one) * double(multi));
}

// A series' prediction line says which cluster file priced it (run.json's
// prediction.cluster): a prediction made with another machine's file than
// the one the runs ran on reads as the planner being wrong.
std::string prediction_label(const Campaign& c, const Series& se) {
  std::set<std::string> files;
  for (size_t pi : se.points)
    if (c.points[pi].pred_tok_s_gpu > 0 && !c.points[pi].pred_cluster.empty())
      files.insert(c.points[pi].pred_cluster);
  std::string s;
  for (const auto& f : files) s += (s.empty() ? "" : ", ") + f;
  return s.empty() ? "planner prediction" : "planner prediction (" + s + ")";
}

// A point's label in the breakdown: its size, then only the layout settings
// that differ between the points (a whole layout per bar ran the labels
// into each other and under the footnote).
std::vector<std::string> point_labels(const Campaign& c) {
  std::vector<std::vector<std::string>> parts;
  for (const auto& p : c.points) {
    const RunSummary& r = c.runs[p.runs.front()];
    std::string ck = r.ckpt_interval > 0 ? r.ckpt_mode + "/" + std::to_string(r.ckpt_interval)
                     : r.ckpt_load_s > 0 ? "restore"
                                         : "";
    parts.push_back({"tp" + std::to_string(r.tp), "pp" + std::to_string(r.pp),
                     "cp" + std::to_string(r.cp), "ZeRO" + std::to_string(r.zero_stage),
                     "act:" + r.act_ckpt, "mb" + std::to_string(r.micro_batch),
                     "ga" + std::to_string(r.grad_accum), r.precision, ck});
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < c.points.size(); ++i) {
    const Point& p = c.points[i];
    std::string label =
        std::to_string(p.gpus) + (p.nodes > 1 ? "r/" + std::to_string(p.nodes) + "n" : "r");
    for (size_t k = 0; k < parts[i].size(); ++k) {
      bool varies = false;
      for (const auto& o : parts) varies = varies || o[k] != parts[i][k];
      if (varies && !parts[i][k].empty()) label += " " + parts[i][k];
    }
    out.push_back(label);
  }
  return out;
}

}  // namespace

namespace {
// The scaling plots' data: one block per shown series (gnuplot index): gpus,
// then median, low and high of tok/s per device, MFU and efficiency;
// low/high are the wider of min-max over repeats and p10-p90 over the
// steady-state steps; then the planner's prediction (0: none), nodes and
// repeats. Says whether any point has a prediction and any series scales.
std::string scaling_data(const Campaign& c, const std::vector<const Series*>& shown, bool& any_pred,
                         bool& any_scaling) {
  std::ostringstream d;
  d << "# per series (gnuplot index): gpus tok_s_gpu lo hi mfu_pct lo hi efficiency lo hi "
       "pred_tok_s_gpu pred_mfu_pct nodes repeats\n";
  for (const Series* sp : shown) {
    const Series& se = *sp;
    any_scaling = any_scaling || se.kind != "single";
    for (size_t k = 0; k < se.points.size(); ++k) {
      const Point& p = c.points[se.points[k]];
      const Spread& e = se.efficiency[k];
      const double tlo = std::min(p.tok_s_gpu.lo, p.tok_s_gpu_p10);
      const double thi = std::max(p.tok_s_gpu.hi, p.tok_s_gpu_p90);
      const double mlo = std::min(p.mfu.lo, p.mfu_p10), mhi = std::max(p.mfu.hi, p.mfu_p90);
      any_pred = any_pred || p.pred_tok_s_gpu > 0;
      d << p.gpus << ' ' << p.tok_s_gpu.med << ' ' << tlo << ' ' << thi << ' ' << p.mfu.med << ' '
        << mlo << ' ' << mhi << ' ' << e.med << ' ' << e.lo << ' ' << e.hi << ' '
        << p.pred_tok_s_gpu << ' ' << p.pred_mfu << ' ' << p.nodes << ' ' << p.runs.size() << '\n';
    }
    d << "\n\n";
  }
  return d.str();
}

// One scaling plot's command: every shown series from column `col` (with its
// low/high), optionally the base point held (ideal_base), the line at 1
// (ideal_one) and the planner's prediction from column pred_col (0: none).
std::string scaling_plot_cmd(const Campaign& c, const std::vector<const Series*>& shown,
                             const std::string& name, int col, bool ideal_base, bool ideal_one,
                             int pred_col, bool any_pred) {
  const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"};
  std::string s = "plot ";
  bool first = true;
  for (size_t si = 0; si < shown.size(); ++si) {
    const auto& se = *shown[si];
    const std::string lc = std::string(" lc rgb '") + colours[si % 6] + "'";
    const std::string idx = "'" + name + ".dat' index " + std::to_string(si);
    const std::string label = se.model + ", " + se.layout + " (" + se.kind + ")";
    s += std::string(first ? "" : ", \\\n  ") + idx + " u 1:" + std::to_string(col) + ":" +
         std::to_string(col + 1) + ":" + std::to_string(col + 2) + " w yerrorlines pt 7" + lc +
         " t '" + q(label) + "'";
    first = false;
    if (ideal_base && !se.points.empty()) {
      const Point& b = c.points[se.points.front()];
      const double base = col == 2 ? b.tok_s_gpu.med : b.mfu.med;
      s += ", \\\n  " + num(base) + " w l dt 2" + lc + " t 'ideal (" + std::to_string(b.gpus) +
           "-rank value held)'";
    }
    if (pred_col > 0 && any_pred)
      s += ", \\\n  " + idx + " u 1:($" + std::to_string(pred_col) + ">0?$" +
           std::to_string(pred_col) + ":1/0) w lp dt 3 pt 6" + lc + " t '" +
           q(prediction_label(c, se)) + "'";
  }
  if (ideal_one) s += ", \\\n  1 w l dt 2 lc rgb 'black' t 'ideal'";
  return s + "\n";
}

// A column of the step breakdown plot: its data header, title and colour.
struct BreakdownCol {
  std::string head, title, colour;
};

// The breakdown's columns: the step's parts (core/step_parts.hpp) in their
// order, the comm part as its CommParts and what no wait explains.
std::vector<BreakdownCol> breakdown_cols() {
  const std::array<const char*, kStepParts> colour = {"#2ca02c", "#1f77b4", "#aec7e8",
                                                      "",        "#ff7f0e", "#dddddd"};
  const std::array<const char*, kCommParts> comm_colour = {"#d62728", "#e377c2", "#9467bd",
                                                           "#8c564b", "#17becf", "#bcbd22"};
  std::vector<BreakdownCol> cols;
  for (StepPart p : kAllStepParts) {
    const std::string name = step_part_name(p);
    if (p != StepPart::Comm) {
      cols.push_back({name + "_s", name, colour[ix(p)]});
      continue;
    }
    for (CommPart q : kAllCommParts)
      cols.push_back({std::string("comm_") + comm_part_name(q) + "_s",
                      std::string("comm ") + comm_part_name(q), comm_colour[ix(q)]});
    cols.push_back({"comm_unattributed_s", "comm, unattributed", "#7f7f7f"});
  }
  return cols;
}

Plot breakdown_plot(const Campaign& c) {
  // The median step in parts, one stacked bar per point; the exposed
  // communication split by the axis of its group (tp, cp, pp, dp, ZeRO,
  // host reductions) from the step records' comm_wait_s.
  const std::vector<BreakdownCol> cols = breakdown_cols();
  std::ostringstream bd;
  bd << "# label";
  for (const BreakdownCol& col : cols) bd << ' ' << col.head;
  bd << " (the median step by part, adding up to it; comm_*: its exposed communication by the "
        "axis of the group, adding up to the comm part; other: what no phase timer covers)\n";
  const std::vector<std::string> labels = point_labels(c);
  for (size_t i = 0; i < c.points.size(); ++i) {
    const Point& p = c.points[i];
    bd << '"' << labels[i] << '"';
    for (StepPart q : kAllStepParts) {
      if (q != StepPart::Comm) {
        bd << ' ' << p.part_s[ix(q)];
        continue;
      }
      for (double v : p.comm_part_s) bd << ' ' << v;
      bd << ' ' << p.comm_unattributed_s;
    }
    bd << '\n';
  }
  std::string plot = "plot ";
  for (size_t k = 0; k < cols.size(); ++k)
    plot += (k ? ", \\\n  '' u " : "'step_breakdown.dat' u ") + std::to_string(k + 2) +
            (k ? "" : ":xtic(1)") + " t '" + cols[k].title + "' lc rgb '" + cols[k].colour + "'";
  return Plot{"step_breakdown", "Median step in parts per point", bd.str(),
              "set label 1 'checkpoint stall: per step on average over the window; exposed "
              "communication split by the host waits of each part (comm_wait_s)' at screen "
              "0.01, screen 0.02 font ',8' noenhanced\n"
              "set bmargin 7\nset style data histograms\nset style histogram rowstacked\nset "
              "style fill solid 0.8 border -1\nset boxwidth 0.7\nset ylabel 'seconds per "
              "step'\nset yrange [0:*]\nset xtics rotate by 45 right noenhanced font ',9'\nset "
              "key outside right top\n" +
                  plot + "\n"};
}

void mfu_by_layout_plot(const Campaign& c, const std::vector<const Series*>& shown,
                        const std::string& peak_note, std::vector<Plot>& out) {
  // An MFU sweep: several layouts at one size get one bar each, with the
  // peak memory beside it.
  std::vector<const Point*> swept;  // the shown series' points
  for (const Series* se : shown)
    for (size_t pi : se->points) swept.push_back(&c.points[pi]);
  std::map<int, int> layouts_at;
  for (const Point* p : swept) ++layouts_at[p->gpus];
  bool sweep = false;
  for (auto& [g, n] : layouts_at) sweep = sweep || n > 1;
  if (sweep) {
    // Headroom: the device's memory capacity (run.json) less the peak; a
    // point without a recorded capacity shows its peak only.
    std::ostringstream md;
    md << "# label mfu_med mfu_lo mfu_hi peak_mem_gib capacity_gib headroom_gib (capacity, "
          "headroom: NaN when run.json records no device.memory_capacity_bytes)\n";
    bool any_cap = false;
    const double gib = double(1ull << 30);
    for (const Point* p : swept) {
      std::string label = std::to_string(p->gpus) + "r_" + p->layout;
      for (char& ch : label)
        if (ch == ' ') ch = '_';
      const double peak = double(p->mem_peak_bytes) / gib;
      md << '"' << label << "\" " << p->mfu.med << ' ' << p->mfu.lo << ' ' << p->mfu.hi << ' '
         << peak << ' ';
      if (p->mem_capacity_bytes > 0) {
        any_cap = true;
        const double cap = double(p->mem_capacity_bytes) / gib;
        md << cap << ' ' << cap - peak << '\n';
      } else {
        md << "NaN NaN\n";
      }
    }
    std::string mem_plot =
        any_cap ? "'' u ($0+0.1):5 w boxes axes x1y2 lc rgb '#ff7f0e' t 'peak memory', '' u "
                  "($0+0.3):($7>=0?$7:1/0) w boxes axes x1y2 lc rgb '#2ca02c' t 'headroom "
                  "(capacity - peak)', '' u ($0+0.3):($7<0?-$7:1/0) w boxes axes x1y2 lc rgb "
                  "'#d62728' t 'over capacity (peak - capacity)'"
                : "'' u ($0+0.2):5 w boxes axes x1y2 lc rgb '#ff7f0e' t 'peak memory (no capacity "
                  "in run.json: headroom unknown)'";
    const std::string bw = any_cap ? "0.2" : "0.4";
    out.push_back(
        {"mfu_by_layout",
         std::string("MFU per layout (bars: min-max over repeats) and memory ") +
             (any_cap ? "headroom" : "peak"),
         md.str(),
         "set style fill solid 0.6 border -1\nset boxwidth " + bw +
             " absolute\nset yrange [0:*]\nset y2range [0:*]\nset lmargin 16\nset bmargin 8\nset "
             "ylabel 'MFU (%)'\nset y2label 'GiB per device (peak: max over ranks; "
             "capacity: run.json)'\nset ytics nomirror\nset y2tics\nset xtics rotate by 30 right "
             "noenhanced\nset key outside right top\nset label 10 '" +
             q(peak_note) +
             "' at screen 0.01, screen 0.02 font ',8'\n"
             "plot 'mfu_by_layout.dat' u ($0-0.2):2:3:4:(0.4):xtic(1) w boxerrorbars lc rgb "
             "'#1f77b4' t 'MFU', " +
             mem_plot + "\n"});
  }
}

}  // namespace

std::vector<Plot> campaign_plots(const Campaign& c) {
  std::vector<Plot> out;
  // CPU campaigns count ranks, not GPUs.
  bool all_cpu = !c.runs.empty();
  for (const auto& r : c.runs) all_cpu = all_cpu && r.device.rfind("cpu", 0) == 0;
  const std::string unit = all_cpu ? "CPU ranks" : "GPUs";
  const double mark = node_mark(c);
  // The peak every MFU point is measured against, for the plots' titles.
  std::string peak_note;
  if (c.campaign_peak > 0)
    peak_note = "at one peak for every run, " + num(c.campaign_peak / 1e9) +
                " GFLOP/s per rank (measured once, at the smallest size)";
  else if (!c.runs.empty() && c.runs.front().peak > 0)
    peak_note = "at " + num(c.runs.front().peak / 1e12) + " TFLOP/s per device";
  // The scaling plots: in a checkpoint study, the series without
  // checkpoints (the checkpointed ones have their own plots).
  const std::vector<const Series*> shown = scaling_series(c);
  bool any_pred = false, any_scaling = false;
  const std::string data = scaling_data(c, shown, any_pred, any_scaling);
  std::string x = "set logscale x 2\nset xlabel '" + unit + "'\nset key outside bottom center " +
                  "vertical maxrows 4 font ',9'\nset bmargin 9\n";
  if (mark > 0)
    x += "set arrow from " + num(mark) + ", graph 0 to " + num(mark) +
         ", graph 1 nohead dt 4 lc rgb '#555555'\nset label 'jobs leave one node' at " + num(mark) +
         ", graph 0.96 offset 0.5,0 font ',9'\n";
  x += "set label 10 'bars: min-max over repeats or p10-p90 over steady-state steps, the wider' "
       "at screen 0.01, screen 0.02 font ',8'\n";
  const std::string bars;
  out.push_back(
      {"tok_s_gpu_vs_gpus", "Tokens/s per device vs " + unit + bars, data,
       x + "set ylabel 'tokens/s per device'\nset yrange [0:*]\n" +
           scaling_plot_cmd(c, shown, "tok_s_gpu_vs_gpus", 2, true, false, 11, any_pred)});
  out.push_back({"mfu_vs_gpus", "MFU vs " + unit + " " + peak_note, data,
                 x + "set ylabel 'MFU (%)'\nset yrange [0:*]\n" +
                     scaling_plot_cmd(c, shown, "mfu_vs_gpus", 5, true, false, 12, any_pred)});
  if (any_scaling)
    out.push_back(
        {"scaling_efficiency", "Scaling efficiency vs " + unit + " (bars: repeats' min-max)", data,
         x + "set ylabel 'efficiency'\nset yrange [0:1.15]\n" +
             scaling_plot_cmd(c, shown, "scaling_efficiency", 8, false, true, 0, any_pred)});

  out.push_back(breakdown_plot(c));
  mfu_by_layout_plot(c, shown, peak_note, out);
  return out;
}

namespace {
using ByModeSize = std::map<std::pair<int, std::string>, std::vector<const CkptPoint*>>;

// Overhead against interval: one block per (size, mode).
Plot overhead_plot(const ByModeSize& by) {
  std::ostringstream d;
  d << "# per (ranks, mode) block: interval_steps overhead_pct lo hi stall_pct "
       "interference_pct\n";
  std::string cmd = "plot ";
  size_t bi = 0;
  for (const auto& [key, ks] : by) {
    d << "# ranks " << key.first << " mode " << key.second << "\n";
    for (const auto* k : ks)
      d << k->interval << ' ' << 100 * k->overhead.med << ' ' << 100 * k->overhead.lo << ' '
        << 100 * k->overhead.hi << ' ' << 100 * k->stall_share.med << ' '
        << 100 * k->interference_share.med << '\n';
    d << "\n\n";
    cmd += std::string(bi ? ", \\\n  " : "") + "'ckpt_overhead_vs_interval.dat' index " +
           std::to_string(bi) + " u 1:2:3:4 w yerrorlines pt " +
           (key.second == "sync" ? "7" : "5") + " dt " + (key.second == "sync" ? "1" : "2") +
           " t '" + key.second + ", " + std::to_string(key.first) + " rank(s)'";
    ++bi;
  }
  return {"ckpt_overhead_vs_interval",
          "Checkpoint overhead vs interval per mode (stall + background interference, "
          "share of step time; bars: min-max over repeats)",
          d.str(),
          "set logscale x 2\nset xlabel 'checkpoint interval (steps)'\nset ylabel "
          "'overhead (% of step time)'\nset yrange [0:*]\nset key top right\n" +
              cmd + "\n"};
}

// Cost per checkpoint against interval: C (the median of the steady-state
// checkpoints, what Young/Daly use) and the first checkpoint apart. C
// should not move with the interval; the first checkpoint's one-time cost
// would have made it do so.
Plot cost_plot(const ByModeSize& by) {
  std::ostringstream cd;
  cd << "# per (ranks, mode) block: interval_steps C_s first_checkpoint_s steady_checkpoints\n";
  std::string ccmd = "plot ";
  size_t bi = 0;
  for (const auto& [key, ks] : by) {
    cd << "# ranks " << key.first << " mode " << key.second << "\n";
    for (const auto* k : ks)
      cd << k->interval << ' ' << k->cost_s << ' ' << k->first_cost_s << ' ' << k->steady_n << '\n';
    cd << "\n\n";
    const std::string lab = key.second + ", " + std::to_string(key.first) + " rank(s)";
    const std::string pt = key.second == "sync" ? "7" : "5";
    const std::string lc = "lc " + std::to_string(bi + 1);
    ccmd += std::string(bi ? ", \\\n  " : "") + "'ckpt_cost_vs_interval.dat' index " +
            std::to_string(bi) + " u 1:2 w lp pt " + pt + " " + lc + " t 'C (steady), " + lab +
            "', \\\n  'ckpt_cost_vs_interval.dat' index " + std::to_string(bi) + " u 1:3 w lp pt " +
            pt + " dt 2 " + lc + " t 'first checkpoint, " + lab + "'";
    ++bi;
  }
  return {"ckpt_cost_vs_interval",
          "Cost per checkpoint: C, median after each run's first (solid); first (dashed)", cd.str(),
          "set logscale x 2\nset xlabel 'checkpoint interval (steps)'\nset ylabel "
          "'seconds per checkpoint'\nset yrange [0:*]\nset key below\n" +
              ccmd + "\n"};
}

// Aggregate write bandwidth against ranks, beside the storage's limit.
Plot bandwidth_plot(const CkptStudy& st) {
  std::ostringstream b;
  b << "# per mode block: ranks aggregate_write_MBps bytes_per_checkpoint\n";
  std::map<std::string, std::vector<const CkptPoint*>> by_mode;
  for (const auto& k : st.points) by_mode[k.mode].push_back(&k);
  std::string bcmd = "plot ";
  size_t bi = 0;
  for (const auto& [mode, ks] : by_mode) {
    std::map<int, std::vector<double>> at;
    std::map<int, double> bytes;
    for (const auto* k : ks) {
      at[k->gpus].push_back(k->agg_bw);
      bytes[k->gpus] = k->bytes;
    }
    b << "# mode " << mode << "\n";
    for (auto& [g, v] : at) {
      std::sort(v.begin(), v.end());
      b << g << ' ' << v[v.size() / 2] / 1e6 << ' ' << bytes[g] << '\n';
    }
    b << "\n\n";
    bcmd += std::string(bi ? ", \\\n  " : "") + "'ckpt_write_bandwidth.dat' index " +
            std::to_string(bi) + " u 1:2 w lp pt 7 t '" + mode +
            " (median over intervals and repeats)'";
    ++bi;
  }
  if (st.storage.measured)
    bcmd += ", \\\n  " + num(st.storage.bandwidth / 1e6) +
            " w l dt 2 lc rgb 'black' t 'storage limit: sequential write of " +
            num(st.storage.bytes / 1e6) + " MB (" + q(st.storage.method) + ")'";
  return {"ckpt_write_bandwidth",
          std::string("Aggregate checkpoint write bandwidth vs ranks") +
              (st.storage.measured ? "" : " (storage limit not measured)"),
          b.str(),
          "set logscale x 2\nset xlabel 'ranks'\nset ylabel 'MB/s (bytes of every rank / "
          "the slowest write)'\nset yrange [0:*]\nset key bottom right\n" +
              bcmd + "\n"};
}

}  // namespace

std::vector<Plot> ckpt_plots(const CkptStudy& st) {
  std::vector<Plot> out;
  if (st.empty()) return out;
  ByModeSize by;
  for (const auto& k : st.points) by[{k.gpus, k.mode}].push_back(&k);
  out.push_back(overhead_plot(by));
  out.push_back(cost_plot(by));
  out.push_back(bandwidth_plot(st));
  if (!st.restore_s.empty()) {
    std::ostringstream r;
    r << "# ranks restore_s_median min max\n";
    for (const auto& [g, sp] : st.restore_s)
      r << g << ' ' << sp.med << ' ' << sp.lo << ' ' << sp.hi << '\n';
    out.push_back({"ckpt_restore_time", "Restore time (load at resume, slowest rank) per size",
                   r.str(),
                   "set logscale x 2\nset xlabel 'ranks'\nset ylabel 'seconds'\nset yrange "
                   "[0:*]\nset key top left\nplot 'ckpt_restore_time.dat' u 1:2:3:4 w "
                   "yerrorlines pt 7 t 'restore (bars: min-max over repeats)'\n"});
  }
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
