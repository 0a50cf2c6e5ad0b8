// fp16 / bf16 <-> fp32 reference conversions (round to nearest even) for
// tests: the unit tests (through test_util.h) and the soak test, which has no
// gtest. Written from IEEE 754 and the bfloat16 definition, independently of
// the library's kernels, so that tests check those kernels against them.
#ifndef QC_TESTS_UNIT_HALF_FLOAT_H
#define QC_TESTS_UNIT_HALF_FLOAT_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qct {

// ---------------------------------------------------------------------------
// fp16 / bf16 <-> fp32, round to nearest even
// ---------------------------------------------------------------------------
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // Inf or NaN (keep NaN quiet and non-zero)
    if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520
  if (ax < 0x38800000u) {  // below 2^-14: half subnormal (or zero)
    // a * 2^24 is exact in float; nearbyint rounds half to even.
    const float scaled = bits_f32(ax) * 16777216.0f;
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);  // m == 0x400 is the smallest normal
  }
  const uint32_t e = (ax >> 23) - 127 + 15;
  const uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (e << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may bump exponent
  return static_cast<uint16_t>(sign | h);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);  // exact
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(r >> 16);
}
inline float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

}  // namespace qct

#endif  // QC_TESTS_UNIT_HALF_FLOAT_H
