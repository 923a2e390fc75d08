// Test-only stand-in for st::throw_mpi_error, linked only while lib/runtime
// (which owns the real one) does not provide a st_runtime target.
#include <mpi.h>

#include "core/error.hpp"

namespace st {
void throw_mpi_error(const char* call, int rc, const char* file, int line) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int n = 0;
  MPI_Error_string(rc, buf, &n);
  throw Error(error_prefix(file, line) + "MPI: " + call + " failed: " + buf);
}
}  // namespace st
