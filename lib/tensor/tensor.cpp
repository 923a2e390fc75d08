// Tensor storage and byte accounting (see tensor.hpp).
#include "tensor/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"

namespace st {
namespace {
constexpr int kCats = int(MemCat::kCount);
std::atomic<int64_t> g_cur[kCats];
std::atomic<int64_t> g_peak[kCats];
std::atomic<int64_t> g_cur_total{0};
std::atomic<int64_t> g_peak_total{0};

void bump_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load();
  while (v > p && !peak.compare_exchange_weak(p, v)) {
  }
}
}  // namespace

const char* memcat_name(MemCat c) {
  switch (c) {
    case MemCat::Params: return "params";
    case MemCat::Grads: return "grads";
    case MemCat::Optim: return "optim";
    case MemCat::Activations: return "activations";
    case MemCat::Comm: return "comm";
    default: return "other";
  }
}

size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }

void MemStats::add(MemCat c, int64_t bytes) {
  int i = int(c);
  int64_t v = g_cur[i].fetch_add(bytes) + bytes;
  bump_peak(g_peak[i], v);
  int64_t t = g_cur_total.fetch_add(bytes) + bytes;
  bump_peak(g_peak_total, t);
}
int64_t MemStats::current(MemCat c) { return g_cur[int(c)].load(); }
int64_t MemStats::peak(MemCat c) { return g_peak[int(c)].load(); }
int64_t MemStats::current_total() { return g_cur_total.load(); }
int64_t MemStats::peak_total() { return g_peak_total.load(); }
void MemStats::reset_peaks() {
  for (int i = 0; i < kCats; ++i) g_peak[i].store(g_cur[i].load());
  g_peak_total.store(g_cur_total.load());
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    ST_CHECK(d >= 0, "negative dimension ", d);
    n *= d;
  }
  return n;
}

Tensor::Tensor(std::vector<int64_t> shape, MemCat cat)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), cat_(cat) {
  allocate();
}

Tensor::~Tensor() { release(); }

Tensor::Tensor(Tensor&& o) noexcept
    : shape_(std::move(o.shape_)), numel_(o.numel_), data_(o.data_), cat_(o.cat_) {
  o.data_ = nullptr;
  o.numel_ = 0;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    release();
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    data_ = o.data_;
    cat_ = o.cat_;
    o.data_ = nullptr;
    o.numel_ = 0;
  }
  return *this;
}

void Tensor::allocate() {
  release();
  if (numel_ == 0) return;
  // Large tensors own whole pages (kPageOwnedBytes), so they can be
  // page-locked in place (the CUDA engine's checkpoint views) without
  // sharing a page with another allocation.
  const size_t raw = size_t(numel_) * sizeof(float);
  const size_t align = raw >= kPageOwnedBytes ? 4096 : 64;
  size_t bytes = (raw + align - 1) / align * align;
  data_ = static_cast<float*>(std::aligned_alloc(align, bytes));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, bytes);
  MemStats::add(cat_, int64_t(size_t(numel_) * sizeof(float)));
}

void Tensor::release() {
  if (data_) {
    std::free(data_);
    MemStats::add(cat_, -int64_t(size_t(numel_) * sizeof(float)));
    data_ = nullptr;
  }
}

Tensor Tensor::clone(MemCat cat) const {
  Tensor t(shape_, cat);
  if (numel_) std::memcpy(t.data_, data_, bytes());
  return t;
}

void Tensor::zero() {
  if (data_) std::memset(data_, 0, bytes());
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  return s + "]";
}
}  // namespace st
