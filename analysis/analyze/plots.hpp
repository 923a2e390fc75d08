// SVG plots through gnuplot, one renderer for every plot: each plot is a data file plus a gnuplot
// script written next to the report, then rendered by running `gnuplot script` via popen. Scripts
// and data stay with the report (editable, re-renderable) and nothing links Boost or gnuplot;
// without gnuplot on PATH the scripts are still written and the caller lists the skipped SVGs.
#pragma once
#include <string>
#include <vector>

#include "analyze/campaign.hpp"
#include "analyze/ckpt_study.hpp"

namespace st::analysis {

struct Plot {
  std::string name;  // file stem: <name>.dat, <name>.gp, <name>.svg
  std::string title;
  std::string data;    // whitespace-separated columns
  std::string script;  // gnuplot commands after terminal/output (data file is "<name>.dat")
};

std::vector<Plot> run_plots(const RunSummary& s);
std::vector<Plot> campaign_plots(const Campaign& c);
// The checkpoint study's plots (none when the campaign has no checkpointed run).
std::vector<Plot> ckpt_plots(const CkptStudy& st);

// Full path of gnuplot on PATH, or "" (SCALETRAIN_GNUPLOT overrides).
std::string find_gnuplot();

// Writes data and script into dir and renders the SVG when gnuplot is given.
// Returns "" on success, else why the SVG was not made.
std::string render_plot(const std::string& dir, const Plot& p, const std::string& gnuplot);

}  // namespace st::analysis
