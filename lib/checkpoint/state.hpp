// What one rank's checkpoint holds, as views of its memory: the shards of
// the global tensors and the scalars. Apart from checkpoint.hpp (the MPI and
// HDF5 machinery that saves and loads them) so the engine, which only builds
// these views, compiles and links without MPI.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace st {

class Device;

// One shard of a global fp32 tensor held by this rank.
struct ShardView {
  std::string name;                   // global tensor name, '/' separates groups
  std::vector<int64_t> global_shape;  // shape of the full tensor
  std::vector<int64_t> offset;        // where this shard starts (same rank as global_shape)
  std::vector<int64_t> shape;         // this shard's extent (a hyperslab)
  float* data = nullptr;              // contiguous, row-major
  // Instead of data, for saving: the shard's values as bf16 bits (bf16
  // optimizer state). The snapshot widens them; the file holds fp32 either
  // way, so a checkpoint does not depend on optim.state_dtype.
  const uint16_t* bf16 = nullptr;
};

// Everything one rank saves.
struct CkptState {
  std::vector<ShardView> tensors;
  // Where `data` of the shards lives: null for host memory, else a Device
  // whose compute stream produced it; save() copies it from there into its
  // (pinned) snapshot buffers after the work enqueued so far.
  Device* device = nullptr;
  nlohmann::json scalars = nlohmann::json::object();  // step, lr position, data loader, ...
  std::vector<uint8_t> rng;                           // per-rank RNG state bytes
};
}  // namespace st
