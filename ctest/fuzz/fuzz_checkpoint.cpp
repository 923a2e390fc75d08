// Fuzz harness: the checkpoint reader (index.json and an HDF5 rank file).
// Input: index.json, then "\n#--h5\n", then the bytes of rank_00000.h5; both
// land in a step folder named after the index's "step" when it has a usable
// one (so a consistent input can pass the folder binding), else
// step_00000001. Contract: verify_checkpoint and
// find_latest_good never throw and never crash; when the folder verifies,
// load() of every tensor either fills it or throws st::Error/UsageError.
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/index.hpp"
#include "core/error.hpp"
#include "fuzz_util.hpp"

namespace {
// Every HDF5 id the reader opened is closed again, on every path (a leaked
// file id would keep the file open and its memory held).
void check_no_open_ids(const char* after) {
  const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n > 0) {
    std::fprintf(stderr, "%zd HDF5 object(s) still open after %s\n", n, after);
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace st;
  namespace fs = std::filesystem;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::split(in, "\n#--h5\n", 2);
  long n = 1;
  auto j = nlohmann::json::parse(parts[0], nullptr, false);
  if (j.is_object() && j.contains("step") && j["step"].is_number_unsigned() &&
      j["step"].get<uint64_t>() < 100000000)
    n = long(j["step"].get<uint64_t>());
  const std::string dir = fuzz::scratch() + "/ckpt";
  const std::string step = dir + "/" + step_dir_name(n);
  fs::remove_all(dir);
  fs::create_directories(step);
  fuzz::write(step + "/index.json", parts[0]);
  if (parts.size() > 1) fuzz::write(step + "/rank_00000.h5", parts[1]);

  const std::string why = verify_checkpoint(step);
  (void)find_latest_good(dir);
  check_no_open_ids("verify_checkpoint");
  if (!why.empty()) return 0;
  // Verified: load every tensor whole, within a memory bound.
  ckpt::Index idx = ckpt::read_index(step);
  std::vector<std::vector<float>> bufs;
  std::vector<ShardView> want;
  int64_t total = 0;
  for (const auto& [name, t] : idx.tensors) {
    const int64_t n = ckpt::numel(t.global_shape);
    if (total + n > (int64_t(1) << 22)) break;
    total += n;
    bufs.emplace_back(size_t(n));
    ShardView v;
    v.name = name;
    v.global_shape = t.global_shape;
    v.offset.assign(t.global_shape.size(), 0);
    v.shape = t.global_shape;
    v.data = bufs.back().data();
    want.push_back(v);
    // The same tensor asked for flat, as a ZeRO shard would.
    if (t.global_shape.size() > 1 && total + n <= (int64_t(1) << 22)) {
      total += n;
      bufs.emplace_back(size_t(n));
      want.push_back({name, {n}, {0}, {n}, bufs.back().data()});
    }
  }
  try {
    (void)load(step, want, 0);
  } catch (const Error&) {
  } catch (const UsageError&) {
  }
  check_no_open_ids("load");
  return 0;
}
