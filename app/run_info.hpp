// What a run folder says about the run: run.json (resolved config, ranks and
// hosts, versions, git commit, device peak) and each rank's telemetry header.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"
#include "parallel/mesh.hpp"
#include "runtime/runtime.hpp"
#include "tensor/device.hpp"

namespace st {
struct RunInfo {
  const Runtime* rt;
  const Config* cfg;
  int64_t n_params;
  double peak_flops;  // per rank, in the run's precision
  std::string peak_source;
  int threads;
  const Mesh* mesh;                 // this rank's coordinates
  std::string device_name = "cpu";  // "cpu" or the GPU's name (rank 0's in run.json)
  std::string device_id = "cpu";    // "cpu" or "cuda:<ordinal>" (telemetry header)
  std::string compute;              // what the kernels run on (Ops::describe: BLAS, core, threads)
  std::string run_id;               // run.json and every header (run_id_for)
  // What a device's memory is measured against: a GPU's total memory, or
  // for CPU ranks the host's available memory over its ranks at start
  // (check_host_memory); -1 when unknown. Rank 0's in run.json.
  int64_t mem_capacity = -1;
  std::string mem_capacity_source;
};
// The run folder's run id: the one its run.json already holds (a resumed run
// keeps it, so the rank files it appends to still match), else a new random one.
std::string run_id_for(const std::string& out);
double epoch_seconds();
// info's memory capacity: the device's own (a GPU's total), else
// host_share (check_host_memory's share of this host per rank, -1: unknown).
void set_memory_capacity(RunInfo& info, const Device& dev, int64_t host_share, const Runtime& rt);
nlohmann::json telemetry_header(const RunInfo& info);
void write_run_json(const std::string& path, const RunInfo& info);
std::string run_banner(const RunInfo& info);
}  // namespace st
