// fuzz_decode: the codecs' decoder on untrusted bytes, and encode/decode
// round trips with their documented error bounds (docs/wire-format.md,
// tests/unit/test_codecs.cpp check_bound).
//
// Every input is used three ways:
//  1. As a message: qc_codec_decode of the whole input (the wire header selects the
//     codec) with the count its header announces (and that count +-1), into
//     float32, float16 and bfloat16. Status must be SUCCESS, CORRUPT_DATA or
//     MISMATCH; the three dtypes must agree on it, and the 16-bit results must
//     be the float32 result rounded to nearest even; a truncated copy of a
//     message that decoded must be refused.
//  2. As a recipe (FuzzedDataProvider): a policy (every codec, bits 1..8,
//     bucket sizes, rounding, topk ratio, seed), an input dtype and values.
//     qc_codec_encode must succeed (bits 1 with qsgd/global_*: INVALID_ARGUMENT),
//     give the documented size and header, the same bytes when repeated (also
//     from a misaligned float32 or an overlapping 16-bit source), and qc_codec_decode must
//     give back values within the codec's bound; non-finite input must follow
//     docs/wire-format.md section 5.
//  3. The encoded message, damaged at a few positions chosen by the input:
//     decoding must not crash; damage confined to the payload of a codec
//     whose payload has no structure (none, fp16, bf16, minmax, qsgd,
//     onebit) must still decode.
//
// Seeds: tests/data/golden_*.bin (whole messages) and tests/fuzz/corpus/fuzz_decode.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "../unit/block_scaled_bound.h"
#include "fuzz_common.h"

using namespace qc_fuzz;

