// The scalar global kernels (codec_kernels.h): the definition of the global
// codecs' arithmetic (core/codecs/codec_global.h), one element at a time.
// The AVX2 and AVX-512 tables (simd_codec_impl.h) must match them bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/bitstream.h"
#include "cpu/canonical_sum.h"
#include "cpu/codec_kernels.h"
#include "cpu/global_levels.h"

namespace qc {
namespace cpu {

float global_sum_of_squares_scalar(const float* t, const float* e, size_t count) {
  return canonical_sum_of_squares(t, e, count);
}

float global_max_abs_scalar(const float* t, const float* e, size_t count) {
  float m = 0.0f;
  bool nan = false;
  for (size_t i = 0; i < count; ++i) {
    const float a = std::fabs(e != nullptr ? t[i] + e[i] : t[i]);
    nan = nan || std::isnan(a);
    if (a > m) m = a;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

void global_encode_scalar(const float* src, float* e, size_t count, const QuantArgs& args,
                          bool exponential, float norm, uint8_t* codes) {
  const int bits = args.bits;
  const uint32_t sign_bit = 1u << (bits - 1);
  const int Mi = static_cast<int>(sign_bit - 1u);
  const float M = static_cast<float>(Mi);
  BitWriter out(codes);
  if (!exponential) {
    const float inv = norm > 0 ? M / norm : 0.0f;
    const float step = norm / M;
    for (size_t i = 0; i < count; ++i) {
      const float z = e != nullptr ? src[i] + e[i] : src[i];
      const float t = std::fabs(z) * inv;
      const float r = args.stochastic
                          ? std::floor(t + random_uniform(args.rng, args.index_base + i))
                          : std::nearbyint(t);
      // r >= 0 or NaN (only for an agreed scale whose inverse overflows:
      // 0 * Inf), which gives level 0, as the SIMD kernels' conversion does.
      const float level = r >= 0.0f ? std::min(r, M) : 0.0f;
      const bool negative = z < 0;
      out.put((negative ? sign_bit : 0u) | static_cast<uint32_t>(level), bits);
      if (e != nullptr) {
        const float v = level * step;
        e[i] = z - (negative ? -v : v);
      }
    }
  } else {
    float value[128];
    for (int m = 0; m <= Mi; ++m) value[m] = exp_value(m, Mi);
    for (size_t i = 0; i < count; ++i) {
      const float z = e != nullptr ? src[i] + e[i] : src[i];
      const float r = norm > 0 ? std::fabs(z) / norm : 0.0f;
      const uint32_t m = exp_level(r, Mi, args.stochastic, args.rng, args.index_base + i);
      const bool negative = z < 0;
      out.put((negative ? sign_bit : 0u) | m, bits);
      if (e != nullptr) {
        const float v = norm * value[m];
        e[i] = z - (negative ? -v : v);
      }
    }
  }
  out.flush();
}

void global_decode_scalar(const uint8_t* codes, size_t count, int bits, bool exponential,
                          float norm, float* dst, bool accumulate) {
  const uint32_t sign_bit = 1u << (bits - 1);
  const int Mi = static_cast<int>(sign_bit - 1u);
  if (!exponential) {
    const float step = norm / static_cast<float>(Mi);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t code = get_code(codes, i, bits);
      const float v = static_cast<float>(code & (sign_bit - 1u)) * step;
      const float s = (code & sign_bit) ? -v : v;
      dst[i] = accumulate ? dst[i] + s : s;
    }
  } else {
    float value[128];
    for (int m = 0; m <= Mi; ++m) value[m] = exp_value(m, Mi);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t code = get_code(codes, i, bits);
      const float v = norm * value[code & (sign_bit - 1u)];
      const float s = (code & sign_bit) ? -v : v;
      dst[i] = accumulate ? dst[i] + s : s;
    }
  }
}

}  // namespace cpu
}  // namespace qc
