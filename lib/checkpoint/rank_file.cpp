// Implementation of rank_file.hpp: writes one dataset per shard (contiguous,
// float32 little-endian) with global_shape/offset/checksum/dtype attributes.
#include "checkpoint/rank_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint/h5.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/util.hpp"

namespace st::ckpt {

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.h5", rank);
  return buf;
}

int64_t ShardOut::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open '" + path + "' to fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync of '" + path + "' failed: " + std::strerror(err));
}

nlohmann::json write_rank_file(const std::string& path, long step, int rank, int world,
                               const std::vector<ShardOut>& shards, const std::string& scalars,
                               const std::vector<uint8_t>& rng, int64_t& bytes,
                               const std::function<void(const std::string&)>& hook,
                               RankFileTimes* times) {
  RankFileTimes tt;
  double t = wall_time();
  auto lap = [&t](double& into) {
    const double now = wall_time();
    into += now - t;
    t = now;
  };
  h5::quiet_errors();
  nlohmann::json entries = nlohmann::json::array();
  try {
    h5::Handle file = h5::create_file(path);
    h5::write_attr_str(file, "format", kFormat);
    h5::write_attr_i64(file, "step", {step});
    h5::write_attr_i64(file, "rank", {rank});
    h5::write_attr_i64(file, "world_size", {world});
    h5::write_attr_str(file, "checksum_algo", "crc32c");
    lap(tt.create_s);

    h5::Handle lcpl(ST_HDF5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    ST_HDF5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    for (const auto& s : shards) {
      std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
      h5::Handle space(ST_HDF5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
      h5::Handle d(ST_HDF5_CHECK(
          H5Dcreate2(file, s.name.c_str(), H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT)));
      size_t nbytes = size_t(s.numel()) * sizeof(float);
      uint32_t crc = crc32c(s.data, nbytes);
      ST_HDF5_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data));
      h5::write_attr_i64(d, "global_shape", s.global_shape);
      h5::write_attr_i64(d, "offset", s.offset);
      h5::write_attr_u32(d, "checksum", crc);
      h5::write_attr_str(d, "dtype", "float32");
      d.close();
      bytes += int64_t(nbytes);
      entries.push_back({{"name", s.name},
                         {"global_shape", s.global_shape},
                         {"offset", s.offset},
                         {"shape", s.shape},
                         {"checksum", crc}});
      if (hook) hook("dataset");
    }
    h5::write_bytes(file, kScalarsDataset, scalars.data(), scalars.size(),
                    crc32c(scalars.data(), scalars.size()));
    h5::write_bytes(file, kRngDataset, rng.data(), rng.size(), crc32c(rng.data(), rng.size()));
    lcpl.reset();
    lap(tt.datasets_s);
    ST_HDF5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
    file.close();
    lap(tt.close_s);
  } catch (const std::exception& e) {
    throw Error(std::string("writing '") + path + "': " + e.what());
  }
  fsync_path(path);
  lap(tt.fsync_s);
  if (times) *times = tt;
  return entries;
}

}  // namespace st::ckpt
