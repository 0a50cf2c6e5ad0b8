// The scalar reference kernels: the definition of every codec's arithmetic
// (codec_kernels.h spells it out). SIMD kernels must match these bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "cpu/bitstream.h"
#include "cpu/codec_kernels.h"
#include "cpu/dtype_convert.h"

namespace qc {
namespace cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// minmax's decoded level j of a bucket (codec_kernels.h). std::min returns
// its first argument when that is NaN, so a NaN bucket stays NaN.
float minmax_level(const MinmaxLevels& m, float j) {
  return std::min((m.lo + j * m.scale) * m.f, std::numeric_limits<float>::max());
}

bool all_finite(const float* z, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(z[i])) return false;
  return true;
}

// Residual hygiene (codec_kernels.h): bucket [b0, b0 + n)'s residuals are
// zeroed unless its gauge is within the limit and every residual is finite
// (the latter matters only with reused scales).
void drop_unkeepable_residuals(float* e, size_t b0, size_t n, float gauge, float limit) {
  if (e == nullptr) return;
  if (keeps_residuals(gauge, limit) && all_finite(e + b0, n)) return;
  std::fill(e + b0, e + b0 + n, 0.0f);
}

float canonical_sum(const float* v, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) acc[i % 16] = acc[i % 16] + v[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j] + acc[j + w];
  return acc[0];
}

// Scale reuse (codec_kernels.h): the scale float at `offset` of bucket b's
// reused metadata, when there is one and it may be reused (finite, > 0).
bool reused_scale(const QuantArgs& a, size_t offset, float* scale) {
  if (a.reuse_meta == nullptr) return false;
  *scale = load_f32(a.reuse_meta + offset);
  return std::isfinite(*scale) && *scale > 0;
}

float round_code(float t, const QuantArgs& a, uint64_t index) {
  return a.stochastic ? std::floor(t + random_uniform(a.rng, index)) : std::nearbyint(t);
}

// z = x (+ e): the values actually encoded, in a bucket-sized buffer. x holds
// `dtype` values starting at element b0 (16-bit ones are widened exactly;
// e != nullptr only with float32 input).
void compensated(const float* x, qc_dtype_t dtype, size_t b0, const float* e, size_t n,
                 float* z) {
  if (dtype == QC_DTYPE_FLOAT16 || dtype == QC_DTYPE_BFLOAT16) {
    const uint8_t* h = reinterpret_cast<const uint8_t*>(x) + 2 * b0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, h + 2 * i, 2);  // the caller's buffer may be unaligned
      z[i] = dtype == QC_DTYPE_FLOAT16 ? half_to_float(v) : bfloat16_to_float(v);
    }
    return;
  }
  x += b0;
  for (size_t i = 0; i < n; ++i) z[i] = e != nullptr ? x[i] + e[i] : x[i];
}

// ---- minmax -----------------------------------------------------------------

void minmax_encode(const float* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                   uint8_t* codes) {
  if (a.input_dtype != QC_DTYPE_FLOAT32) e = nullptr;  // 16-bit input: plain encode only
  const float L = static_cast<float>((1u << a.bits) - 1u);
  BitWriter out(codes);
  std::unique_ptr<float[]> zb(new float[std::min(a.bucket, std::max<size_t>(count, 1))]);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += a.bucket, ++b) {
    const size_t n = std::min(a.bucket, count - b0);
    compensated(x, a.input_dtype, b0, e != nullptr ? e + b0 : nullptr, n, zb.get());
    if (!all_finite(zb.get(), n)) {
      store_f32(meta + 8 * b, kNaN);
      store_f32(meta + 8 * b + 4, kNaN);
      for (size_t i = 0; i < n; ++i) {
        out.put(0, a.bits);
        if (e != nullptr) e[b0 + i] = 0.0f;  // nothing sensible to carry forward
      }
      continue;
    }
    float lo = zb[0], hi = zb[0], scale;
    if (reused_scale(a, 8 * b + 4, &scale) && std::isfinite(load_f32(a.reuse_meta + 8 * b))) {
      lo = load_f32(a.reuse_meta + 8 * b);
    } else {
      for (size_t i = 1; i < n; ++i) {
        lo = std::min(lo, zb[i]);
        hi = std::max(hi, zb[i]);
      }
      scale = (hi - lo) / L;
    }
    store_f32(meta + 8 * b, lo);
    store_f32(meta + 8 * b + 4, scale);
    const float inv = scale >= kMinInvertibleScale ? 1.0f / scale : 0.0f;
    const MinmaxLevels levels = minmax_levels(lo, scale, L);
    for (size_t i = 0; i < n; ++i) {
      const float t = (zb[i] - lo) * inv;
      const float j = std::min(std::max(round_code(t, a, a.index_base + b0 + i), 0.0f), L);
      out.put(static_cast<uint32_t>(j), a.bits);
      if (e != nullptr) e[b0 + i] = zb[i] - minmax_level(levels, j);
    }
    drop_unkeepable_residuals(e, b0, n, scale, minmax_residual_limit());
  }
  out.flush();
}

