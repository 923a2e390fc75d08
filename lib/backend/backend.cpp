// The CPU backend and the run-time loader of the CUDA backend library (see
// backend.hpp).
#include "backend/backend.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "core/error.hpp"
#include "core/util.hpp"
#include "scaletrain/seam_hash.hpp"

namespace st {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool strict) : strict_(strict) {}
  std::string name() const override { return strict_ ? "cpu-strict" : "cpu"; }
  std::string supports(const Config&) const override { return ""; }
  std::string preflight(const Config&, int, int) override { return ""; }
  Device& device() override { return strict_ ? cpu_strict_device() : cpu_device(); }
  Ops& ops() override { return cpu_ops(); }
  // The mesh's MPI groups are the device communicators: binding them is
  // all there is to make, after checking every rank's order.
  std::vector<Communicator*> make_communicators(const std::vector<Communicator*>& groups) override {
    check_same_entries(groups);
    std::lock_guard<std::mutex> g(mu_);
    for (Communicator* c : groups) {
      c->bind(device());
      made_.insert(c->uid());
    }
    return groups;
  }
  Communicator& communicator(Communicator& group) override {
    std::lock_guard<std::mutex> g(mu_);
    ST_CHECK(made_.count(group.uid()), "backend '", name(),
             "': no communicator was made at start for '", group.name(),
             "' (Backend::make_communicators); none is made lazily");
    return group;
  }
  std::optional<DevicePeak> peak(const Config& cfg) override {
    if (cfg.runtime.cpu_peak_gflops > 0)
      return DevicePeak{cfg.runtime.cpu_peak_gflops * 1e9, "config runtime.cpu_peak_gflops"};
    return std::nullopt;
  }

 private:
  bool strict_;
  std::mutex mu_;
  std::set<uint64_t> made_;  // the uid() of each group handed over
};

std::string this_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_backend_path), &info) && info.dli_fname)
    return std::filesystem::path(info.dli_fname).parent_path().string();
  return ".";
}

Backend* load_cuda() {
  static std::mutex mu;
  static Backend* loaded = nullptr;
  std::lock_guard<std::mutex> g(mu);
  if (loaded) return loaded;
  const std::string path = cuda_backend_path();
  if (!std::filesystem::exists(path))
    throw UsageError("runtime.device=cuda: the CUDA backend library '" + path +
                     "' does not exist (this build has no CUDA backend, or "
                     "SCALETRAIN_BACKEND_DIR points elsewhere); use runtime.device=cpu");
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    throw UsageError("runtime.device=cuda: cannot load the CUDA backend library '" + path +
                     "': " + (e ? e : "unknown error"));
  }
  auto table_fn = reinterpret_cast<ScaletrainBackendTableFn>(dlsym(h, kBackendTableSymbol));
  if (!table_fn) {
    const bool old_abi = dlsym(h, "scaletrain_cuda_backend") != nullptr;
    throw UsageError("runtime.device=cuda: '" + path + "' " +
                     (old_abi ? "is a backend library of an older scaletrain (entry point "
                                "scaletrain_cuda_backend); rebuild it from this tree"
                              : std::string("has no entry point ") + kBackendTableSymbol +
                                    " (not a scaletrain backend library)"));
  }
  const ScaletrainBackendTable* t = table_fn();
  if (!t || t->table_bytes < sizeof(ScaletrainBackendTable) || !t->seam_hash || !t->create)
    throw UsageError("runtime.device=cuda: '" + path +
                     "' returned an incomplete backend table; rebuild it from this tree");
  if (std::string(t->seam_hash) != SCALETRAIN_SEAM_HASH)
    throw UsageError("runtime.device=cuda: '" + path +
                     "' is stale: built from other seam headers (library seam hash " +
                     t->seam_hash + ", this program " + SCALETRAIN_SEAM_HASH +
                     "); rebuild the program and the library from one tree");
  char why[1024] = {0};
  Backend* b = static_cast<Backend*>(t->create(why, sizeof why));
  if (!b) throw UsageError("runtime.device=cuda: '" + path + "': " + why);
  loaded = b;
  return b;
}
}  // namespace

Backend& cpu_backend(bool strict) {
  static CpuBackend inline_be(false), strict_be(true);
  return strict ? strict_be : inline_be;
}

std::string cuda_backend_path() {
  const std::string dir = env("SCALETRAIN_BACKEND_DIR").value_or(this_library_dir());
  return (std::filesystem::path(dir) / kCudaBackendFile).string();
}

Backend& backend_for(const Config& cfg) {
  if (cfg.runtime.device == "cuda") return *load_cuda();
  ST_USAGE_CHECK(cfg.runtime.device == "cpu", "runtime.device: '", cfg.runtime.device,
                 "' is not valid; use cpu or cuda");
  return cpu_backend(cfg.runtime.strict_device);
}
}  // namespace st
