// Internal: builds and checks index.json (rank 0, at commit) from every
// rank's shard entries. Format: docs/checkpoint-format.md.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st::ckpt {

// `ranks[r]` = {"rank", "file", "bytes", "shards": [...]} as gathered from rank r.
// Throws Error naming the tensor when shards disagree on the global shape or
// do not cover it exactly once (replicas with identical box and checksum are
// kept once, from the lowest rank).
nlohmann::json build_index(const std::vector<nlohmann::json>& ranks, long step,
                           const nlohmann::json& layout, const nlohmann::json& scalars);

int64_t numel(const std::vector<int64_t>& shape);

}  // namespace st::ckpt
