// Tensor storage (see tensor.hpp) and the process-wide host byte accounting
// of device.hpp's MemStats.
#include "tensor/tensor.hpp"

#include <atomic>
#include <cstring>

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
    case MemCat::Params:
      return "params";
    case MemCat::Grads:
      return "grads";
    case MemCat::Optim:
      return "optim";
    case MemCat::Activations:
      return "activations";
    case MemCat::Comm:
      return "comm";
    case MemCat::Workspace:
      return "workspace";
    default:
      return "other";
  }
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::BF16:
      return 2;
    case DType::F64:
      return 8;
    default:
      return 4;
  }
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "fp32";
    case DType::BF16:
      return "bf16";
    case DType::F64:
      return "fp64";
    default:
      return "int32";
  }
}

DType parse_float_dtype(const std::string& s, const char* key) {
  if (s == "fp32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  throw UsageError(std::string(key) + ": '" + s + "' is not valid; use fp32 or bf16");
}

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
MemoryStats MemStats::snapshot() {
  MemoryStats m;
  for (int i = 0; i < kCats; ++i) {
    m.current[size_t(i)] = g_cur[i].load();
    m.peak[size_t(i)] = g_peak[i].load();
  }
  m.current_total = g_cur_total.load();
  m.peak_total = g_peak_total.load();
  return m;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    ST_CHECK(d >= 0, "negative dimension ", d);
    n *= d;
  }
  return n;
}

Tensor::Tensor(std::vector<int64_t> shape, DType dt, MemCat cat, Device& dev)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), dtype_(dt), cat_(cat), dev_(&dev) {
  allocate();
}

Tensor::Tensor(std::vector<int64_t> shape, MemCat cat)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), cat_(cat), dev_(&cpu_device()) {
  allocate();
  if (data_) std::memset(data_, 0, bytes());
}

Tensor Tensor::view(void* data, std::vector<int64_t> shape, DType dt, Device& dev) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = numel_of(t.shape_);
  t.dtype_ = dt;
  t.dev_ = &dev;
  t.owned_ = false;
  t.data_ = data;
  return t;
}

Tensor::~Tensor() { release(); }

Tensor::Tensor(Tensor&& o) noexcept
    : shape_(std::move(o.shape_)),
      numel_(o.numel_),
      data_(o.data_),
      dtype_(o.dtype_),
      cat_(o.cat_),
      dev_(o.dev_),
      owned_(o.owned_) {
  o.data_ = nullptr;
  o.numel_ = 0;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    release();
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    data_ = o.data_;
    dtype_ = o.dtype_;
    cat_ = o.cat_;
    dev_ = o.dev_;
    owned_ = o.owned_;
    o.data_ = nullptr;
    o.numel_ = 0;
  }
  return *this;
}

void Tensor::allocate() {
  ST_CHECK(owned_, "Tensor::allocate on a view");
  release();
  if (numel_ == 0) return;
  data_ = dev_->allocate(bytes(), cat_);
}

void Tensor::release() {
  if (!data_) return;
  if (owned_) dev_->deallocate(data_, bytes(), cat_);
  data_ = nullptr;
}

void Tensor::rebind(void* data) {
  ST_CHECK(!owned_, "Tensor::rebind on an owning tensor");
  data_ = data;
}

float* Tensor::data() {
  ST_CHECK(dtype_ == DType::F32 || !data_, "Tensor::data() on a ", dtype_name(dtype_), " tensor");
  return static_cast<float*>(data_);
}
const float* Tensor::data() const {
  ST_CHECK(dtype_ == DType::F32 || !data_, "Tensor::data() on a ", dtype_name(dtype_), " tensor");
  return static_cast<const float*>(data_);
}

Tensor Tensor::clone(MemCat cat) const {
  Tensor t(shape_, dtype_, cat, *dev_);
  if (numel_) dev_->copy(t.data_, data_, bytes(), dev_->compute_stream());
  return t;
}

void Tensor::zero() {
  if (data_) dev_->fill_zero(data_, bytes(), dev_->compute_stream());
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  return s + "]";
}
}  // namespace st
