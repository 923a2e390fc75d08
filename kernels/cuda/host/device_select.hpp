// Which GPU each rank of a node takes, as a pure function of what every
// node-local rank sees (kernels/cuda/device.cpp feeds it the PCI bus ids of
// its visible devices, gathered over the node's ranks): compiled without
// nvcc, so the rule and its refusals are tested on CPUs (label cuda-host).
//
// The rule: a rank that sees exactly one GPU takes it (a launcher binding a
// GPU per task, srun --gpus-per-task=1); otherwise node-local rank r takes
// its r-th visible GPU (CUDA_VISIBLE_DEVICES narrows and renumbers them).
// Then no GPU may be taken by two ranks: NCCL refuses that ("Duplicate GPU
// detected", keyed by the PCI bus id, as here), and so does this plan,
// naming the bus id and the ranks, before any communicator exists.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace st::cuda_host {

struct DevicePlan {
  std::vector<int> ordinal;         // per node-local rank: its CUDA ordinal, -1 if none
  std::vector<std::string> bus_id;  // per node-local rank: the bus id taken, "" if none
  std::string error;                // "" or why the node cannot run (same on every rank)
  bool ok() const { return error.empty(); }
};

// Lower case, without surrounding blanks: bus ids compare as strings
// ("0000:1B:00.0" and "0000:1b:00.0" are one GPU).
std::string normalize_bus_id(const std::string& id);

// visible[r]: the bus ids node-local rank r sees, in its CUDA ordinal order.
// The verdict is the same whichever rank computes it.
DevicePlan plan_devices(const std::vector<std::vector<std::string>>& visible);

// Every node-local rank's visible bus ids, gathered over `node` through the
// communicator's front (collective over it, under its timeout; nullptr:
// this rank alone).
std::vector<std::vector<std::string>> gather_visible(Communicator* node,
                                                     const std::vector<std::string>& mine);
}  // namespace st::cuda_host
