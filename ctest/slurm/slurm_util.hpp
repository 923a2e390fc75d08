// Small helpers the Slurm tests share (test_slurm, test_multinode): quoting
// for the shell, and reading a job's files back.
#pragma once
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace st::test::slurm {

// `s` single-quoted for the shell.
inline std::string q(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// The whole file (empty when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The file as JSON (a discarded value when missing or malformed).
inline nlohmann::json load_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, false);
}

}  // namespace st::test::slurm
