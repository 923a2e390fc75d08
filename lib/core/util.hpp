// Small utilities every module uses: wall clock, string distance for
// "did you mean", environment lookups, file helpers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace st {
double wall_time();  // seconds, monotonic
std::string iso_time_utc();  // 2026-11-29T08:53:34Z
std::string timestamp_compact();  // 20261129-085334
size_t edit_distance(const std::string& a, const std::string& b);
// Closest candidate by edit distance, or "" when none is reasonably close.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);
std::optional<std::string> env(const char* name);
std::string read_file(const std::string& path);  // throws UsageError naming the file
void write_file_atomic(const std::string& path, const std::string& text);  // tmp + fsync + rename
void fsync_dir(const std::string& dir);
std::string human_bytes(double bytes);
std::vector<std::string> split(const std::string& s, char sep);
// Byte offset of the first byte that is not part of valid UTF-8 (overlong
// forms, surrogates and code points above U+10FFFF are invalid), or
// std::string::npos when `s` is valid.
size_t utf8_invalid_at(const std::string& s);
// `s` with every byte outside printable ASCII written as \xNN, for messages.
std::string escape_bytes(const std::string& s);
// main() of a docs generator (docs/config.md, docs/telemetry.md): writes
// `text` to the file named by argv[1] (atomically), or to stdout without
// one. Returns the exit status; errors are printed prefixed with `prog`.
int write_generated_doc(int argc, char** argv, const char* prog, const std::string& text);
// One CSV line into fields: commas inside double quotes do not split, the
// quotes themselves and a trailing '\r' are dropped.
std::vector<std::string> split_csv_line(const std::string& line);
}  // namespace st