void minmax_decode(const uint8_t* meta, const uint8_t* codes, size_t count, int bits,
                   size_t bucket, float* dst, bool accumulate) {
  const float L = static_cast<float>((1u << bits) - 1u);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = std::min(bucket, count - b0);
    const MinmaxLevels levels = minmax_levels(load_f32(meta + 8 * b), load_f32(meta + 8 * b + 4), L);
    for (size_t i = 0; i < n; ++i) {
      const float v = minmax_level(levels, static_cast<float>(get_code(codes, b0 + i, bits)));
      dst[b0 + i] = accumulate ? dst[b0 + i] + v : v;
    }
  }
}

// ---- qsgd ---------------------------------------------------------------------

void qsgd_encode(const float* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                 uint8_t* codes) {
  if (a.input_dtype != QC_DTYPE_FLOAT32) e = nullptr;  // 16-bit input: plain encode only
  const uint32_t sign_bit = 1u << (a.bits - 1);
  const float M = static_cast<float>(sign_bit - 1u);
  BitWriter out(codes);
  std::unique_ptr<float[]> zb(new float[std::min(a.bucket, std::max<size_t>(count, 1))]);
  std::unique_ptr<float[]> sq(new float[std::min(a.bucket, std::max<size_t>(count, 1))]);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += a.bucket, ++b) {
    const size_t n = std::min(a.bucket, count - b0);
    compensated(x, a.input_dtype, b0, e != nullptr ? e + b0 : nullptr, n, zb.get());
    if (!all_finite(zb.get(), n)) {
      store_f32(meta + 4 * b, kNaN);
      for (size_t i = 0; i < n; ++i) {
        out.put(0, a.bits);
        if (e != nullptr) e[b0 + i] = 0.0f;
      }
      continue;
    }
    float norm;
    if (!reused_scale(a, 4 * b, &norm)) {
      for (size_t i = 0; i < n; ++i) sq[i] = zb[i] * zb[i];
      norm = std::sqrt(canonical_sum(sq.get(), n));
    }
    store_f32(meta + 4 * b, norm);
    const float inv = norm > 0 ? M / norm : 0.0f;
    const float step = norm / M;
    for (size_t i = 0; i < n; ++i) {
      const float t = std::fabs(zb[i]) * inv;
      const float level = std::min(std::max(round_code(t, a, a.index_base + b0 + i), 0.0f), M);
      const bool negative = zb[i] < 0;
      out.put((negative ? sign_bit : 0u) | static_cast<uint32_t>(level), a.bits);
      if (e != nullptr) {
        const float v = level * step;
        e[b0 + i] = zb[i] - (negative ? -v : v);
      }
    }
    drop_unkeepable_residuals(e, b0, n, step, qsgd_residual_limit(a.bucket));
  }
  out.flush();
}

void qsgd_decode(const uint8_t* meta, const uint8_t* codes, size_t count, int bits, size_t bucket,
                 float* dst, bool accumulate) {
  const uint32_t sign_bit = 1u << (bits - 1);
  const float M = static_cast<float>(sign_bit - 1u);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = std::min(bucket, count - b0);
    const float step = load_f32(meta + 4 * b) / M;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t code = get_code(codes, b0 + i, bits);
      const float v = static_cast<float>(code & (sign_bit - 1u)) * step;
      const float s = (code & sign_bit) ? -v : v;
      dst[b0 + i] = accumulate ? dst[b0 + i] + s : s;
    }
  }
}

