// Human output: rank 0 prints (log0), every rank may warn (logw). Everything
// printed by rank 0 is also appended to the run folder's log.txt once opened.
// Every line starts with the UTC time in ISO 8601 (2026-12-02T07:01:02Z), so
// Slurm logs read by time; a warning's lines then name the rank ([rank 3]).
#pragma once
#include <string>

#include "core/error.hpp"

namespace st {
void log_set_rank(int rank);
void log_open_file(const std::string& path);  // rank 0 only; appends
void log_close_file();
void log0_str(const std::string& s);
void logw_str(const std::string& s);  // any rank, to stderr, prefixed with rank

template <typename... A>
void log0(A&&... a) { log0_str(detail::cat(a...)); }
template <typename... A>
void logw(A&&... a) { logw_str(detail::cat(a...)); }
}  // namespace st
