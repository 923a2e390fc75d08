// Tensor: a contiguous buffer of fp32, bf16 or int32 elements with a shape,
// on a Device (device.hpp), owning its storage or viewing someone else's
// (a parameter inside the model's flat buffer). Storage comes from the
// device's allocator by category, so the memory statistics telemetry and the
// ZeRO tests read are measured, not computed.
//
// Two ways to make one:
//  - Tensor(shape, dtype, cat, device): device memory, contents undefined
//    (NaN on the strict CPU device); what the model and engine use.
//  - Tensor(shape, cat): host fp32 on the default CPU device, zeroed; for
//    host-side buffers and tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/device.hpp"
#include "tensor/dtype.hpp"

namespace st {

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::vector<int64_t> shape, DType dt, MemCat cat, Device& dev);
  Tensor(std::vector<int64_t> shape, MemCat cat = MemCat::Other);
  // A non-owning view of `data` (which must outlive it).
  static Tensor view(void* data, std::vector<int64_t> shape, DType dt, Device& dev);
  ~Tensor();
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Same shape, dtype and device, contents copied (in stream order).
  Tensor clone(MemCat cat) const;
  // Zero the contents (in the device's compute stream order).
  void zero();
  void release();   // free the storage (a view forgets its pointer); the shape stays
  void allocate();  // (re)allocate owned storage of the current shape; contents undefined
  // Re-point a view (after its backing buffer moved); null clears it.
  void rebind(void* data);
  bool allocated() const { return data_ != nullptr; }
  bool is_view() const { return !owned_; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  // fp32 data (checked: throws for another dtype).
  float* data();
  const float* data() const;

  DType dtype() const { return dtype_; }
  Device* device() const { return dev_; }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * dtype_size(dtype_); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[size_t(i)]; }
  MemCat cat() const { return cat_; }
  std::string shape_str() const;

 private:
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  MemCat cat_ = MemCat::Other;
  Device* dev_ = nullptr;
  bool owned_ = true;
};

int64_t numel_of(const std::vector<int64_t>& shape);
}  // namespace st
