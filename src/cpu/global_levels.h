// Exponential dithering's levels (global_exp, paper 002; the codec is
// defined in core/codecs/codec_global.h): value(0) = 0, value(m) = 2^(m - M),
// and the level of r = |z| / norm. One definition for the CPU codec and the
// CUDA kernels (QC_HOST_DEVICE), so both pick the same level for the same r
// and random bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "cpu/random.h"

namespace qc {
namespace cpu {

QC_HOST_DEVICE inline float exp_value(int m, int M) { return m == 0 ? 0.0f : ldexpf(1.0f, m - M); }

// The exponential level of r = |z| / norm (r >= 0, not NaN).
QC_HOST_DEVICE inline uint32_t exp_level(float r, int M, bool stochastic, const RandomStream& rng,
                                         uint64_t index) {
  if (!(r > 0.0f)) return 0;
  if (r >= 1.0f) return static_cast<uint32_t>(M);
  int ex = 0;
  frexpf(r, &ex);      // r = f * 2^ex, f in [0.5, 1): floor(log2 r) = ex - 1
  int m = ex - 1 + M;  // <= M - 1 because r < 1
  float lo, hi;
  if (m < 1) {
    m = 0;
    lo = 0.0f;
    hi = exp_value(1, M);
  } else {
    lo = exp_value(m, M);
    hi = exp_value(m + 1, M);
  }
  bool up;
  if (stochastic) {
    // r - lo and the division are exact (hi - lo is a power of two and r is
    // within a factor two of it), so p is exact.
    const float p = (r - lo) / (hi - lo);
    up = random_uniform(rng, index) < p;
  } else {
    const float dlo = r - lo;
    const float dhi = hi - r;
    up = dhi < dlo || (dhi == dlo && (m & 1) != 0);
  }
  return static_cast<uint32_t>(up ? m + 1 : m);
}

}  // namespace cpu
}  // namespace qc
