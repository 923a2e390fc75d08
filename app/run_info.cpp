// Implementation of run_info.hpp.
#include "run_info.hpp"

#include <H5public.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "core/build_commit.hpp"
#include "core/phase_clock.hpp"
#include "core/util.hpp"
#include "scaletrain/build_config.hpp"
#include "trainer.hpp"

using nlohmann::json;

namespace st {
double epoch_seconds() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

static json mesh_json(const Config& c) {
  return {{"dp", c.parallel.dp},
          {"tp", c.parallel.tp},
          {"pp", c.parallel.pp},
          {"cp", c.parallel.cp},
          {"sp", c.parallel.sp},
          {"zero_stage", c.parallel.zero_stage},
          {"num_model_chunks", c.parallel.num_model_chunks},
          {"order", "pp,dp,cp,tp"}};
}

static json coords_json(const MeshCoords& k) {
  return {{"pp", k.pp}, {"dp", k.dp}, {"cp", k.cp}, {"tp", k.tp}};
}

// Every rank's coordinates and layer ranges (run.json): [first, last) per chunk.
static json ranks_json(const Config& c, int world) {
  const auto& p = c.parallel;
  const MeshDims d{p.pp, p.dp, p.cp, p.tp};
  json a = json::array();
  for (int r = 0; r < world; ++r) {
    const MeshCoords k = mesh_coords(r, d);
    json layers = json::array();
    for (auto& [f, l] : stage_layers(c, k.pp)) layers.push_back({f, l});
    a.push_back({{"rank", r}, {"coords", coords_json(k)}, {"layers", layers}});
  }
  return a;
}

std::string run_id_for(const std::string& out) {
  try {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(out + "/run.json", ec)) throw std::runtime_error("");
    json j = json::parse(read_file(out + "/run.json"));
    if (j.is_object() && j.contains("run_id") && j["run_id"].is_string())
      return j["run_id"].get<std::string>();
  } catch (const std::exception&) {
    // No run.json yet (a new run) or an unreadable one: a new id.
  }
  std::random_device rd;
  char b[40];
  std::snprintf(b, sizeof b, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return b;
}

void set_memory_capacity(RunInfo& info, const Device& dev, int64_t host_share, const Runtime& rt) {
  if (const int64_t cap = dev.capacity_bytes(); cap > 0) {
    info.mem_capacity = cap;
    info.mem_capacity_source = "total memory of " + dev.id();
    return;
  }
  info.mem_capacity = host_share;
  if (host_share < 0) {
    info.mem_capacity_source = "unknown (neither MemAvailable nor a cgroup limit could be read)";
    return;
  }
  size_t here = 1;
  for (const auto& [host, ranks] : rt.hosts())
    if (host == rt.host()) here = std::max<size_t>(1, ranks.size());
  info.mem_capacity_source = "memory available to the job on " + rt.host() +
                             " at start (MemAvailable, cgroup memory.max) over its " +
                             std::to_string(here) + " rank(s)";
}

json telemetry_header(const RunInfo& info) {
  const Runtime& rt = *info.rt;
  const Config& c = *info.cfg;
  json j = {{"run_id", info.run_id},
            {"run_name", c.runtime.name},
            {"rank", rt.rank()},
            {"world_size", rt.world_size()},
            {"local_rank", rt.local_rank()},
            {"local_size", rt.local_size()},
            {"host", rt.host()},
            {"mesh", mesh_json(c)},
            {"coords", coords_json(info.mesh->coords())},
            {"device", info.device_id},
            {"device_name", info.device_name},
            {"threads", info.threads},
            {"start_time", iso_time_utc()}};
  j["startup_s"] = process_age_s();
  j["startup_cpu_s"] = process_cpu_seconds();
  // This rank's own layers (not every rank's table: the header is per rank).
  json layers = json::array();
  for (auto& [f, l] : stage_layers(c, info.mesh->coords().pp)) layers.push_back({f, l});
  j["layers"] = layers;
  j["slurm_job_id"] = rt.slurm().present() ? json(rt.slurm().job_id) : json(nullptr);
  return j;
}

void write_run_json(const std::string& path, const RunInfo& info) {
  const Runtime& rt = *info.rt;
  const Config& c = *info.cfg;
  json hosts = json::array();
  for (auto& [h, ranks] : rt.hosts()) hosts.push_back({{"host", h}, {"ranks", ranks}});
  const int64_t gb = global_batch(c);
  // The version compiled against (H5get_libversion would initialise HDF5
  // here, before the checkpoint code can turn off its atexit handler).
  const unsigned h5maj = H5_VERS_MAJOR, h5min = H5_VERS_MINOR, h5rel = H5_VERS_RELEASE;
  json j = {
      {"schema", "scaletrain.run/1"},
      {"run_id", info.run_id},
      {"name", c.runtime.name},
      {"start_time", iso_time_utc()},
      {"git_commit", build_commit()},
      {"version", SCALETRAIN_VERSION},
      {"world_size", rt.world_size()},
      {"hosts", hosts},
      {"mesh", mesh_json(c)},
      {"ranks", ranks_json(c, rt.world_size())},
      {"config", json::parse(config_to_json(c))},
      {"config_path", c.config_path},
      {"overrides", c.overrides},
      {"model",
       {{"name", c.model.name},
        {"n_params", info.n_params},
        {"n_layers", c.model.n_layers},
        {"d_model", c.model.d_model},
        {"n_heads", c.model.n_heads},
        {"n_kv_heads", c.model.n_kv_heads},
        {"ffn_hidden", c.model.ffn_hidden},
        {"vocab_size", c.model.vocab_size},
        {"seq_len", c.model.seq_len}}},
      {"global_batch", gb},
      {"global_batch_tokens", gb * c.model.seq_len},
      {"device",
       {{"name", info.device_name},
        {"kind", c.runtime.device},
        {"precision", c.train.precision},
        {"precision_choice", c.train.precision_choice},
        {"peak_flops", info.peak_flops},
        {"peak_source", info.peak_source},
        {"threads_per_rank", info.threads},
        {"memory_capacity_bytes", info.mem_capacity},
        {"memory_capacity_source", info.mem_capacity_source}}},
      {"versions",
       {{"mpi", rt.mpi_version()},
        {"mpi_tcp_links", rt.mpi_tcp_links()},
        {"hdf5", std::to_string(h5maj) + "." + std::to_string(h5min) + "." + std::to_string(h5rel)},
        {"compute", info.compute},
        {"compiler", __VERSION__}}},
  };
  if (rt.slurm().present())
    j["slurm"] = {{"job_id", rt.slurm().job_id},     {"job_name", rt.slurm().job_name},
                  {"nodelist", rt.slurm().nodelist}, {"partition", rt.slurm().partition},
                  {"ntasks", rt.slurm().ntasks},     {"nnodes", rt.slurm().nnodes}};
  write_file_atomic(path, j.dump(2) + "\n");
}

std::string run_banner(const RunInfo& info) {
  const Config& c = *info.cfg;
  char b[512];
  std::snprintf(b, sizeof b,
                "%s (%s): model %s %.2fM params, %d layers d=%d, world %d (pp %d dp %d cp %d tp "
                "%d, zero %d), %d thread(s)/rank, "
                "device %s, peak %.1f GFLOP/s per rank",
                SCALETRAIN_VERSION, build_commit(), c.model.name.c_str(), info.n_params / 1e6,
                c.model.n_layers, c.model.d_model, info.rt->world_size(), c.parallel.pp,
                c.parallel.dp, c.parallel.cp, c.parallel.tp, c.parallel.zero_stage, info.threads,
                info.device_name.c_str(), info.peak_flops / 1e9);
  return b;
}
}  // namespace st
