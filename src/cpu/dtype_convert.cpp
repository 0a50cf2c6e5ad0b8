#include "cpu/dtype_convert.h"

#include <cstring>

namespace qc {
namespace cpu {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

uint16_t float_to_half(float value) {
  uint32_t x = float_bits(value);
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

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    uint32_t e = 113;  // normalise the subnormal
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t float_to_bfloat16(float value) {
  const uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bfloat16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

void to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      if (count > 0 && static_cast<const void*>(dst) != src) std::memmove(dst, src, count * 4);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] = half_to_float(load_u16(p + 2 * i));
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] = bfloat16_to_float(load_u16(p + 2 * i));
      return;
  }
}

void from_float32(const float* src, qc_dtype_t dtype, void* dst, size_t count) {
  auto* p = static_cast<unsigned char*>(dst);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      if (count > 0 && static_cast<const void*>(src) != dst) std::memmove(dst, src, count * 4);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_half(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_bfloat16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
  }
}

void accumulate_to_float32(const void* src, qc_dtype_t dtype, float* dst, size_t count) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (dtype) {
    case QC_DTYPE_FLOAT32:
      for (size_t i = 0; i < count; ++i) dst[i] += load_f32(p + 4 * i);
      return;
    case QC_DTYPE_FLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] += half_to_float(load_u16(p + 2 * i));
      return;
    case QC_DTYPE_BFLOAT16:
      for (size_t i = 0; i < count; ++i) dst[i] += bfloat16_to_float(load_u16(p + 2 * i));
      return;
  }
}

}  // namespace cpu
}  // namespace qc