namespace {

constexpr size_t kHeader = 32;
// Largest element count decoded from an arbitrary header (topk messages can
// announce any count with a tiny payload).
constexpr uint64_t kMaxDecodeCount = uint64_t{1} << 14;
constexpr size_t kMaxRoundTripCount = 1024;

const qc_dtype_t kDtypes[] = {QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16};

bool allowed_decode_status(qc_status_t s) {
  return s == QC_SUCCESS || s == QC_ERROR_CORRUPT_DATA || s == QC_ERROR_MISMATCH;
}

// qc_codec_decode into an exact-size heap buffer (ASan sees a write past count).
qc_status_t decode_into(const uint8_t* msg, size_t size, size_t count, qc_dtype_t dtype,
                        std::unique_ptr<uint8_t[]>* out) {
  out->reset(new uint8_t[count * dtype_size(dtype)]);
  return qc_codec_decode(msg, size, out->get(), count, dtype);
}

// ---------------------------------------------------------------------------
// 1. arbitrary bytes as a message
// ---------------------------------------------------------------------------
void decode_arbitrary(const uint8_t* data, size_t size) {
  uint64_t header_count = size;  // something to try when there is no header
  if (size >= 24) header_count = load_le(data + 16, 8);
  const uint64_t tries[] = {header_count, header_count + 1};
  for (uint64_t c64 : tries) {
    if (c64 > kMaxDecodeCount) continue;
    const size_t count = static_cast<size_t>(c64);
    std::unique_ptr<uint8_t[]> y32;
    const qc_status_t s32 = decode_into(data, size, count, QC_DTYPE_FLOAT32, &y32);
    QC_FUZZ_CHECK(allowed_decode_status(s32), "qc_codec_decode(size %zu, count %zu) returned %s", size,
                  count, qc_status_string(s32));
    if (size >= kHeader && c64 != header_count) {
      QC_FUZZ_CHECK(s32 != QC_SUCCESS, "decoded %zu elements from a message of %llu", count,
                    static_cast<unsigned long long>(header_count));
    }
    for (qc_dtype_t d : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
      std::unique_ptr<uint8_t[]> yd;
      const qc_status_t sd = decode_into(data, size, count, d, &yd);
      QC_FUZZ_CHECK(sd == s32, "decode to dtype %d gave %s, to float32 %s", static_cast<int>(d),
                    qc_status_string(sd), qc_status_string(s32));
      if (s32 != QC_SUCCESS) continue;
      for (size_t i = 0; i < count; ++i) {
        const float want = round_to_dtype(load_dtype(y32.get(), i, QC_DTYPE_FLOAT32), d);
        const float got = load_dtype(yd.get(), i, d);
        QC_FUZZ_CHECK(same_float(want, got), "element %zu decoded to dtype %d as %g, want %g", i,
                      static_cast<int>(d), got, want);
      }
    }
    if (s32 == QC_SUCCESS) {
      // The payload length must match exactly: one byte less is refused.
      std::unique_ptr<uint8_t[]> shorter(new uint8_t[size - 1]);
      std::memcpy(shorter.get(), data, size - 1);
      std::unique_ptr<uint8_t[]> y;
      const qc_status_t st = decode_into(shorter.get(), size - 1, count, QC_DTYPE_FLOAT32, &y);
      QC_FUZZ_CHECK(st == QC_ERROR_CORRUPT_DATA, "a truncated message gave %s",
                    qc_status_string(st));
    }
  }
}

// ---------------------------------------------------------------------------
// 2. round trips
// ---------------------------------------------------------------------------
bool is_bucketed(qc_codec_t c) {
  return c == QC_CODEC_MINMAX || c == QC_CODEC_QSGD || c == QC_CODEC_ONEBIT;
}
bool is_global(qc_codec_t c) { return c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP; }
using qct::is_block_scaled;

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

size_t topk_k(float ratio, size_t count) {
  if (count == 0) return 0;
  size_t k = static_cast<size_t>(std::ceil(static_cast<double>(ratio) * static_cast<double>(count)));
  return std::min(std::max<size_t>(k, 1), count);
}

// The message size of docs/wire-format.md's table.
size_t expected_size(const qc_policy_t& p, size_t count, qc_dtype_t dtype) {
  const size_t q = static_cast<size_t>(p.bits);
  switch (p.codec) {
    case QC_CODEC_NONE: return kHeader + count * dtype_size(dtype);
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: return kHeader + 2 * count;
    case QC_CODEC_MINMAX:
      return kHeader + 8 * ceil_div(count, static_cast<size_t>(p.bucket_size)) + ceil_div(count * q, 8);
    case QC_CODEC_QSGD:
      return kHeader + 4 * ceil_div(count, static_cast<size_t>(p.bucket_size)) + ceil_div(count * q, 8);
    case QC_CODEC_ONEBIT:
      return kHeader + 4 * ceil_div(count, static_cast<size_t>(p.bucket_size)) + ceil_div(count, 8);
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP: return kHeader + 4 + ceil_div(count * q, 8);
    case QC_CODEC_TOPK: return kHeader + 4 + 8 * topk_k(p.topk_ratio, count);
    default: break;
  }
  if (is_block_scaled(p.codec)) {
    return kHeader + (p.codec == QC_CODEC_NVFP4 ? 4 : 0) + ceil_div(count, qct::block_of(p.codec)) +
           ceil_div(count * static_cast<size_t>(qct::element_bits(p.codec)), 8);
  }
  return 0;
}

// Ordering of topk's selection: NaN first, then +-Inf, then |x|.
struct TopkRank {
  int cls;
  float mag;
  bool operator<(const TopkRank& o) const { return cls != o.cls ? cls < o.cls : mag < o.mag; }
  bool operator==(const TopkRank& o) const { return cls == o.cls && (cls != 0 || mag == o.mag); }
};
TopkRank topk_rank(float x) {
  if (std::isnan(x)) return {2, 0.0f};
  if (std::isinf(x)) return {1, 0.0f};
  return {0, std::fabs(x)};
}

[[noreturn]] void bound_failure(const char* what, size_t i, size_t n, float x, float y,
                                double bound) {
  std::fprintf(stderr, "round trip: element %zu of %zu: x = %.9g (0x%08x) decoded %.9g (0x%08x): %s, bound %.9g\n",
               i, n, x, f32_bits(x), y, f32_bits(y), what, bound);
  __builtin_trap();
}

// The bound of each codec, as tests/unit/test_codecs.cpp check_bound, plus
// the non-finite rule of docs/wire-format.md section 5. Two known limits of
// the codecs' float32 arithmetic are exempt from the bound (and reported in
// docs/reliability.md):
//  - finite values that overflow it (range > FLT_MAX, sum of squares or of
//    magnitudes > FLT_MAX): CodecEdge.DISABLED_LargeFiniteValuesStayFinite;
//    such buckets are only required not to crash (a minmax bucket whose top
//    level lo + L * scale rounds past FLT_MAX is not exempt: it is decoded at
//    half scale and saturated, and the seeds minmax_flt_max_decodes_to_inf.bin
//    and minmax_level_product_overflows.bin keep it checked);
//  - qsgd / global buckets whose float32 sum of squares is below 2^-100
//    (|x| below about 1e-15): the squares lose precision or underflow to 0
//    (x = 7e-30 gives norm 0 and decodes to 0); the sign rule still holds;
//    likewise global messages whose max-abs scale is below 2^-120 (taken as
//    0: codec_kernels.h).
constexpr float kTinySumSq = 0x1p-100f;
void check_round_trip(const qc_policy_t& p, const std::vector<float>& x,
                      const std::vector<float>& y) {
  const size_t n = x.size();
  const bool sto = p.rounding == QC_ROUND_STOCHASTIC;
  switch (p.codec) {
    case QC_CODEC_NONE:
      for (size_t i = 0; i < n; ++i)
        if (!same_float(x[i], y[i])) bound_failure("none is exact", i, n, x[i], y[i], 0);
      return;
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: {
      const qc_dtype_t d = p.codec == QC_CODEC_FP16 ? QC_DTYPE_FLOAT16 : QC_DTYPE_BFLOAT16;
      for (size_t i = 0; i < n; ++i)
        if (!same_float(round_to_dtype(x[i], d), y[i])) bound_failure("RNE cast", i, n, x[i], y[i], 0);
      return;
    }
    case QC_CODEC_TOPK: {
      const size_t k = topk_k(p.topk_ratio, n);
      size_t nonzero_in = 0, kept = 0;
      bool any_kept = false;
      TopkRank min_kept{3, 0.0f};
      size_t last_kept_at_min = 0;
      for (size_t i = 0; i < n; ++i) {
        if (x[i] != 0.0f) ++nonzero_in;  // NaN != 0 too
        if (y[i] == 0.0f) continue;      // dropped, or a kept zero
        if (!same_float(x[i], y[i])) bound_failure("topk sends values exactly", i, n, x[i], y[i], 0);
        ++kept;
        const TopkRank r = topk_rank(x[i]);
        if (!any_kept || r < min_kept) {
          min_kept = r;
          last_kept_at_min = i;
        } else if (r == min_kept) {
          last_kept_at_min = i;
        }
        any_kept = true;
      }
      QC_FUZZ_CHECK(kept == std::min(k, nonzero_in), "topk kept %zu non-zero values, k = %zu, %zu non-zero inputs",
                    kept, k, nonzero_in);
      for (size_t i = 0; i < n && any_kept; ++i) {
        if (y[i] != 0.0f || x[i] == 0.0f) continue;
        const TopkRank r = topk_rank(x[i]);
        if (min_kept < r) bound_failure("topk dropped a larger value than it kept", i, n, x[i], y[i], 0);
        if (r == min_kept && i < last_kept_at_min)
          bound_failure("topk ties go to the lower index", i, n, x[i], y[i], 0);
      }
      return;
    }
    default:
      break;
  }
  const size_t B = is_bucketed(p.codec)      ? static_cast<size_t>(p.bucket_size)
                   : is_block_scaled(p.codec) ? qct::block_of(p.codec)
                                              : std::max<size_t>(n, 1);
  double message_max = 0;  // of the finite values (nvfp4's message scale)
  for (float v : x)
    if (std::isfinite(v)) message_max = std::max(message_max, std::fabs(static_cast<double>(v)));
  for (size_t b0 = 0; b0 < n; b0 += B) {
    const size_t m = std::min(B, n - b0);
    bool finite = true;
    float lo = x[b0], hi = x[b0];
    double sumsq = 0, maxabs = 0;
    std::vector<float> sq(m), mag(m);
    for (size_t i = b0; i < b0 + m; ++i) {
      if (!std::isfinite(x[i])) finite = false;
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
      sumsq += static_cast<double>(x[i]) * x[i];
      maxabs = std::max(maxabs, std::fabs(static_cast<double>(x[i])));
      sq[i - b0] = x[i] * x[i];
      mag[i - b0] = std::fabs(x[i]);
    }
    if (!finite) {
      // section 5: the bucket (global codecs: the message) decodes to NaN
      for (size_t i = b0; i < b0 + m; ++i)
        if (!std::isnan(y[i])) bound_failure("a non-finite bucket decodes to NaN", i, n, x[i], y[i], 0);
      continue;
    }
    const float sumsq_f = canonical_sum(sq.data(), m);
    const double norm = std::max(std::sqrt(sumsq), static_cast<double>(std::sqrt(sumsq_f)));
    const double slack = 4.0 * std::ldexp(maxabs, -23) + 1e-30;
    switch (p.codec) {
      case QC_CODEC_MINMAX: {
        if (!std::isfinite(hi - lo)) break;  // known limitation (range overflows)
        const double L = std::ldexp(1.0, p.bits) - 1.0;
        const double s = (static_cast<double>(hi) - lo) / L;
        const double bound = (sto ? s : s / 2) * (1 + 1e-5) + slack;
        for (size_t i = b0; i < b0 + m; ++i) {
          const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
          if (!(d <= bound) || (sto && s > 0 && !(d < s * (1 + 1e-5) + slack)))
            bound_failure(sto ? "minmax stochastic |x-x'| < s" : "minmax |x-x'| <= s/2", i, n, x[i],
                          y[i], bound);
          if (y[i] < lo - slack || y[i] > hi + slack)
            bound_failure("minmax within [min, max]", i, n, x[i], y[i], 0);
        }
        break;
      }
      case QC_CODEC_QSGD: {
        if (!std::isfinite(sumsq_f)) break;  // known limitation (sum of squares overflows)
        if (sumsq_f < kTinySumSq) {
          // known limitation (squares underflow): only the sign rule holds
          for (size_t i = b0; i < b0 + m; ++i)
            if (y[i] != 0 && ((y[i] < 0) != (x[i] < 0))) bound_failure("qsgd keeps the sign", i, n, x[i], y[i], 0);
          break;
        }
        const double M = std::ldexp(1.0, p.bits - 1) - 1.0;
        const double step = norm / M;
        const double bound = (sto ? step : step / 2) * (1 + 1e-5) + slack;
        for (size_t i = b0; i < b0 + m; ++i) {
          const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
          if (!(d <= bound))
            bound_failure(sto ? "qsgd |x-x'| < norm/M" : "qsgd |x-x'| <= norm/M/2", i, n, x[i], y[i], bound);
          if (y[i] != 0 && ((y[i] < 0) != (x[i] < 0))) bound_failure("qsgd keeps the sign", i, n, x[i], y[i], 0);
        }
        break;
      }
      case QC_CODEC_ONEBIT: {
        const float scale = canonical_sum(mag.data(), m) / static_cast<float>(m);
        if (!std::isfinite(scale)) break;  // known limitation (sum of |x| overflows)
        for (size_t i = b0; i < b0 + m; ++i) {
          const float want = x[i] < 0 ? -scale : scale;
          if (f32_bits(want) != f32_bits(y[i]))
            bound_failure("onebit decodes to +-(mean |x| of the bucket)", i, n, x[i], y[i], scale);
        }
        break;
      }
      case QC_CODEC_GLOBAL_LINEAR:
      case QC_CODEC_GLOBAL_EXP: {
        // The scale: the L2 norm, or the max |x| (the default; one below
        // 2^-120 is taken as 0, so everything decodes to 0).
        const bool by_max = p.scale != QC_SCALE_L2;
        if ((!by_max && !std::isfinite(sumsq_f)) || (by_max && maxabs > std::ldexp(1.0, 127))) {
          // section 5: a sum of squares that overflows, or a max-abs scale
          // above 2^127 (codec_kernels.h), makes the message NaN
          for (size_t i = b0; i < b0 + m; ++i)
            if (!std::isnan(y[i])) bound_failure("global: overflowing norm decodes to NaN", i, n, x[i], y[i], 0);
          break;
        }
        const double M = std::ldexp(1.0, p.bits - 1) - 1.0;
        const double scale = by_max ? maxabs : norm;
        // known limitations: squares that underflow (L2), a max-abs below
        // 2^-120 (taken as 0): the values decode to 0 or keep their sign
        const bool tiny = by_max ? maxabs < std::ldexp(1.0, -120) : sumsq_f < kTinySumSq;
        for (size_t i = b0; i < b0 + m; ++i) {
          if (!std::isfinite(y[i])) bound_failure("global: finite", i, n, x[i], y[i], 0);
          if (tiny) {
            if (y[i] != 0 && ((y[i] < 0) != (x[i] < 0))) bound_failure("global keeps the sign", i, n, x[i], y[i], 0);
            continue;
          }
          if (y[i] != 0 && ((y[i] < 0) != (x[i] < 0))) bound_failure("global keeps the sign", i, n, x[i], y[i], 0);
          if (std::fabs(y[i]) > scale * (1 + 1e-5) + slack) bound_failure("global |x'| <= scale", i, n, x[i], y[i], scale);
          const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
          const double gap = p.codec == QC_CODEC_GLOBAL_LINEAR
                                 ? scale / M
                                 : std::max(std::fabs(static_cast<double>(x[i])),
                                            scale * std::ldexp(1.0, 1 - static_cast<int>(M)));
          const double bound = (sto ? gap : gap / 2) * (1 + 1e-5) + slack;
          if (!(d <= bound)) bound_failure("global |x-x'| <= level gap (/2 nearest)", i, n, x[i], y[i], bound);
        }
        break;
      }
      default: {
        if (!is_block_scaled(p.codec)) break;
        // The format's error relative to the block's largest |x|, with the
        // sign kept (or 0), plus what that leaves out (block_scaled_bound.h).
        const double bound = qct::block_scaled_bound(p.codec, sto) * maxabs * (1 + 1e-5) +
                             qct::block_scaled_floor(p.codec, message_max) + slack;
        for (size_t i = b0; i < b0 + m; ++i) {
          if (!std::isfinite(y[i])) bound_failure("block-scaled: finite", i, n, x[i], y[i], 0);
          if (y[i] != 0 && ((y[i] < 0) != (x[i] < 0))) bound_failure("block-scaled keeps the sign", i, n, x[i], y[i], 0);
          const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
          if (!(d <= bound)) bound_failure("block-scaled |x-x'| <= format error x block max", i, n, x[i], y[i], bound);
        }
        break;
      }
    }
  }
}

qc_policy_t consume_policy(FuzzedDataProvider& fdp) {
  static const int kBuckets[] = {1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 64, 128, 129, 1000};
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = static_cast<qc_codec_t>(fdp.ConsumeIntegralInRange<int>(0, QC_CODEC_NVFP4));
  p.bits = fdp.ConsumeIntegralInRange<int>(1, 8);
  const uint8_t b = fdp.ConsumeIntegral<uint8_t>();
  p.bucket_size = b < 16 ? kBuckets[b] : (b < 32 ? fdp.ConsumeIntegralInRange<int>(1, 5000) : 32 + b % 97);
  p.rounding = fdp.ConsumeBool() ? QC_ROUND_STOCHASTIC : QC_ROUND_NEAREST_EVEN;
  const uint8_t r = fdp.ConsumeIntegral<uint8_t>();
  p.topk_ratio = r == 0 ? 1.0f : r == 1 ? 1e-30f : r == 2 ? 0.5f : static_cast<float>(r) / 256.0f;
  p.seed = fdp.ConsumeIntegral<uint64_t>();
  p.scale = fdp.ConsumeBool() ? QC_SCALE_L2 : QC_SCALE_AUTO;  // global codecs: L2 or max-abs
  return p;
}

// Values from the input: raw float32 bits (NaN, Inf, subnormals), or
// structured data that keeps most buckets inside the bounds' domain.
std::vector<float> consume_values(FuzzedDataProvider& fdp, qc_dtype_t dtype) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 4);
  // At most a few elements beyond what the input can fill (the rest are 0).
  const size_t count = fdp.ConsumeIntegralInRange<size_t>(
      0, std::min(kMaxRoundTripCount, fdp.remaining_bytes() + 40));
  std::vector<float> x(count);
  float table[4];
  for (float& t : table) t = bits_f32(fdp.ConsumeIntegral<uint32_t>());
  const int exp_base = fdp.ConsumeIntegralInRange<int>(-140, 120);
  for (size_t i = 0; i < count; ++i) {
    float v = 0.0f;
    switch (mode) {
      case 0: v = bits_f32(fdp.ConsumeIntegral<uint32_t>()); break;
      case 1: v = static_cast<float>(fdp.ConsumeIntegral<int8_t>()) / 16.0f; break;
      case 2: {  // int8 mantissa, per-element exponent near exp_base
        const int8_t mnt = fdp.ConsumeIntegral<int8_t>();
        const int e = exp_base + static_cast<int>(fdp.ConsumeIntegral<uint8_t>() % 24);
        v = std::ldexp(static_cast<float>(mnt), e);
        break;
      }
      case 3: v = table[fdp.ConsumeIntegral<uint8_t>() % 4]; break;
      default: v = static_cast<float>(fdp.ConsumeIntegral<int16_t>()) / 256.0f; break;
    }
    x[i] = round_to_dtype(v, dtype);
  }
  return x;
}

