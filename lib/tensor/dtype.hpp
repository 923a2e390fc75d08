// Element types of tensors and the host-side bf16 conversions. bf16 is
// stored as its 16 bits (the top half of an fp32); fp32 -> bf16 rounds to
// nearest even, as CUDA's __float2bfloat16 does, so a CPU op that stores
// bf16 rounds exactly where its CUDA twin does.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace st {

enum class DType : uint8_t { F32, BF16, I32, F64 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);  // "fp32", "bf16", "int32", "fp64"
// "fp32" / "bf16" (train.precision, parallel.grad_reduce_dtype); throws UsageError.
DType parse_float_dtype(const std::string& s, const char* key);

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest, ties to even
  return uint16_t(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds an fp32 value through bf16 (what storing and reloading it does).
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace st
