// Error formatting shared by every check macro (see error.hpp). The MPI and
// HDF5 formatters live with the modules that link those libraries, so tools
// that link only core (the analysis tools) need neither.
#include "core/error.hpp"

#include <cstdio>

namespace st {
namespace {
std::string g_host = "?";
int g_rank = -1;
}  // namespace

void set_error_identity(const std::string& host, int rank) {
  g_host = host;
  g_rank = rank;
}

std::string error_prefix(const char* file, int line) {
  return detail::cat("[", g_host, " rank ", g_rank, " ", file, ":", line, "] ");
}

void throw_error(const char* lib, const char* file, int line, const std::string& what) {
  throw Error(detail::cat(error_prefix(file, line), lib, ": ", what));
}

void throw_internal_error(const char* file, int line, const std::string& what) {
  throw InternalError(detail::cat(error_prefix(file, line), "internal error (a bug): ", what));
}

}  // namespace st
