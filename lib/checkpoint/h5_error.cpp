// st::throw_hdf5_error (declared in core/error.hpp): formats the calling
// thread's HDF5 error stack into the exception, with host, rank, file:line.
#include <hdf5.h>

#include <string>

#include "core/error.hpp"

namespace st {
namespace {
std::string msg_of(hid_t id) {
  char buf[256] = {0};
  if (id <= 0 || H5Eget_msg(id, nullptr, buf, sizeof buf) < 0) return "?";
  return buf;
}

herr_t walk(unsigned n, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::string*>(data);
  *out += detail::cat("\n  #", n, " ", e->func_name ? e->func_name : "?",
                      "(): ", e->desc ? e->desc : "", " [", msg_of(e->maj_num), " / ",
                      msg_of(e->min_num), "]");
  return 0;
}

// The operating system's reason, when the stack carries one (the sec2 driver
// records "..., errno = 28, error message = 'No space left on device', ...").
std::string system_reason(const std::string& stack) {
  const std::string key = "error message = '";
  size_t a = stack.find(key);
  if (a == std::string::npos) return "";
  a += key.size();
  size_t b = stack.find('\'', a);
  return b == std::string::npos ? "" : stack.substr(a, b - a);
}
}  // namespace

void throw_hdf5_error(const char* call, const char* file, int line) {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &stack);
  H5Eclear2(H5E_DEFAULT);
  if (stack.empty()) stack = " (empty HDF5 error stack)";
  // The cause a person can act on (a full disk, a permission) goes first;
  // the library's stack follows for the record.
  const std::string why = system_reason(stack);
  throw Error(error_prefix(file, line) + "HDF5: " + call + " failed" +
              (why.empty() ? "" : ": " + why) + "; HDF5 error stack:" + stack);
}
}  // namespace st
