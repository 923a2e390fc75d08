// Stochastic rounding of fp32 to bf16 with counter-based random bits: the
// one formula the CPU and CUDA AdamW kernels use for bf16 optimizer state
// (optim.state_dtype=bf16; docs/model.md). A value is rounded up with the
// probability of its dropped 16 bits over 2^16, so the rounding is unbiased:
// an update smaller than half a bf16 ulp still moves the weight (or the
// second moment, where beta2 = 0.999 changes it by less than bf16's 2^-8
// each step) in expectation, where round-to-nearest would drop it every time.
// The bits are a pure function of (seed, key, position) (a 32-bit integer
// hash, no state), so a run is bitwise repeatable, a resume continues the
// same stream, and the CPU and CUDA kernels round alike. The same scheme as
// llm.c's bf16 AdamW; the hash here is our own.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ST_SR_FN __host__ __device__ __forceinline__
#else
#define ST_SR_FN inline
#endif

namespace st::sround {

// A 32-bit avalanche mix (xor-shift-multiply).
ST_SR_FN uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The per-span part of the hash: a step's seed and a tensor piece's key.
ST_SR_FN uint32_t stream(uint32_t seed, uint32_t key) { return mix32(key ^ mix32(seed)); }

// 32 random bits for element `pos` of stream `s`.
ST_SR_FN uint32_t bits(uint32_t s, uint64_t pos) {
  return mix32(uint32_t(pos) ^ mix32(uint32_t(pos >> 32) ^ s));
}
// A second, independent word for the same element.
ST_SR_FN uint32_t bits2(uint32_t first) { return mix32(first ^ 0x9e3779b9U); }

ST_SR_FN uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

// x rounded to bf16 (its 16 bits) up in magnitude with probability
// (x's low 16 bits) / 2^16, given 16 random bits r16. Infinities and NaNs
// are kept (truncated; a NaN stays a NaN).
ST_SR_FN uint16_t to_bf16(float x, uint32_t r16) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7f800000U) == 0x7f800000U) return uint16_t((u >> 16) | ((u & 0xffffU) ? 0x40U : 0U));
  u += r16 & 0xffffU;
  return uint16_t(u >> 16);
}

}  // namespace st::sround
