// The CPU codec kernels: one table of function pointers per ISA.
//
// The scalar kernels (kernels_scalar.cpp and friends) are the definition of
// every codec's arithmetic; the AVX2 and AVX-512 tables must produce
// bit-identical bytes and floats, so the arithmetic is spelled out below and
// every path follows it exactly (no FMA contraction, fixed summation order).
//
// Common rules
//  - Buckets are consecutive runs of `bucket` elements; the last may be short.
//  - Codes form one little-endian bitstream: element i occupies bits
//    [i*q, (i+1)*q) (4-bit: element 2k in the low nibble of byte k). The
//    codes area is ceil(count*q/8) bytes; unused high bits of the last byte
//    are zero.
//  - Metadata is little-endian float32, written through unaligned stores.
//  - A bucket holding a NaN or an infinity gets NaN metadata and zero codes,
//    so all of its elements decode to NaN (loss scalers see the overflow);
//    other buckets are unaffected.
//  - Stochastic rounding of element i uses random_uniform(rng, index_base + i)
//    (random.h): floor(t + u). Nearest rounding is rint (ties to even).
//  - "Canonical sum" of v[0..n): 16 float partial sums acc[i % 16] += v[i]
//    (starting at +0), then acc[j] += acc[j + w] for w = 8, 4, 2, 1, j < w;
//    the result is acc[0]. AVX-512 keeps one 16-lane accumulator, AVX2 two
//    8-lane ones, and both reduce in that order.
//  - "Squared norm" of x[0..n) (a layer's statistics, never on the wire):
//    16 double partial sums d[i % 16] += double(x[i]) * double(x[i]), then
//    the canonical sum's fold in double; every ISA keeps that order.
//
// minmax (q = bits, 1..8; meta per bucket: min, scale)
//    L = 2^q - 1; lo = min, hi = max; scale = (hi - lo) / L;
//    inv = scale >= 2^-126 ? 1 / scale : 0; t = (x - lo) * inv;
//    (1 / a subnormal scale overflows to Inf, and 0 * Inf is NaN: such a
//    bucket, e.g. error-feedback residuals decaying on a zero gradient, is
//    coded all zero and decodes to lo, within L * 2^-126 of every value.)
//    j = clamp(round(t), 0, L); decode: lo + j * scale (multiply, then add),
//    except in a bucket whose top level lo + L * scale is not finite
//    (minmax_levels below), and saturated at FLT_MAX. The residual e uses
//    the same decoded value.
// qsgd (q = 2..8; meta per bucket: norm)
//    M = 2^(q-1) - 1; norm = sqrt(canonical sum of x*x); inv = norm > 0 ? M / norm : 0;
//    level = clamp(round(|x| * inv), 0, M); code = (x < 0) << (q-1) | level;
//    decode: +-(level * (norm / M)).
// onebit (meta per bucket: scale = canonical sum of |x| / n, the L1 mean, so
//    the decoded bucket keeps the input's mean magnitude)
//    code = x < 0; decode: code ? -scale : scale.
//
// Scale reuse (QuantArgs::reuse_meta, policy.scale_update_period, paper 001
// §3.2): bucket b takes its metadata from reuse_meta (an earlier message's
// metadata for the same count and bucket size) instead of from its values,
// when that metadata is finite and its scale (minmax scale, qsgd norm,
// onebit scale) is > 0; the written metadata is then the reused one. The
// codes follow the rules above unchanged, so their clamps saturate values
// outside the reused range (minmax: to 0 or L; qsgd: to level M) instead of
// wrapping, and with error feedback the saturated part stays in e. A bucket
// with a non-finite value is still NaN; a bucket whose stored scale is 0 or
// non-finite is computed fresh (an all-zero bucket at the refresh must not
// pin the bucket to zero for the whole period).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/host_device.h"
#include "cpu/block_formats.h"
#include "cpu/isa.h"
#include "cpu/random.h"
#include "qc.h"