// qc_codec_encode into an exact-size buffer; *msg is resized to what was written.
qc_status_t encode(const qc_policy_t& p, const void* src, size_t count, qc_dtype_t dtype,
                   size_t capacity, std::vector<uint8_t>* msg) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[capacity]);
  size_t written = 0;
  const qc_status_t s = qc_codec_encode(&p, src, count, dtype, buf.get(), capacity, &written);
  if (s == QC_SUCCESS) {
    QC_FUZZ_CHECK(written <= capacity, "wrote %zu of %zu", written, capacity);
    msg->assign(buf.get(), buf.get() + written);
  }
  return s;
}

void round_trip(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  const qc_policy_t p = consume_policy(fdp);
  const qc_dtype_t dtype = kDtypes[fdp.ConsumeIntegralInRange<int>(0, 2)];
  const std::vector<float> x = consume_values(fdp, dtype);
  const size_t n = x.size();
  const size_t in_bytes = n * dtype_size(dtype);
  std::unique_ptr<uint8_t[]> in(new uint8_t[in_bytes]);
  store_dtype(x.data(), n, dtype, in.get());

  size_t bound = 0;
  const qc_status_t sb = qc_codec_encoded_size(&p, n, &bound);
  const bool bits_invalid = (p.codec == QC_CODEC_QSGD || is_global(p.codec)) && p.bits < 2;
  if (bits_invalid) {
    QC_FUZZ_CHECK(sb == QC_ERROR_INVALID_ARGUMENT, "codec %d bits %d: qc_codec_encoded_size gave %s",
                  p.codec, p.bits, qc_status_string(sb));
    std::vector<uint8_t> msg;
    const qc_status_t se = encode(p, in.get(), n, dtype, 64, &msg);
    QC_FUZZ_CHECK(se == QC_ERROR_INVALID_ARGUMENT, "codec %d bits %d: qc_codec_encode gave %s", p.codec,
                  p.bits, qc_status_string(se));
    return;
  }
  QC_FUZZ_CHECK(sb == QC_SUCCESS, "qc_codec_encoded_size gave %s", qc_status_string(sb));
  const size_t want_size = expected_size(p, n, dtype);
  if (p.codec == QC_CODEC_NONE) {
    QC_FUZZ_CHECK(bound == kHeader + 4 * n, "none: bound %zu for %zu elements", bound, n);
  } else {
    QC_FUZZ_CHECK(bound >= want_size, "bound %zu < message size %zu", bound, want_size);
    if (p.codec != QC_CODEC_TOPK) QC_FUZZ_CHECK(bound == want_size, "bound %zu != %zu", bound, want_size);
  }

  std::vector<uint8_t> msg;
  const qc_status_t se = encode(p, in.get(), n, dtype, bound, &msg);
  QC_FUZZ_CHECK(se == QC_SUCCESS, "qc_codec_encode gave %s", qc_status_string(se));
  QC_FUZZ_CHECK(msg.size() == want_size, "codec %d wrote %zu bytes, docs say %zu", p.codec,
                msg.size(), want_size);
  const uint8_t* h = msg.data();
  QC_FUZZ_CHECK(std::memcmp(h, "QCWF", 4) == 0 && h[4] == 1 && h[5] == p.codec, "header magic/version/codec");
  QC_FUZZ_CHECK(load_le(h + 16, 8) == n && load_le(h + 24, 8) == msg.size() - kHeader,
                "header count/payload length");
  // Flags: bit 0 stochastic; bit 1 (global codecs only) a max-abs scale.
  const bool global = p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP;
  QC_FUZZ_CHECK((load_le(h + 12, 4) & ~(global ? 3ull : 1ull)) == 0, "unknown header flags");
  if (global)
    QC_FUZZ_CHECK(((load_le(h + 12, 4) >> 1) & 1) == (p.scale != QC_SCALE_L2 ? 1u : 0u),
                  "flags bit 1 says the wrong scale");

  // Determinism: again, from a misaligned copy, from a source inside dst.
  std::vector<uint8_t> again;
  QC_FUZZ_CHECK(encode(p, in.get(), n, dtype, bound, &again) == QC_SUCCESS && again == msg,
                "encoding the same input twice gave different bytes");
  // qc_codec_encode reads a misaligned float32 source, or one that overlaps dst,
  // through a float32 copy (another path): same bytes.
  if (n > 0 && dtype == QC_DTYPE_FLOAT32) {
    std::unique_ptr<uint8_t[]> shifted(new uint8_t[in_bytes + 1]);
    std::memcpy(shifted.get() + 1, in.get(), in_bytes);
    std::vector<uint8_t> mis;
    QC_FUZZ_CHECK(encode(p, shifted.get() + 1, n, dtype, bound, &mis) == QC_SUCCESS && mis == msg,
                  "a misaligned source gave different bytes");
  } else if (n > 0) {
    // The source lies inside dst's capacity (right after the message).
    std::unique_ptr<uint8_t[]> both(new uint8_t[bound + in_bytes]);
    std::memcpy(both.get() + bound, in.get(), in_bytes);
    size_t written = 0;
    const qc_status_t so =
        qc_codec_encode(&p, both.get() + bound, n, dtype, both.get(), bound + in_bytes, &written);
    QC_FUZZ_CHECK(so == QC_SUCCESS && written == msg.size() &&
                      std::memcmp(both.get(), msg.data(), written) == 0,
                  "an overlapping source gave %s / different bytes", qc_status_string(so));
  }

  // Decode: float32, then the input dtype (= RNE of the float32 result).
  std::unique_ptr<uint8_t[]> copy(new uint8_t[msg.size()]);
  std::memcpy(copy.get(), msg.data(), msg.size());
  std::unique_ptr<uint8_t[]> ybytes;
  const qc_status_t sd = decode_into(copy.get(), msg.size(), n, QC_DTYPE_FLOAT32, &ybytes);
  QC_FUZZ_CHECK(sd == QC_SUCCESS, "decoding an encoded message gave %s", qc_status_string(sd));
  std::vector<float> y(n);
  if (n > 0) std::memcpy(y.data(), ybytes.get(), 4 * n);
  if (dtype != QC_DTYPE_FLOAT32) {
    std::unique_ptr<uint8_t[]> yd;
    QC_FUZZ_CHECK(decode_into(copy.get(), msg.size(), n, dtype, &yd) == QC_SUCCESS, "decode to dtype");
    for (size_t i = 0; i < n; ++i)
      QC_FUZZ_CHECK(same_float(load_dtype(yd.get(), i, dtype), round_to_dtype(y[i], dtype)),
                    "element %zu: decode to dtype %d disagrees with float32", i, dtype);
  }
  check_round_trip(p, x, y);

  // 3. damage the message where the input says; no crash, and a payload
  // without structure still decodes.
  const int edits = fdp.ConsumeIntegralInRange<int>(0, 4);
  bool header_touched = false;
  for (int e = 0; e < edits; ++e) {
    const size_t at = fdp.ConsumeIntegralInRange<size_t>(0, msg.size() - 1);
    msg[at] ^= static_cast<uint8_t>(fdp.ConsumeIntegralInRange<int>(1, 255));
    if (at < kHeader) header_touched = true;
  }
  if (edits > 0) {
    std::memcpy(copy.get(), msg.data(), msg.size());
    std::unique_ptr<uint8_t[]> yd;
    const qc_status_t s = decode_into(copy.get(), msg.size(), n, QC_DTYPE_FLOAT32, &yd);
    QC_FUZZ_CHECK(allowed_decode_status(s), "a damaged message gave %s", qc_status_string(s));
    // minmax/qsgd/onebit/none/casts: any payload bytes are values. (The
    // global codecs also refuse a negative or infinite norm and non-zero
    // unused code bits; topk checks k and its indices; the block-scaled
    // codecs refuse non-zero unused code bits, nvfp4 also a negative or
    // non-finite message scale and negative block scales.)
    if (!header_touched && !is_global(p.codec) && p.codec != QC_CODEC_TOPK &&
        !is_block_scaled(p.codec))
      QC_FUZZ_CHECK(s == QC_SUCCESS, "payload damage of codec %d refused: %s", p.codec, qc_status_string(s));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  decode_arbitrary(data, size);
  round_trip(data, size);
  return 0;
}
