// Implementation of index.hpp.
#include "checkpoint/index.hpp"

#include "checkpoint/rank_file.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st::ckpt {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

nlohmann::json build_index(const std::vector<nlohmann::json>& ranks, long step,
                           const nlohmann::json& layout, const nlohmann::json& scalars) {
  using nlohmann::json;
  json tensors = json::object();
  json files = json::array();
  int64_t total = 0;
  for (const auto& r : ranks) {
    files.push_back({{"rank", r["rank"]},
                     {"file", r["file"]},
                     {"bytes", r["bytes"]},
                     {"file_bytes", r["file_bytes"]},
                     {"file_crc32c", r["file_crc32c"]},
                     {"meta_crc32c", r["meta_crc32c"]},
                     {"block_bytes", r["block_bytes"]},
                     {"data_extents", r["data_extents"]}});
    total += r["bytes"].get<int64_t>();
    for (const auto& s : r["shards"]) {
      const std::string name = s["name"];
      json& t = tensors[name];
      if (t.is_null())
        t = {{"global_shape", s["global_shape"]}, {"dtype", "float32"}, {"shards", json::array()}};
      if (t["global_shape"] != s["global_shape"])
        throw Error(detail::cat("tensor '", name, "': rank ", r["rank"].get<int>(),
                                " has global shape ", s["global_shape"].dump(),
                                " but another rank ", t["global_shape"].dump()));
      bool replica = false;
      for (const auto& o : t["shards"]) {
        if (o["offset"] == s["offset"] && o["shape"] == s["shape"]) {
          if (o["checksum"] != s["checksum"])
            throw Error(detail::cat("tensor '", name, "': replicas of the shard at offset ",
                                    s["offset"].dump(), " differ between ",
                                    o["file"].get<std::string>(), " and ",
                                    r["file"].get<std::string>()));
          replica = true;
          break;
        }
      }
      if (replica) continue;
      t["shards"].push_back({{"file", r["file"]},
                             {"rank", r["rank"]},
                             {"offset", s["offset"]},
                             {"shape", s["shape"]},
                             {"checksum", s["checksum"]},
                             {"file_offset", s["file_offset"]},
                             {"block_crc32c", s["block_crc32c"]}});
    }
  }
  for (auto& [name, t] : tensors.items()) {
    int64_t have = 0;
    for (const auto& s : t["shards"]) have += numel(s["shape"].get<std::vector<int64_t>>());
    int64_t want = numel(t["global_shape"].get<std::vector<int64_t>>());
    if (have != want)
      throw Error(detail::cat("tensor '", name, "': shards hold ", have,
                              " elements but the global shape ", t["global_shape"].dump(), " has ",
                              want, " (missing or overlapping shards)"));
  }
  return {{"format", kFormat},
          {"step", step},
          {"world_size", int(ranks.size())},
          {"time", iso_time_utc()},
          {"checksum_algo", "crc32c"},
          {"dtype", "float32"},
          {"layout", layout},
          {"scalars", scalars},
          {"bytes", total},
          {"files", files},
          {"tensors", tensors}};
}

}  // namespace st::ckpt
