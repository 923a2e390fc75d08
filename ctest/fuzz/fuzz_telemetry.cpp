// Fuzz harness: the telemetry reader and the run analysis of
// scaletrain-analyze. Input: run.json, then "\n#--rank\n", then a rank file
// (telemetry/rank_00000.jsonl), optionally "\n#--rank\n" and rank 1's file.
// Contract: the reader never throws for content (problems are errors naming
// file:line), and the analysis either refuses with UsageError or writes its
// tables; never another exception, a crash or a hang.
#include <cstdint>
#include <filesystem>
#include <string>

#include "analyze/report.hpp"
#include "analyze/run_summary.hpp"
#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "telemetry/reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace st;
  namespace fs = std::filesystem;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::split(in, "\n#--rank\n", 3);
  const std::string dir = fuzz::scratch() + "/run";
  fs::remove_all(dir);
  fs::create_directories(dir + "/telemetry");
  fuzz::write(dir + "/run.json", parts[0]);
  for (size_t r = 1; r < parts.size(); ++r)
    fuzz::write(dir + "/telemetry/rank_0000" + std::to_string(r - 1) + ".jsonl", parts[r]);

  try {
    (void)telemetry::read_rank_file(dir + "/telemetry/rank_00000.jsonl");
  } catch (const UsageError&) {  // documented: only when the file cannot be opened
    if (parts.size() > 1) throw;
  }
  auto run = telemetry::read_run(dir, 1);
  analysis::Options opt;
  opt.allow_bad_ranks = true;
  try {
    auto s = analysis::summarize_run(run, opt);
    (void)analysis::write_run_outputs(s, dir + "/analysis", false);
  } catch (const UsageError&) {
  }
  return 0;
}
