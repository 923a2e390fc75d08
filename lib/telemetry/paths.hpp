// Where a run folder keeps its per-rank files: the one place their names are
// formatted (the trainer writes them, the reader and the analysis find them).
#pragma once
#include <cstdio>
#include <string>

namespace st::telemetry {

// "rank_00012" + suffix: a rank's file name in telemetry/ (".jsonl") and, for
// the flight recorder, in flight/ (".json").
inline std::string rank_file_name(int rank, const char* suffix) {
  char b[48];
  std::snprintf(b, sizeof b, "rank_%05d%s", rank, suffix);
  return b;
}

// RUN_DIR/telemetry/rank_NNNNN.jsonl
inline std::string rank_telemetry_path(const std::string& run_dir, int rank) {
  return run_dir + "/telemetry/" + rank_file_name(rank, ".jsonl");
}

// True for a name rank_file_name could have produced with this suffix.
inline bool is_rank_file_name(const std::string& name, const std::string& suffix) {
  return name.rfind("rank_", 0) == 0 && name.size() > 5 + suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace st::telemetry
