// Errors for every scaletrain library: one exception type, one check macro per
// external library. Each message carries host, rank, file:line and the
// library's own error string, so a failure on rank 417 of 512 is findable.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace st {

// A user-facing error: bad config, bad file, bad layout. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Anything else that went wrong at run time. Exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bug of the calling code, not of the input: an internal API used against
// its contract (ST_INTERNAL_CHECK). An Error, so exit code 1.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Identity printed in every error message; set once by the runtime.
void set_error_identity(const std::string& host, int rank);
std::string error_prefix(const char* file, int line);

[[noreturn]] void throw_error(const char* lib, const char* file, int line, const std::string& what);
[[noreturn]] void throw_internal_error(const char* file, int line, const std::string& what);

namespace detail {
template <typename... A>
std::string cat(A&&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}
}  // namespace detail
}  // namespace st

#define ST_CHECK(cond, ...)                                                                \
  do {                                                                                    \
    if (!(cond)) ::st::throw_error("scaletrain", __FILE__, __LINE__,                      \
                                   ::st::detail::cat("check failed: " #cond ": ", __VA_ARGS__)); \
  } while (0)

// Internal API misuse (a programming error): InternalError, exit 1. Bad
// input from the user (config, files, command line) is ST_USAGE_CHECK's.
#define ST_INTERNAL_CHECK(cond, ...)                                                   \
  do {                                                                                \
    if (!(cond)) ::st::throw_internal_error(__FILE__, __LINE__,                       \
                                            ::st::detail::cat(#cond ": ", __VA_ARGS__)); \
  } while (0)

// Bad input (config, files, command line): UsageError, exit 2.
#define ST_USAGE_CHECK(cond, ...)                                  \
  do {                                                            \
    if (!(cond)) throw ::st::UsageError(::st::detail::cat(__VA_ARGS__)); \
  } while (0)

// MPI: the message includes MPI_Error_string of the return code.
#define ST_MPI_CHECK(call)                                                        \
  do {                                                                            \
    int st_mpi_rc_ = (call);                                                      \
    if (st_mpi_rc_ != 0) ::st::throw_mpi_error(#call, st_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

// HDF5: negative return means failure; the HDF5 error stack is appended.
#define ST_HDF5_CHECK(call)                                                           \
  ([&]() {                                                                            \
    auto st_h5_rc_ = (call);                                                          \
    if (st_h5_rc_ < 0) ::st::throw_hdf5_error(#call, __FILE__, __LINE__);             \
    return st_h5_rc_;                                                                 \
  }())

namespace st {
[[noreturn]] void throw_mpi_error(const char* call, int rc, const char* file, int line);
[[noreturn]] void throw_hdf5_error(const char* call, const char* file, int line);
}  // namespace st
