// Shared by the cross-backend op test: the backend under test (named by
// SCALETRAIN_TEST_BACKEND: cpu, cpu-strict or cuda), device buffers filled
// from and read back to host vectors, and the error measure every op is held
// to (max |got - want| / max(|want|, floor), per output).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "tensor/tensor.hpp"

namespace opt {
using Vec = std::vector<float>;

inline std::string backend_name() {
  const char* b = std::getenv("SCALETRAIN_TEST_BACKEND");
  return b ? b : "cpu";
}

inline Vec randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The values a tensor of dtype t holds after storing v (bf16 rounds).
inline Vec stored(const Vec& v, st::DType t) {
  if (t != st::DType::BF16) return v;
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = st::round_bf16(v[i]);
  return r;
}

class Bench {
 public:
  explicit Bench(st::Backend& be) : be_(be), dev_(be.device()), s_(dev_.compute_stream()) {}
  st::Backend& be() { return be_; }
  st::Ops& ops() { return be_.ops(); }
  st::Stream& s() { return s_; }

  // A device tensor holding v stored as dtype t.
  st::Tensor up(const Vec& v, st::DType t) {
    st::Tensor x({int64_t(v.size())}, t, st::MemCat::Other, dev_);
    if (t == st::DType::F32) {
      dev_.copy_from_host(x.raw(), v.data(), v.size() * 4, s_);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = st::f32_to_bf16(v[i]);
      dev_.copy_from_host(x.raw(), h.data(), h.size() * 2, s_);
    }
    return x;
  }
  st::Tensor up_i32(const std::vector<int32_t>& v) {
    st::Tensor x({int64_t(v.size())}, st::DType::I32, st::MemCat::Other, dev_);
    dev_.copy_from_host(x.raw(), v.data(), v.size() * 4, s_);
    return x;
  }
  st::Tensor empty(size_t n, st::DType t) {
    return st::Tensor({int64_t(n)}, t, st::MemCat::Other, dev_);
  }
  // The contents of x as fp32 on the host (waits for the stream).
  Vec down(const st::Tensor& x) {
    Vec r(size_t(x.numel()));
    if (x.dtype() == st::DType::F32) {
      dev_.copy_to_host(r.data(), x.raw(), r.size() * 4, s_);
      s_.synchronize();
      return r;
    }
    std::vector<uint16_t> h(r.size());
    dev_.copy_to_host(h.data(), x.raw(), h.size() * 2, s_);
    s_.synchronize();
    for (size_t i = 0; i < r.size(); ++i) r[i] = st::bf16_to_f32(h[i]);
    return r;
  }
  std::vector<double> down_f64(const st::Tensor& x) {
    std::vector<double> r(size_t(x.numel()));
    dev_.copy_to_host(r.data(), x.raw(), r.size() * 8, s_);
    s_.synchronize();
    return r;
  }

 private:
  st::Backend& be_;
  st::Device& dev_;
  st::Stream& s_;
};

// max |got - want| over max(max |want|, floor).
inline double rel(const Vec& got, const Vec& want, double floor = 1e-6) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = floor;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    num = std::max(num, std::fabs(double(got[i]) - want[i]));
    den = std::max(den, std::fabs(double(want[i])));
  }
  return num / den;
}
}  // namespace opt
