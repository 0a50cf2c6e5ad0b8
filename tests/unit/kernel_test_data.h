// Test data for the codec kernel tests, shared by the CPU kernel-identity
// test (tests/unit/test_codec_kernels.cpp) and the GPU-against-CPU test
// (tests/cuda/test_cuda_codecs.cpp): a seeded generator, inputs with the
// values that break kernels (NaN, +-Inf, -0, denormals, ties, constant runs,
// values near FLT_MAX), and a bitwise float comparison.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "half_float.h"

namespace qc_kernel_test {

using qct::bits_f32;
using qct::f32_bits;

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53) * 2 - 1; }
};

enum class Data {
  kPlain,     // uniform, varying scale and offset; a few zeros and -0
  kSpecial,   // plain plus NaN, +-Inf, -0, denormals, huge values, sprinkled
  kTies,      // values on and half-way between grid points (rounding ties)
  kConstant,  // runs of equal values (scale 0)
  kHuge,      // plain plus, in every other 256 elements, finite values that trip the
              // residual hygiene (codec_kernels.h): +-3e38, ~1e19, ~4e36, ~3e18
};

inline std::vector<float> make_data(size_t n, Data kind, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  const float kInf = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const float scale = std::ldexp(1.0f, static_cast<int>((i / 53) % 9) - 4);
    const float offset = static_cast<float>(static_cast<int>((i / 89) % 5) - 2) * 0.3f;
    float v = rng.uniform() * scale + offset;
    switch (kind) {
      case Data::kPlain:
        if (rng.next() % 31 == 0) v = (rng.next() & 1) ? 0.0f : -0.0f;
        break;
      case Data::kSpecial: {
        const uint64_t r = rng.next() % 97;
        if (r == 0) v = std::numeric_limits<float>::quiet_NaN();
        else if (r == 1) v = kInf;
        else if (r == 2) v = -kInf;
        else if (r == 3) v = -0.0f;
        else if (r == 4) v = bits_f32(static_cast<uint32_t>(rng.next() % 0x7fffff) + 1);  // denormal
        else if (r == 5) v = -bits_f32(static_cast<uint32_t>(rng.next() % 0x7fffff) + 1);
        else if (r == 6) v = (rng.next() & 1 ? 1 : -1) * 3.0e38f;
        else if (r == 7) v = bits_f32(0x7fc00000u | static_cast<uint32_t>(rng.next() & 0x3fffff));  // NaN payload
        break;
      }
      case Data::kTies:
        v = static_cast<float>(static_cast<int>(rng.next() % 33) - 16) * 0.5f;
        break;
      case Data::kConstant:
        v = static_cast<float>((i / 40) % 3) - 1.0f;
        if ((i / 40) % 4 == 3) v = rng.uniform();
        break;
      case Data::kHuge: {
        if ((i / 256) % 2 == 1) break;
        const uint64_t r = rng.next() % 41;
        const float sign = (rng.next() & 1) ? 1.0f : -1.0f;
        if (r == 0) v = sign * 3.0e38f;               // minmax range, onebit sum overflow
        else if (r == 1) v = sign * 1.0e19f * rng.uniform();  // qsgd's squares near FLT_MAX
        else if (r == 2) v = sign * 4.0e36f;          // onebit: over its limit for bucket >= 16
        else if (r == 3) v = sign * 3.0e18f;          // qsgd: over its limit for large buckets
        break;
      }
    }
    x[i] = v;
  }
  return x;
}

// First differing float, or -1. Bitwise, except that all NaNs are equal:
// which payload a NaN + NaN returns depends on the operand order the compiler
// picks for a commutative add (C++ leaves it open), so a NaN's payload is not
// part of the contract; that a result is NaN is. Wire bytes (codes, meta,
// 16-bit casts) are compared strictly.
inline long first_float_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (f32_bits(a[i]) != f32_bits(b[i])) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace qc_kernel_test
