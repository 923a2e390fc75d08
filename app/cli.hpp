// Command line of the trainer (Boost.Program_options): --config, repeatable
// --set, --out, --dry-run [--world N], --help, --help-config, --version.
#pragma once
#include <string>
#include <vector>

namespace st {
struct Cli {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  bool dry_run = false;
  int world = 0;          // --world N (--dry-run only): plan N ranks; 0: the launched world size
  bool exit_now = false;  // --help / --version printed something
  int exit_code = 0;
};
// Parses argv; prints help/version on rank 0. Throws UsageError on bad flags.
Cli parse_cli(int argc, char** argv, bool print);
}  // namespace st
