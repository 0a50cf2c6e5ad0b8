// IEEE binary16 and bfloat16 <-> float32, one scalar definition for the CPU
// reference kernels and the CUDA kernels (QC_HOST_DEVICE): round to nearest
// even, overflow to infinity, NaN stays NaN (quieted, payload kept where it
// fits). Widening is exact. The wire format's fp16/bf16 codecs are these
// functions (docs/wire-format.md), so CPU and GPU write the same bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace qc {
namespace cpu {

QC_HOST_DEVICE inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

QC_HOST_DEVICE inline float bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

QC_HOST_DEVICE inline uint16_t float_to_half(float value) {
  uint32_t x = f32_to_bits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // Inf stays Inf; NaN stays a quiet NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0u));
  }
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (x < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    if (x <= 0x33000000u) return sign;  // <= 2^-25 rounds (ties to even) to zero
    const uint32_t exponent = x >> 23;
    const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // value * 2^24 = mantissa >> shift
    uint32_t code = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (code & 1u))) ++code;
    return static_cast<uint16_t>(sign | code);
  }
  uint32_t code = (x >> 13) - (112u << 10);  // rebias exponent 127 -> 15
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (code & 1u))) ++code;  // a carry may bump the exponent
  return static_cast<uint16_t>(sign | code);
}

QC_HOST_DEVICE inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_f32(sign);
    uint32_t e = 113;  // normalise the subnormal
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    return bits_to_f32(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
  }
  if (exponent == 31) return bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

QC_HOST_DEVICE inline uint16_t float_to_bfloat16(float value) {
  const uint32_t x = f32_to_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

QC_HOST_DEVICE inline float bfloat16_to_float(uint16_t bits) { return bits_to_f32(static_cast<uint32_t>(bits) << 16); }

}  // namespace cpu
}  // namespace qc
