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

#include "../unit/half_float.h"
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

// fp16/bf16 reference conversions and bit casts: the unit tests' own
// (written independently of the library's kernels).
using qct::bf16_to_f32;
using qct::bits_f32;
using qct::f16_to_f32;
using qct::f32_bits;
using qct::f32_to_bf16;
using qct::f32_to_f16;

// Bitwise equality, every NaN equal to every other NaN.
inline bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return f32_bits(a) == f32_bits(b);
}

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
