// Device selection by PCI bus id across a node's ranks (see device_select.hpp).
#include "kernels/cuda/host/device_select.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.hpp"

namespace st::cuda_host {

std::string normalize_bus_id(const std::string& id) {
  size_t a = 0, b = id.size();
  while (a < b && std::isspace(static_cast<unsigned char>(id[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(id[b - 1]))) --b;
  std::string s = id.substr(a, b - a);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

namespace {
std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

DevicePlan plan_devices(const std::vector<std::vector<std::string>>& visible) {
  const int n = int(visible.size());
  DevicePlan p;
  p.ordinal.assign(size_t(n), -1);
  p.bus_id.assign(size_t(n), "");
  std::vector<int> blind, short_of;
  for (int r = 0; r < n; ++r) {
    const auto& v = visible[size_t(r)];
    if (v.empty()) {
      blind.push_back(r);
      continue;
    }
    const int pick = v.size() == 1 ? 0 : r;
    if (pick >= int(v.size())) {
      short_of.push_back(r);
      continue;
    }
    p.ordinal[size_t(r)] = pick;
    p.bus_id[size_t(r)] = normalize_bus_id(v[size_t(pick)]);
  }
  std::string err;
  if (!blind.empty()) err = "node-local rank(s) " + list(blind) + " see no CUDA device";
  if (!short_of.empty()) {
    size_t most = 0;
    for (const auto& v : visible) most = std::max(most, v.size());
    err += std::string(err.empty() ? "" : "; ") + std::to_string(n) +
           " ranks on this node but rank(s) " + list(short_of) + " see only " +
           std::to_string(visible[size_t(short_of[0])].size()) + " GPU(s); launch at most " +
           std::to_string(most) + " rank(s) per node, or bind one GPU per rank";
  }
  // One GPU per rank: a bus id taken twice is refused, naming the GPU and its ranks.
  std::map<std::string, std::vector<int>> takers;
  for (int r = 0; r < n; ++r)
    if (!p.bus_id[size_t(r)].empty()) takers[p.bus_id[size_t(r)]].push_back(r);
  for (const auto& [id, ranks] : takers)
    if (ranks.size() > 1)
      err += std::string(err.empty() ? "" : "; ") + "GPU " + id +
             " would be shared by node-local ranks " + list(ranks) +
             " (NCCL runs one rank per GPU); launch at most one rank per GPU";
  p.error = err;
  return p;
}

std::vector<std::vector<std::string>> gather_visible(Communicator* node,
                                                     const std::vector<std::string>& mine) {
  if (!node) return {mine};
  // One string per rank: the bus ids joined by '\n'.
  std::string packed;
  for (const auto& id : mine) packed += normalize_bus_id(id) + "\n";
  std::vector<std::vector<std::string>> out;
  for (const std::string& s : all_gather_strings(*node, packed)) {
    out.emplace_back();
    size_t at = 0;
    while (at < s.size()) {
      const size_t nl = s.find('\n', at);
      out.back().push_back(s.substr(at, nl - at));
      at = nl + 1;
    }
  }
  return out;
}
}  // namespace st::cuda_host
