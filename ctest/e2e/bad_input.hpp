// The bad-input table (test_bad_input.cpp runs it): one row per way a user,
// an operator or a damaged file can hand the programs something wrong, each
// run through the real binaries and judged on exit status and on a message
// that names the culprit. Rows are grouped by what they feed in:
// bad_input_config.cpp (config and command line), bad_input_files.cpp (token
// files, checkpoints, run folders, telemetry) and bad_input_faults.cpp
// (signals, stopped ranks, full disks).
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "run_util.hpp"

namespace st::test::bad {

// What a row's steps share: its own empty folder, and a finished 2-rank run
// of the tiny model (checkpoints at steps 3 and 6) it may copy and damage.
struct Ctx {
  std::string dir;       // this row's folder (fresh, removed afterwards)
  std::string fixture;   // a finished run folder; copy it, never change it
  pid_t background = 0;  // a process a row started and must see ended
};

struct Case {
  std::string name;
  // Prepares files under ctx.dir and returns the command line to run (from
  // the helpers below); the command runs under a timeout, so a hang fails.
  std::function<std::string(Ctx&)> command;
  int exit_code = 2;
  std::vector<std::string> expect;  // substrings of the output, each naming the culprit
  // Further checks after the run (nothing written before was lost, nothing
  // was started, ...): returns "" or what is wrong.
  std::function<std::string(Ctx&, const RunResult&)> check = nullptr;
  bool alone = false;                              // timing-sensitive: run while no other row runs
  std::function<std::string()> skip_if = nullptr;  // a reason not to run here, or ""
};

std::vector<Case> config_cases();
std::vector<Case> file_cases();
std::vector<Case> fault_cases();

// Command lines. `args` follow the program name.
std::string trainer(int ranks, const std::string& args);
std::string analyze(const std::string& args);
std::string tiny();                         // " --config <src>/configs/models/tiny.yaml"
std::string quick(const std::string& out);  // tiny, few steps, fixed peak, --out
// File helpers for the rows.
void put(const std::string& path, const std::string& text);
std::string slurp(const std::string& path);
void copy_tree(const std::string& from, const std::string& to);
// Every file under `dir` with its size and modification time, to show that a
// refused run changed nothing.
std::string snapshot(const std::string& dir);
// Edits a JSON file in place.
void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& f);

}  // namespace st::test::bad
