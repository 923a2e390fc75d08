// Test helper: read every tensor of a committed checkpoint back whole, through
// the resharding loader, so tests can compare the state of runs that used
// different layouts element by element.
#pragma once
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace st::test {

// Tensors whose name starts with `prefix` ("" = all), keyed by name.
inline std::map<std::string, std::vector<float>> read_checkpoint(const std::string& step_dir,
                                                                 const std::string& prefix = "") {
  auto idx = nlohmann::json::parse(std::ifstream(step_dir + "/index.json"));
  std::map<std::string, std::vector<float>> out;
  std::vector<st::ShardView> want;
  for (auto& [name, t] : idx["tensors"].items()) {
    if (name.rfind(prefix, 0) != 0) continue;
    auto shape = t["global_shape"].get<std::vector<int64_t>>();
    int64_t n = 1;
    for (auto d : shape) n *= d;
    out[name].resize(size_t(n));
  }
  for (auto& [name, buf] : out) {
    auto shape = idx["tensors"][name]["global_shape"].get<std::vector<int64_t>>();
    want.push_back({name, shape, std::vector<int64_t>(shape.size(), 0), shape, buf.data()});
  }
  st::load(step_dir, want, -1);
  return out;
}
}  // namespace st::test
