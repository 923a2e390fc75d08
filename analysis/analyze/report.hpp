// Report writers: report.md (humans), CSV and JSON (tools), and the SVG plots,
// for one run or a campaign. Every report states the window, the FLOP formula
// and the peak it used.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analyze/campaign.hpp"

namespace st::analysis {

struct Written {
  std::vector<std::string> files;          // relative to the out dir
  std::vector<std::string> skipped_plots;  // "name.svg: why"
};

nlohmann::json run_to_json(const RunSummary& s);
std::string run_markdown(const RunSummary& s, const Written& w);
Written write_run_outputs(const RunSummary& s, const std::string& out_dir, bool plots);

std::string campaign_markdown(const Campaign& c, const Written& w);
Written write_campaign_outputs(const Campaign& c, const std::string& out_dir, bool plots);

// The MPT-table row of a run as CSV (header first).
std::string campaign_csv(const Campaign& c);

}  // namespace st::analysis
