// scaletrain-plan command line (docs/planner.md):
//   scaletrain-plan [plan] --cluster FILE [model and knob options] [outputs]
//   scaletrain-plan calibrate [model and knob options] --out FILE.yaml
//   scaletrain-plan compare --cluster FILE RUN_DIR... [--out DIR]
//   scaletrain-plan mpt-fit [--benchmarks CSV] [--models CSV] [--out DIR]
// Exit codes: 0 ok, 1 internal error, 2 bad input (the message names the
// flag, file, key or value and what is valid). Callable from tests.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace st::plan {

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace st::plan