namespace qc {
namespace cpu {

// minmax's decoded levels for one bucket: level(j) = min((lo + j * scale) * f,
// FLT_MAX). Normally lo and scale are the metadata and f = 1 (exact, so the
// decode is lo + j * scale). When the top level lo + L * scale is not finite
// (a range within rounding of FLT_MAX: j * scale or the sum overflows, and
// found by fuzz_decode, a finite input decoded to +Inf or, saturated, to
// FLT_MAX far from it), the bucket is decoded at half scale: lo / 2 and
// scale / 2 (exact unless subnormal) with f = 2, which cannot overflow before
// the final doubling; the final min catches a top level that still rounds
// past FLT_MAX (no finite input lies above it). NaN metadata stays NaN.
// Every kernel takes its per-bucket constants from here.
struct MinmaxLevels {
  float lo, scale, f;
};
QC_HOST_DEVICE inline MinmaxLevels minmax_levels(float lo, float scale, float L) {
  if (fabsf(lo + L * scale) <= FLT_MAX) return {lo, scale, 1.0f};
  return {lo * 0.5f, scale * 0.5f, 2.0f};
}

// Residual hygiene (error feedback; docs/fidelity.md "Residuals that are
// dropped"). After an error-compensated encode, a bucket's residuals are set
// to zero when they cannot be carried forward:
//  - its decoded values are not all finite (a NaN or Inf in z, or a finite z
//    the codec cannot represent: minmax max - min, qsgd's sum of squares or
//    onebit's sum of magnitudes overflowing float), or
//  - they could overflow the next encode of the bucket by themselves: what
//    they add to its statistic may exceed kResidualBudget (a quarter of
//    float's range; the rest is left for the next input).
// Each bucket's residual is at most one level gap, so the test is on one
// metadata-derived "gauge" per bucket, against a limit fixed per call:
//    minmax  gauge scale:        |e| <= scale, the residuals span <= 2 scale
//    qsgd    gauge norm / M:     |e| <= norm / M, sum e^2 <= bucket (norm/M)^2
//    onebit  gauge scale:        |e| <= |z| + scale, sum |e| <= 2 bucket scale
// kept iff gauge <= limit (a NaN gauge fails). Every kernel (scalar, AVX2,
// AVX-512, CUDA) decides from the same floats, so the residuals stay bit
// identical; the bytes sent never change. With reused scales (host only)
// the residual is not bounded by the metadata (saturation leaves the
// excess in e, by design), so the host kernels also reset a bucket that
// has a non-finite residual; without reuse that cannot happen to a kept
// bucket (each |e| is bounded as above).
constexpr float kResidualBudget = FLT_MAX / 4;
QC_HOST_DEVICE inline float minmax_residual_limit() { return kResidualBudget / 2; }
QC_HOST_DEVICE inline float qsgd_residual_limit(size_t bucket) {
  return sqrtf(kResidualBudget / static_cast<float>(bucket));
}
QC_HOST_DEVICE inline float onebit_residual_limit(size_t bucket) {
  return kResidualBudget / 2 / static_cast<float>(bucket);
}
// The limit for a codec (minmax, qsgd or onebit) and bucket size.
QC_HOST_DEVICE inline float residual_limit(qc_codec_t codec, size_t bucket) {
  return codec == QC_CODEC_MINMAX  ? minmax_residual_limit()
         : codec == QC_CODEC_QSGD ? qsgd_residual_limit(bucket)
                                  : onebit_residual_limit(bucket);
}
QC_HOST_DEVICE inline bool keeps_residuals(float gauge, float limit) { return gauge <= limit; }
// The global codecs (codec_global.h): the message is one bucket of `count`
// elements, each |e| at most the largest level gap (the gauge): linear
// norm / M, exponential norm / 2 (value(M) - value(M - 1); norm when M = 1).
QC_HOST_DEVICE inline float global_residual_limit(size_t count) {
  return qsgd_residual_limit(count);
}
QC_HOST_DEVICE inline float global_residual_gauge(bool exponential, float norm, int M) {
  if (!exponential) return norm / static_cast<float>(M);
  return M >= 2 ? norm * 0.5f : norm;
}

// minmax: the smallest scale that is inverted (FLT_MIN, 2^-126); see above.
constexpr float kMinInvertibleScale = 1.17549435e-38f;
// The global codecs' max-abs scale: one below 2^-120 is taken as 0, so the
// message decodes to 0 (every |z| is below it), because global_linear's
// M / scale would overflow float for a smaller one (M <= 127).
constexpr float kMinGlobalMaxAbsScale = 0x1p-120f;
// And one above 2^127 counts as not finite (the message is NaN, as an L2
// norm whose squares overflow is): level M decodes to M * (scale / M),
// which may round past FLT_MAX for a larger one.
constexpr float kMaxGlobalMaxAbsScale = 0x1p127f;
// A max-abs (NaN or Inf when some z is) as the scale a message carries:
// 0 below kMinGlobalMaxAbsScale, NaN above kMaxGlobalMaxAbsScale. The
// host's one rule (codec and native agreement); the CUDA kernel mirrors it.
inline float global_max_abs_scale(float max_abs) {
  if (max_abs < kMinGlobalMaxAbsScale) return 0.0f;
  if (!(max_abs <= kMaxGlobalMaxAbsScale)) return std::numeric_limits<float>::quiet_NaN();
  return max_abs;
}

struct QuantArgs {
  int bits = 4;
  size_t bucket = 128;
  bool stochastic = false;
  RandomStream rng;
  uint64_t index_base = 0;  // global index of element 0, for the random bits
  // What x points to: float32, or float16 / bfloat16 values that the kernel
  // widens to float32 as it loads them (F16C / AVX-512 in the SIMD tables),
  // so a 16-bit input needs no separate conversion pass. Widening is exact,
  // so the bytes equal those of converting to float32 first and encoding.
  // Only the plain encode (e == nullptr) takes a 16-bit input.
  qc_dtype_t input_dtype = QC_DTYPE_FLOAT32;
  // Scale reuse (see above): metadata of the same layout, or nullptr.
  const uint8_t* reuse_meta = nullptr;
};

// Encode x[0..count) into meta and codes. x holds count values of
// args.input_dtype (a float* only when that is QC_DTYPE_FLOAT32). With
// e != nullptr the encode is error-compensated in the same pass (paper 000
// Alg. 1, DQE): z = x + e is encoded and e becomes z - decode(z); x must then
// be float32.
using QuantEncodeFn = void (*)(const float* x, float* e, size_t count, const QuantArgs& args,
                               uint8_t* meta, uint8_t* codes);
// Decode count values; accumulate: dst += decoded instead of dst = decoded.
using QuantDecodeFn = void (*)(const uint8_t* meta, const uint8_t* codes, size_t count,
                               int bits, size_t bucket, float* dst, bool accumulate);
// Casts between float32 and a 16-bit wire type (unaligned `half` bytes).
using CastEncodeFn = void (*)(const float* x, size_t count, uint8_t* out);
using CastDecodeFn = void (*)(const uint8_t* in, size_t count, float* dst, bool accumulate);

using SquaredNormFn = double (*)(const float* x, size_t count);

// The global codecs (core/codecs/codec_global.h defines their arithmetic;
// the scalar kernels in kernels_global_scalar.cpp spell it out), over one
// message of count elements with z = t + e (or t when e is null):
//  - sum of squares: the canonical sum of z * z (canonical_sum.h);
//  - max-abs: the largest |z|; NaN when any z is NaN, else +Inf when any z is
//    infinite, else a finite value >= +0 (+0 for count 0). A max is order
//    independent, so every ISA returns the same float;
//  - encode: the codes of z for a finite norm >= 0 (global_linear, or
//    global_exp when `exponential`), with args.bits, args.stochastic,
//    args.rng and args.index_base (bucket, input_dtype and reuse_meta are
//    unused); with e != nullptr, e becomes z - decode(z). Every z must be
//    finite (the codec sends a NaN norm otherwise); the residual hygiene and
//    the norm are the codec's;
//  - decode: dst = (or +=) the decoded values of count codes and `norm`.
using GlobalReduceFn = float (*)(const float* t, const float* e, size_t count);
using GlobalEncodeFn = void (*)(const float* t, float* e, size_t count, const QuantArgs& args,
                                bool exponential, float norm, uint8_t* codes);
using GlobalDecodeFn = void (*)(const uint8_t* codes, size_t count, int bits, bool exponential,
                                float norm, float* dst, bool accumulate);

// The block-scaled codecs (core/codecs/codec_block_scaled.h; the arithmetic
// is cpu/block_formats.h's, the rules docs/wire-format.md's "Block-scaled
// formats"), over one message's payload (nvfp4's f32 S, one scale byte per
// block, the codes):
//  - encode: z = t (+ e), with e != nullptr e becomes z - decode(z) (0 in
//    a NaN block); the random bits of element i are
//    random_uniform(rng, index_base + i);
//  - decode: dst = (or +=) the values of a payload the codec has checked.
struct BlockArgs {
  ElementFormat format = kE4M3;
  size_t block = 32;
  bool nvfp4 = false;
  bool stochastic = false;
  RandomStream rng;
  uint64_t index_base = 0;
};
using BlockEncodeFn = void (*)(const float* t, float* e, size_t count, const BlockArgs& args,
                               uint8_t* payload);
using BlockDecodeFn = void (*)(const uint8_t* payload, size_t count, const BlockArgs& args,
                               float* dst, bool accumulate);

// dst = src for a result written once and not read again while it would
// still be cached (cpu_cache.h): SIMD tables store whole 64-byte lines
// past the caches, the scalar one copies plainly. Same bytes either way.
using CopyFn = void (*)(float* dst, const float* src, size_t count);

struct KernelTable {
  Isa isa;
  const char* name;  // "scalar", "avx2", "avx512"
  QuantEncodeFn minmax_encode;
  QuantDecodeFn minmax_decode;
  QuantEncodeFn qsgd_encode;
  QuantDecodeFn qsgd_decode;
  QuantEncodeFn onebit_encode;
  QuantDecodeFn onebit_decode;
  CastEncodeFn fp16_encode;
  CastDecodeFn fp16_decode;
  CastEncodeFn bf16_encode;
  CastDecodeFn bf16_decode;
  SquaredNormFn squared_norm;
  GlobalReduceFn global_sum_of_squares;
  GlobalReduceFn global_max_abs;
  GlobalEncodeFn global_encode;
  GlobalDecodeFn global_decode;
  BlockEncodeFn block_encode;
  BlockDecodeFn block_decode;
  CopyFn copy_streaming;
};

// The table in use: the best ISA this CPU supports, or the one QC_CPU_ISA
// (scalar|avx2|avx512) names; chosen once, on first use.
const KernelTable& kernels();
// A specific table, or nullptr when this CPU (or build) lacks that ISA.
const KernelTable* kernels_for(Isa isa);

// The scalar global kernels (the definitions; the SIMD tables fall back to
// global_max_abs_scalar for a message with a non-finite value).
float global_sum_of_squares_scalar(const float* t, const float* e, size_t count);
float global_max_abs_scalar(const float* t, const float* e, size_t count);
void global_encode_scalar(const float* t, float* e, size_t count, const QuantArgs& args,
                          bool exponential, float norm, uint8_t* codes);
void global_decode_scalar(const uint8_t* codes, size_t count, int bits, bool exponential,
                          float norm, float* dst, bool accumulate);

// The scalar block-scaled kernels (the definitions).
void block_encode_scalar(const float* t, float* e, size_t count, const BlockArgs& args,
                         uint8_t* payload);
void block_decode_scalar(const uint8_t* payload, size_t count, const BlockArgs& args, float* dst,
                         bool accumulate);

// Per-ISA tables; a missing ISA's getter returns nullptr.
const KernelTable* scalar_kernels();
const KernelTable* avx2_kernels();
const KernelTable* avx512_kernels();

inline size_t codes_bytes(size_t count, int bits) {
  return (count * static_cast<size_t>(bits) + 7) / 8;
}
inline size_t bucket_count(size_t count, size_t bucket) {
  return count == 0 ? 0 : (count + bucket - 1) / bucket;
}

}  // namespace cpu
}  // namespace qc
