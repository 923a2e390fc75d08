// Private to kernels/cpu: what makes the element loops fast on any x86-64
// CPU from one binary. ST_CPU_CLONES compiles a function for AVX-512, AVX2
// and baseline x86-64 and lets the loader pick the clone for the CPU it runs
// on (GCC function multi-versioning). exp_fast is expf written so that a
// `#pragma omp simd` loop vectorises it (Cody-Waite reduction to r in
// [-ln2/2, ln2/2], a degree-6 polynomial, then the exponent bits): relative
// error below 3e-7 over the range, exactly 0 below -87 and +inf above 88.7.
// It is deterministic: the same input gives the same output in every clone.
// to_f32 / from_f32 load and store an element of either storage type (fp32,
// or bf16 bits in a uint16_t) as fp32 in registers, so one templated loop
// reads and writes bf16 directly; the bf16 store rounds to nearest even and
// keeps NaN a NaN (tensor/dtype.hpp's f32_to_bf16, bit for bit), written
// without branches so that it vectorises. Loops whose body calls exp_fast
// vectorise poorly when the same loop also converts 16-bit elements; they
// convert a chunk of kChunk elements into fp32 registers' worth of stack
// (widen_chunk), run the fp32 loop, and round the chunk back (narrow_chunk).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ST_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ST_CPU_CLONES
#endif

namespace st::kernels {

#pragma omp declare simd notinbranch
inline float exp_fast(float x) {
  const float hi = 88.7f, lo = -87.0f;
  const float xc = x > hi ? hi : (x < lo ? lo : x);
  // Round to nearest by the 1.5 * 2^23 shift (|xc / ln2| < 2^22): plain adds
  // that vectorise in every clone, where roundf is a libm call unless the
  // target has SSE4.1 and trapping math is off.
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  // ln 2 in two parts so n * ln2 is exact to fp32.
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.38888889e-3f;
  p = p * r + 8.33333333e-3f;
  p = p * r + 4.16666667e-2f;
  p = p * r + 1.66666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  const float y = p * scale;
  return x < lo ? 0.f : (x > hi ? __builtin_inff() : y);
}

inline float to_f32(float x) { return x; }
inline float to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// from_f32<T>(x): x stored as T.
template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline uint16_t from_f32<uint16_t>(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : rounded);
}

constexpr int64_t kChunk = 512;
inline void widen_chunk(const uint16_t* x, int64_t m, float* y) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) y[j] = to_f32(x[j]);
}
inline void narrow_chunk(const float* x, int64_t m, uint16_t* y) {
#pragma omp simd
  for (int64_t j = 0; j < m; ++j) y[j] = from_f32<uint16_t>(x[j]);
}
}  // namespace st::kernels
