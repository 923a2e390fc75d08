// Internal HDF5 helpers of the checkpoint module: an RAII handle for every
// HDF5 id, and typed attribute and dataset helpers that throw st::Error with
// the HDF5 error stack (ST_HDF5_CHECK) naming what they touched.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace st::h5 {

// Owns one HDF5 id and closes it with the matching H5?close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() noexcept;
  // Closes now and reports failure (a file close flushes metadata: ENOSPC
  // shows up here).
  void close();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Turns off HDF5's automatic error printing on this thread (errors are
// collected into exceptions instead).
void quiet_errors();

Handle create_file(const std::string& path);  // fails if it exists
Handle open_file_readonly(const std::string& path);
bool exists(hid_t loc, const std::string& path);  // every group on the way must exist

void write_attr_i64(hid_t obj, const char* name, const std::vector<int64_t>& v);
void write_attr_u32(hid_t obj, const char* name, uint32_t v);
void write_attr_str(hid_t obj, const char* name, const std::string& v);
std::vector<int64_t> read_attr_i64(hid_t obj, const char* name);
uint32_t read_attr_u32(hid_t obj, const char* name);
std::string read_attr_str(hid_t obj, const char* name);

std::vector<int64_t> dataset_shape(hid_t dset);
// Whole uint8 dataset (meta blobs).
void write_bytes(hid_t file, const std::string& name, const void* p, size_t n, uint32_t crc);
std::vector<uint8_t> read_bytes(hid_t file, const std::string& name);

}  // namespace st::h5
