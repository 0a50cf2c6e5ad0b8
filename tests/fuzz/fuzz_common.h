// Helpers shared by the libFuzzer targets in tests/fuzz (docs/reliability.md).
//
// A fuzzer reports a violated property with QC_FUZZ_CHECK: it prints what was
// expected to stderr and traps, which libFuzzer records as a crash (and saves
// the input as crash-<sha1> for reproduction).
#ifndef QC_TESTS_FUZZ_FUZZ_COMMON_H
#define QC_TESTS_FUZZ_FUZZ_COMMON_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "qc.h"

#define QC_FUZZ_CHECK(cond, ...)                                                         \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n  qc_last_error: %s\n", qc_last_error());                  \
      __builtin_trap();                                                                  \
    }                                                                                    \
  } while (0)

namespace qc_fuzz {

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

// Bitwise equality, every NaN equal to every other NaN.
inline bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return f32_bits(a) == f32_bits(b);
}

// IEEE binary16 <- float32, round to nearest even (independent of the
// library's own conversion in src/cpu/dtype_convert.cpp).
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (ax < 0x38800000u) {  // half subnormal or zero: units of 2^-24
    const float scaled = bits_f32(ax) * 16777216.0f;  // exact
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

inline float round_to_dtype(float f, qc_dtype_t d) {
  switch (d) {
    case QC_DTYPE_FLOAT16: return f16_to_f32(f32_to_f16(f));
    case QC_DTYPE_BFLOAT16: return bf16_to_f32(f32_to_bf16(f));
    default: return f;
  }
}

inline size_t dtype_size(qc_dtype_t d) { return d == QC_DTYPE_FLOAT32 ? 4 : 2; }

// float values -> bytes of dtype (values must already be representable).
inline void store_dtype(const float* x, size_t n, qc_dtype_t d, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    if (d == QC_DTYPE_FLOAT32) {
      std::memcpy(out + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = d == QC_DTYPE_FLOAT16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

inline float load_dtype(const uint8_t* in, size_t i, qc_dtype_t d) {
  if (d == QC_DTYPE_FLOAT32) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, in + 2 * i, 2);
  return d == QC_DTYPE_FLOAT16 ? f16_to_f32(h) : bf16_to_f32(h);
}

inline uint64_t load_le(const uint8_t* p, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline void store_le(uint8_t* p, int width, uint64_t v) {
  for (int i = 0; i < width; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The canonical sum of docs/wire-format.md: 16 float32 partial sums, then a
// fixed pairwise reduction (float arithmetic, no contraction: the fuzzers are
// built with -ffp-contract=off).
inline float canonical_sum(const float* v, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) acc[i % 16] = acc[i % 16] + v[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j] + acc[j + w];
  return acc[0];
}

}  // namespace qc_fuzz

#endif  // QC_TESTS_FUZZ_FUZZ_COMMON_H
