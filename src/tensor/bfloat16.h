// src/tensor/bfloat16.h — bfloat16 bits: the one definition of float32 <-> bfloat16 rounding.
//
// bfloat16 is float32's top 16 bits (8 exponent bits, 7 mantissa bits). float32 -> bfloat16 rounds to the
// nearest, ties to even, as PyTorch's `.to(torch.bfloat16)` and the CPUs' VCVTNEPS2BF16 do; NaN stays NaN
// (quiet), infinities stay infinite, a finite value past bf16's largest rounds to infinity. bfloat16 ->
// float32 is exact. Used by the bf16 GEMM's packing, mixed precision's roundings and the bf16 files.
#pragma once
#include <cstdint>
#include <cstring>

namespace titan {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN: keep it quiet
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

inline float bf16_bits_to_float(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float32 -> bfloat16 -> float32: the value a bf16 tensor (or file) holds.
inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// Rounds n floats in place to bfloat16 values (branch-free; vectorizes).
inline void round_to_bf16(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, 4);
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    u = nan ? ((u | 0x400000u) & 0xFFFF0000u) : r;
    std::memcpy(p + i, &u, 4);
  }
}

// n floats -> their bfloat16 bits, rounded as float_to_bf16_bits (branch-free; vectorizes).
inline void float_to_bf16_bits(const float* p, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, 4);
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    const uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
    out[i] = (uint16_t)((nan ? (u | 0x400000u) : r) >> 16);
  }
}

// n bfloat16 bits -> their float32 values (exact).
inline void bf16_bits_to_float(const uint16_t* p, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(p[i]);
}

}  // namespace titan
