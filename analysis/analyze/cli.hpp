// scaletrain-analyze command line: `run DIR`, `campaign DIR...`, `mpt CSV
// MODELS_CSV`, `trace DIR`, `hang DIR`. Exit codes: 0 ok, 1 internal error, 2 bad input (the
// message names file:line, field or value). Callable from tests without a process.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace st::analysis {

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `mpt`: recomputes MFU/HFU of every published MPT row; returns the worst
// absolute difference in points through worst_mfu/worst_hfu.
int mpt_check(const std::string& csv, const std::string& models_csv, const std::string& out_dir,
              std::ostream& out, double& worst_mfu, double& worst_hfu);

}  // namespace st::analysis
