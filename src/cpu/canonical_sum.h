// The canonical sum (codec_kernels.h, "Common rules") as a shared scalar
// helper: the definition of the global codecs' norm (kernels_global_scalar.cpp;
// the SIMD tables keep acc[i % 16] in vector lanes).
//
// canonical_sum(v, n): 16 float partial sums acc[i % 16] += v[i] (starting
// at +0), then acc[j] += acc[j + w] for w = 8, 4, 2, 1, j < w; result acc[0].
// canonical_sum_of_squares(t, e, n) is the canonical sum of z[i] * z[i] with
// z[i] = t[i] + e[i] (or t[i] when e is null), computed in one streaming pass
// with exactly the same roundings as materialising z*z and summing it. The
// translation units that include this are built with -ffp-contract=off, so
// z * z + acc is never contracted into an FMA.
#pragma once

#include <cstddef>

namespace qc {
namespace cpu {

inline float canonical_reduce16(float* acc) {
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j] + acc[j + w];
  return acc[0];
}

inline float canonical_sum(const float* v, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) acc[i % 16] = acc[i % 16] + v[i];
  return canonical_reduce16(acc);
}

inline float canonical_sum_of_squares(const float* t, const float* e, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) {
    const float z = e != nullptr ? t[i] + e[i] : t[i];
    const float sq = z * z;
    acc[i % 16] = acc[i % 16] + sq;
  }
  return canonical_reduce16(acc);
}

}  // namespace cpu
}  // namespace qc