// ---- onebit -------------------------------------------------------------------

void onebit_encode(const float* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                   uint8_t* codes) {
  if (a.input_dtype != QC_DTYPE_FLOAT32) e = nullptr;  // 16-bit input: plain encode only
  BitWriter out(codes);
  std::unique_ptr<float[]> zb(new float[std::min(a.bucket, std::max<size_t>(count, 1))]);
  std::unique_ptr<float[]> mag(new float[std::min(a.bucket, std::max<size_t>(count, 1))]);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += a.bucket, ++b) {
    const size_t n = std::min(a.bucket, count - b0);
    compensated(x, a.input_dtype, b0, e != nullptr ? e + b0 : nullptr, n, zb.get());
    if (!all_finite(zb.get(), n)) {
      store_f32(meta + 4 * b, kNaN);
      for (size_t i = 0; i < n; ++i) {
        out.put(0, 1);
        if (e != nullptr) e[b0 + i] = 0.0f;
      }
      continue;
    }
    float scale;
    if (!reused_scale(a, 4 * b, &scale)) {
      for (size_t i = 0; i < n; ++i) mag[i] = std::fabs(zb[i]);
      scale = canonical_sum(mag.get(), n) / static_cast<float>(n);
    }
    store_f32(meta + 4 * b, scale);
    for (size_t i = 0; i < n; ++i) {
      const bool negative = zb[i] < 0;
      out.put(negative ? 1u : 0u, 1);
      if (e != nullptr) e[b0 + i] = zb[i] - (negative ? -scale : scale);
    }
    drop_unkeepable_residuals(e, b0, n, scale, onebit_residual_limit(a.bucket));
  }
  out.flush();
}

void onebit_decode(const uint8_t* meta, const uint8_t* codes, size_t count, int, size_t bucket,
                   float* dst, bool accumulate) {
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = std::min(bucket, count - b0);
    const float scale = load_f32(meta + 4 * b);
    for (size_t i = 0; i < n; ++i) {
      const float v = get_code(codes, b0 + i, 1) ? -scale : scale;
      dst[b0 + i] = accumulate ? dst[b0 + i] + v : v;
    }
  }
}

// ---- casts --------------------------------------------------------------------

void fp16_encode(const float* x, size_t count, uint8_t* out) {
  from_float32(x, QC_DTYPE_FLOAT16, out, count);
}
void fp16_decode(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  if (accumulate) accumulate_to_float32(in, QC_DTYPE_FLOAT16, dst, count);
  else to_float32(in, QC_DTYPE_FLOAT16, dst, count);
}
void bf16_encode(const float* x, size_t count, uint8_t* out) {
  from_float32(x, QC_DTYPE_BFLOAT16, out, count);
}
void bf16_decode(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  if (accumulate) accumulate_to_float32(in, QC_DTYPE_BFLOAT16, dst, count);
  else to_float32(in, QC_DTYPE_BFLOAT16, dst, count);
}

double squared_norm(const float* x, size_t count) {
  double d[16] = {};
  for (size_t i = 0; i < count; ++i) d[i % 16] += static_cast<double>(x[i]) * x[i];
  for (size_t w = 8; w >= 1; w /= 2) {
    for (size_t j = 0; j < w; ++j) d[j] += d[j + w];
  }
  return d[0];
}

// No streaming stores in portable C++: a plain copy.
void copy_streaming(float* dst, const float* src, size_t count) {
  if (count > 0) std::memcpy(dst, src, count * sizeof(float));
}

const KernelTable kScalarTable = {
    Isa::kScalar, "scalar",      minmax_encode, minmax_decode, qsgd_encode, qsgd_decode,
    onebit_encode, onebit_decode, fp16_encode,   fp16_decode,   bf16_encode, bf16_decode,
    squared_norm,  global_sum_of_squares_scalar, global_max_abs_scalar, global_encode_scalar,
    global_decode_scalar, block_encode_scalar, block_decode_scalar, copy_streaming,
};

}  // namespace

const KernelTable* scalar_kernels() { return &kScalarTable; }

}  // namespace cpu
}  // namespace qc
