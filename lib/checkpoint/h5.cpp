// Implementation of h5.hpp: RAII close by id type, attributes, byte blobs.
#include "checkpoint/h5.hpp"

#include <mutex>

#include "core/error.hpp"

namespace st::h5 {

static herr_t close_id(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      return H5Fclose(id);
    case H5I_GROUP:
      return H5Gclose(id);
    case H5I_DATASET:
      return H5Dclose(id);
    case H5I_DATASPACE:
      return H5Sclose(id);
    case H5I_DATATYPE:
      return H5Tclose(id);
    case H5I_ATTR:
      return H5Aclose(id);
    case H5I_GENPROP_LST:
      return H5Pclose(id);
    default:
      return H5Idec_ref(id);
  }
}

void Handle::reset() noexcept {
  if (id_ >= 0) {
    close_id(id_);
    H5Eclear2(H5E_DEFAULT);
  }
  id_ = H5I_INVALID_HID;
}

void Handle::close() {
  if (id_ < 0) return;
  hid_t id = std::exchange(id_, H5I_INVALID_HID);
  ST_HDF5_CHECK(close_id(id));
}

void quiet_errors() {
  // HDF5 1.10 leaves a file id open when H5Fclose fails (ENOSPC/EFBIG while
  // flushing metadata), and its atexit handler then crashes closing it again.
  // Every file here is closed explicitly, so skip that handler; a file whose
  // close failed is abandoned (its folder is removed by the failed commit).
  static std::once_flag once;
  std::call_once(once, [] { H5dont_atexit(); });
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Handle create_file(const std::string& path) {
  return Handle(ST_HDF5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT)));
}

Handle open_file_readonly(const std::string& path) {
  return Handle(ST_HDF5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
}

bool exists(hid_t loc, const std::string& path) {
  // H5Lexists needs every intermediate link to exist: check each prefix.
  size_t pos = 0;
  while (true) {
    size_t next = path.find('/', pos);
    std::string prefix = path.substr(0, next);
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}

static Handle make_attr(hid_t obj, const char* name, hid_t type, hid_t space) {
  return Handle(ST_HDF5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

void write_attr_i64(hid_t obj, const char* name, const std::vector<int64_t>& v) {
  hsize_t n = v.size();
  Handle space(ST_HDF5_CHECK(H5Screate_simple(1, &n, nullptr)));
  Handle a = make_attr(obj, name, H5T_STD_I64LE, space);
  ST_HDF5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, v.data()));
}

void write_attr_u32(hid_t obj, const char* name, uint32_t v) {
  Handle space(ST_HDF5_CHECK(H5Screate(H5S_SCALAR)));
  Handle a = make_attr(obj, name, H5T_STD_U32LE, space);
  ST_HDF5_CHECK(H5Awrite(a, H5T_NATIVE_UINT32, &v));
}

void write_attr_str(hid_t obj, const char* name, const std::string& v) {
  Handle type(ST_HDF5_CHECK(H5Tcopy(H5T_C_S1)));
  ST_HDF5_CHECK(H5Tset_size(type, v.empty() ? 1 : v.size()));
  ST_HDF5_CHECK(H5Tset_strpad(type, H5T_STR_NULLPAD));
  Handle space(ST_HDF5_CHECK(H5Screate(H5S_SCALAR)));
  Handle a = make_attr(obj, name, type, space);
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  ST_HDF5_CHECK(H5Awrite(a, type, buf.data()));
}

std::vector<int64_t> read_attr_i64(hid_t obj, const char* name) {
  Handle a(ST_HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  Handle space(ST_HDF5_CHECK(H5Aget_space(a)));
  hssize_t n = ST_HDF5_CHECK(H5Sget_simple_extent_npoints(space));
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (n > 0) ST_HDF5_CHECK(H5Aread(a, H5T_NATIVE_INT64, v.data()));
  return v;
}

uint32_t read_attr_u32(hid_t obj, const char* name) {
  Handle a(ST_HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  uint32_t v = 0;
  ST_HDF5_CHECK(H5Aread(a, H5T_NATIVE_UINT32, &v));
  return v;
}

std::string read_attr_str(hid_t obj, const char* name) {
  Handle a(ST_HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)));
  Handle type(ST_HDF5_CHECK(H5Aget_type(a)));
  ST_CHECK(H5Tis_variable_str(type) == 0, "attribute '", name, "' is not a fixed-length string");
  size_t n = H5Tget_size(type);
  std::string s(n, '\0');
  ST_HDF5_CHECK(H5Aread(a, type, s.data()));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::vector<int64_t> dataset_shape(hid_t dset) {
  Handle space(ST_HDF5_CHECK(H5Dget_space(dset)));
  int nd = ST_HDF5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> d(static_cast<size_t>(nd));
  if (nd > 0) ST_HDF5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr));
  return std::vector<int64_t>(d.begin(), d.end());
}

void write_bytes(hid_t file, const std::string& name, const void* p, size_t n, uint32_t crc) {
  Handle lcpl(ST_HDF5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
  ST_HDF5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  hsize_t dim = n;
  Handle space(ST_HDF5_CHECK(H5Screate_simple(1, &dim, nullptr)));
  Handle d(ST_HDF5_CHECK(
      H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0) ST_HDF5_CHECK(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, p));
  write_attr_u32(d, "checksum", crc);
}

std::vector<uint8_t> read_bytes(hid_t file, const std::string& name) {
  Handle d(ST_HDF5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  auto shape = dataset_shape(d);
  std::vector<uint8_t> v(shape.empty() ? 0 : size_t(shape[0]));
  if (!v.empty())
    ST_HDF5_CHECK(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
  return v;
}

}  // namespace st::h5
