// Rank-0 logging to stdout and log.txt (see log.hpp).
#include "core/log.hpp"

#include <cstdio>
#include <mutex>

namespace st {
namespace {
int g_rank = 0;
std::FILE* g_file = nullptr;
std::mutex g_mu;
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
  std::lock_guard<std::mutex> lk(g_mu);
  std::fprintf(stdout, "%s\n", s.c_str());
  std::fflush(stdout);
  if (g_file) {
    std::fprintf(g_file, "%s\n", s.c_str());
    std::fflush(g_file);
  }
}

void logw_str(const std::string& s) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::fprintf(stderr, "[rank %d] %s\n", g_rank, s.c_str());
  std::fflush(stderr);
  if (g_file) {
    std::fprintf(g_file, "[rank %d] %s\n", g_rank, s.c_str());
    std::fflush(g_file);
  }
}
}  // namespace st
