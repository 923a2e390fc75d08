// Shared by the fuzz harnesses: a private scratch folder per process (in
// /dev/shm when there is one, so files cost no disk I/O), writing the bytes
// a harness hands to a reader, and splitting one input into parts.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace st::fuzz {

// The folder exists for the life of the process and is removed at exit.
struct Scratch {
  std::string dir;
  Scratch() {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    dir = base + "/scaletrain-fuzz-XXXXXX";
    if (!::mkdtemp(dir.data())) std::abort();
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

inline const std::string& scratch() {
  static const Scratch s;
  return s.dir;
}

inline void write(const std::string& path, std::string_view bytes) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), std::streamsize(bytes.size()));
}

// Splits the input at each occurrence of `sep` (at most `max_parts` parts;
// the last part keeps the rest). Lets one input carry several files.
inline std::vector<std::string_view> split(std::string_view in, std::string_view sep,
                                           size_t max_parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < max_parts) {
    size_t p = in.find(sep);
    if (p == std::string_view::npos) break;
    out.push_back(in.substr(0, p));
    in.remove_prefix(p + sep.size());
  }
  out.push_back(in);
  return out;
}

}  // namespace st::fuzz
