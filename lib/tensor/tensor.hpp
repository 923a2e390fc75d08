// Tensor: a contiguous fp32 (or bf16) buffer with a shape, and the allocator
// that tracks current and peak bytes per category. The categories let tests
// check what ZeRO stages and activation checkpointing save, measured rather
// than computed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace st {

enum class DType { F32, BF16 };
enum class Device { CPU, CUDA };
enum class MemCat { Params = 0, Grads, Optim, Activations, Comm, Other, kCount };
const char* memcat_name(MemCat c);
size_t dtype_size(DType d);

// Process-wide byte accounting (thread-safe).
struct MemStats {
  static void add(MemCat c, int64_t bytes);
  static int64_t current(MemCat c);
  static int64_t peak(MemCat c);
  static int64_t current_total();
  static int64_t peak_total();
  static void reset_peaks();  // peaks := current
};

// Owning, contiguous, CPU fp32 tensor. Moves are cheap; copies are explicit.
// Storage of kPageOwnedBytes or more starts on a 4 KiB page and is padded to
// whole pages (no other allocation shares them: safe to page-lock in place).
class Tensor {
 public:
  static constexpr size_t kPageOwnedBytes = size_t(64) << 10;
  Tensor() = default;
  Tensor(std::vector<int64_t> shape, MemCat cat = MemCat::Other);
  ~Tensor();
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Tensor clone(MemCat cat) const;
  void zero();
  void release();  // free the storage, keep the shape
  void allocate();  // (re)allocate storage of the current shape, zeroed
  bool allocated() const { return data_ != nullptr; }

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * sizeof(float); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[size_t(i)]; }
  MemCat cat() const { return cat_; }
  std::string shape_str() const;

 private:
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  float* data_ = nullptr;
  MemCat cat_ = MemCat::Other;
};

int64_t numel_of(const std::vector<int64_t>& shape);
}  // namespace st
