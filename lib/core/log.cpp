// Rank-0 logging to stdout and log.txt (see log.hpp).
#include "core/log.hpp"

#include <cstdio>
#include <mutex>
#include <string_view>

#include "core/util.hpp"

namespace st {
namespace {
int g_rank = 0;
std::FILE* g_file = nullptr;
std::mutex g_mu;

// Every line of `s` behind `prefix` (the UTC time, and a warning's rank).
void put_lines(std::FILE* f, const std::string& prefix, const std::string& s) {
  size_t a = 0;
  while (true) {
    const size_t b = s.find('\n', a);
    const std::string_view line(s.data() + a, (b == std::string::npos ? s.size() : b) - a);
    std::fprintf(f, "%s%.*s\n", prefix.c_str(), int(line.size()), line.data());
    if (b == std::string::npos || b + 1 == s.size()) break;
    a = b + 1;
  }
  std::fflush(f);
}
}  // namespace

void log_set_rank(int rank) { g_rank = rank; }

void log_open_file(const std::string& path) {
  if (g_rank != 0) return;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_file) std::fclose(g_file);
  g_file = std::fopen(path.c_str(), "a");
}

void log_close_file() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_file) std::fclose(g_file);
  g_file = nullptr;
}

void log0_str(const std::string& s) {
  if (g_rank != 0) return;
  const std::string prefix = iso_time_utc() + " ";
  std::lock_guard<std::mutex> lk(g_mu);
  put_lines(stdout, prefix, s);
  if (g_file) put_lines(g_file, prefix, s);
}

void logw_str(const std::string& s) {
  const std::string prefix = iso_time_utc() + " [rank " + std::to_string(g_rank) + "] ";
  std::lock_guard<std::mutex> lk(g_mu);
  put_lines(stderr, prefix, s);
  if (g_file) put_lines(g_file, prefix, s);
}
}  // namespace st
