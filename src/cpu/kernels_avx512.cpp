// AVX-512 kernels: bit-identical to the scalar reference (codec_kernels.h).
//
// Only the functions below carry the avx512 target attribute; the rest of
// the build stays plain x86-64 and isa_dispatch.cpp only hands this table
// out on a CPU that has avx512f/bw/vl (dq is part of every such CPU).
#include "cpu/codec_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QC_HAVE_AVX512_KERNELS 1
// GCC 12's avx512fintrin.h initialises its "undefined" operands from
// themselves, which -Wmaybe-uninitialized reports at every masked intrinsic
// (and -Wuninitialized at _mm512_extractf64x4_pd in a plain loop's fold).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/dtype_convert.h"
#include "cpu/global_levels.h"
#endif

namespace qc {
namespace cpu {

#if QC_HAVE_AVX512_KERNELS
namespace avx512_impl {

#define QC_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define QC_TI inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), always_inline))

// ---- 16-lane primitives ----------------------------------------------------------------

using VF = __m512;
using VI = __m512i;
using VM = __mmask16;

QC_TI VF loadu(const float* p) { return _mm512_loadu_ps(p); }
QC_TI VF load_partial(const float* p, size_t n) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
}
QC_TI void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }
QC_TI void store_partial(float* p, VF v, size_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
}
QC_TI void store_a(float* p, VF v) { _mm512_store_ps(p, v); }
QC_TI VF load_a(const float* p) { return _mm512_load_ps(p); }
// A whole, aligned cache line past the caches (no read for ownership).
QC_TI void stream_a(float* p, VF v) { _mm512_stream_ps(p, v); }
QC_TI void stream_fence() { _mm_sfence(); }
QC_TI VM tail_mask(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
// a where m, else b
QC_TI VF select(VM m, VF a, VF b) { return _mm512_mask_blend_ps(m, b, a); }
QC_TI VI select_i(VM m, VI a, VI b) { return _mm512_mask_blend_epi32(m, b, a); }
QC_TI VF set1(float v) { return _mm512_set1_ps(v); }
QC_TI VF zero_f() { return _mm512_setzero_ps(); }
QC_TI VI zero_i() { return _mm512_setzero_si512(); }
QC_TI VI set1_i(int32_t v) { return _mm512_set1_epi32(v); }
QC_TI VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
QC_TI VF sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
QC_TI VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
// minps/maxps semantics: (a < b) ? a : b and (a > b) ? a : b; b when unordered.
QC_TI VF vmin_(VF a, VF b) { return _mm512_min_ps(a, b); }
QC_TI VF vmax_(VF a, VF b) { return _mm512_max_ps(a, b); }
QC_TI VF round_near(VF t) {
  return _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
QC_TI VF round_floor(VF t) {
  return _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
QC_TI VI cvtt(VF v) { return _mm512_cvttps_epi32(v); }
// rint / floor straight to int32 (NaN and out-of-range give INT_MIN).
QC_TI VI cvt_near(VF v) {
  return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
QC_TI VI cvt_floor(VF v) {
  return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
QC_TI VF cvt_i2f(VI v) { return _mm512_cvtepi32_ps(v); }
QC_TI VI and_i(VI a, VI b) { return _mm512_and_si512(a, b); }
QC_TI VI or_i(VI a, VI b) { return _mm512_or_si512(a, b); }
QC_TI VM test_i(VI a, VI b) { return _mm512_test_epi32_mask(a, b); }
QC_TI VF abs_f(VF v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}
QC_TI VM lt_zero(VF z) { return _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ); }
QC_TI VF negate_where(VM m, VF v) {
  const VI s = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_mask_xor_epi32(_mm512_castps_si512(v), m,
                                                   _mm512_castps_si512(v), s));
}
// Lane k of m as bit k.
QC_TI uint32_t mask_bits(VM m) { return static_cast<uint32_t>(m); }
QC_TI uint32_t nonfinite_bits(VF z) {
  const VF d = _mm512_sub_ps(z, z);  // NaN exactly for NaN and +-Inf
  return _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
}
// For exponential dithering (global_exp): IEEE division, float bits as
// integers and back, lane compares (ordered: false for NaN) and mask logic.
QC_TI VF div(VF a, VF b) { return _mm512_div_ps(a, b); }
QC_TI VI bits_of(VF v) { return _mm512_castps_si512(v); }
QC_TI VF float_of(VI v) { return _mm512_castsi512_ps(v); }
QC_TI VI add_i(VI a, VI b) { return _mm512_add_epi32(a, b); }
QC_TI VI sub_i(VI a, VI b) { return _mm512_sub_epi32(a, b); }
QC_TI VI shr23_i(VI a) { return _mm512_srli_epi32(a, 23); }
QC_TI VI shl23_i(VI a) { return _mm512_slli_epi32(a, 23); }
template <int N>
QC_TI VI shr_i(VI a) { return _mm512_srli_epi32(a, N); }
template <int N>
QC_TI VI shl_i(VI a) { return _mm512_slli_epi32(a, N); }
QC_TI VM lt_f(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
QC_TI VM ge_f(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
QC_TI VM eq_f(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
QC_TI VM and_m(VM a, VM b) { return static_cast<VM>(a & b); }
QC_TI VM or_m(VM a, VM b) { return static_cast<VM>(a | b); }
// Table lookups for the block-scaled decoders: lane k gets t[idx[k] & 15]
// (lut16) or the (idx[k] & 31)-th of t0's and t1's 32 entries (lut32).
QC_TI VF lut16(VI idx, VF t) { return _mm512_permutexvar_ps(idx, t); }
QC_TI VF lut32(VI idx, VF t0, VF t1) { return _mm512_permutex2var_ps(t0, idx, t1); }
QC_TI VI max_i(VI a, VI b) { return _mm512_max_epi32(a, b); }
QC_TI VI min_i(VI a, VI b) { return _mm512_min_epi32(a, b); }
QC_TI VI sra1_i(VI a) { return _mm512_srai_epi32(a, 1); }
// Lane j: the largest lane of r[j] (signed int32), for 16 rows at once: each
// level halves the rows and doubles the rows per register (256-, 128-,
// 64-bit, then 32-bit groups), and a final permutation puts row j in lane j.
QC_TI VI hmax_rows16(const VI* r) {
  VI a[8], b[4], c[2];
#pragma GCC unroll 16
  for (int p = 0; p < 8; ++p) {
    a[p] = _mm512_max_epi32(_mm512_shuffle_i32x4(r[2 * p], r[2 * p + 1], 0x44),
                            _mm512_shuffle_i32x4(r[2 * p], r[2 * p + 1], 0xEE));
  }
#pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) {  // quarter k: row 4q + k
    b[q] = _mm512_max_epi32(_mm512_shuffle_i32x4(a[2 * q], a[2 * q + 1], 0x88),
                            _mm512_shuffle_i32x4(a[2 * q], a[2 * q + 1], 0xDD));
  }
#pragma GCC unroll 16
  for (int h = 0; h < 2; ++h) {  // quarter k: rows 8h + k (lanes 0-1), 8h + 4 + k (2-3)
    c[h] = _mm512_max_epi32(_mm512_unpacklo_epi64(b[2 * h], b[2 * h + 1]),
                            _mm512_unpackhi_epi64(b[2 * h], b[2 * h + 1]));
  }
  const __m512 x = _mm512_castsi512_ps(c[0]), y = _mm512_castsi512_ps(c[1]);
  const VI d = _mm512_max_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, 0x88)),
                                _mm512_castps_si512(_mm512_shuffle_ps(x, y, 0xDD)));
  // lane 4k + i holds row 4i + k
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), d);
}
QC_TI float hmin(VF v) { return _mm512_reduce_min_ps(v); }
QC_TI float hmax(VF v) { return _mm512_reduce_max_ps(v); }

// The canonical sum's fold: acc[j] += acc[j + w] for w = 8, 4, 2, 1 (lane-wise
// adds in the same order and with the same operands as the scalar loop).
QC_TI float canonical_fold_v(VF acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  a4 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  a4 = _mm_add_ss(a4, _mm_shuffle_ps(a4, a4, 1));
  return _mm_cvtss_f32(a4);
}

QC_TI VI lowbias32_v(VI x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  return x;
}

// random_uniform(s, base + k) in lane k.
QC_TI VF uniform16(const RandomStream& s, uint64_t base) {
  const VI iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const uint32_t lo0 = static_cast<uint32_t>(base);
  VI lo, hi;
  if (lo0 <= 0xffffffffu - 15u) {
    lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(lo0)), iota);
    hi = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(base >> 32)));
  } else {  // the 16 indices straddle a 2^32 boundary
    alignas(64) uint32_t l[16], h[16];
    for (int k = 0; k < 16; ++k) {
      const uint64_t idx = base + static_cast<uint64_t>(k);
      l[k] = static_cast<uint32_t>(idx);
      h[k] = static_cast<uint32_t>(idx >> 32);
    }
    lo = _mm512_load_si512(l);
    hi = _mm512_load_si512(h);
  }
  VI r = lowbias32_v(_mm512_xor_si512(lo, _mm512_set1_epi32(static_cast<int32_t>(s.k0))));
  r = lowbias32_v(
      _mm512_xor_si512(r, _mm512_xor_si512(hi, _mm512_set1_epi32(static_cast<int32_t>(s.k1)))));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)),
                       _mm512_set1_ps(1.0f / 16777216.0f));
}

// Codes (each < 2^Q, in 32-bit lanes) -> 16*Q bits, element k at bits [kQ, kQ+Q).
template <int Q>
QC_TI uint64_t pack_codes(VI c) {
  if constexpr (Q == 1) {
    return _mm512_test_epi32_mask(c, c);
  } else if constexpr (Q == 2) {
    const __m128i b = _mm512_cvtepi32_epi8(c);
    const __m128i w = _mm_maddubs_epi16(b, _mm_set1_epi16(0x0401));   // c0 | c1 << 2
    const __m128i d = _mm_madd_epi16(w, _mm_set1_epi32(0x00100001));  // .. | c2 << 4 | c3 << 6
    return static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_cvtepi32_epi8(d)));
  } else {
    const __m512i w = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));  // c0 | c1 << 4
    return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm512_cvtepi64_epi8(w)));
  }
}

template <int Q>
QC_TI VI unpack_codes(uint64_t v) {
  if constexpr (Q == 1) {
    return _mm512_maskz_set1_epi32(static_cast<__mmask16>(v), 1);
  } else if constexpr (Q == 2) {
    const VI s = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(v))), s),
        _mm512_set1_epi32(3));
  } else {
    const VI s = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const VI idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const VI w = _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(_mm_cvtsi64_si128(
                                                   static_cast<long long>(v))));
    return _mm512_and_si512(_mm512_srlv_epi32(w, s), _mm512_set1_epi32(15));
  }
}

// Any q (3, 5, 6, 7): the 8 codes of each half as one 8q-bit word (q*k
// shifts in 64-bit lanes, then an OR reduction), and back.
QC_TI __m512i generic_shifts(int q) {
  return _mm512_mul_epu32(_mm512_set1_epi64(q), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
}
QC_TI void pack_codes_generic(VI c, int q, uint64_t* lo, uint64_t* hi) {
  const __m512i sh = generic_shifts(q);
  const __m512i l = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(c));
  const __m512i h = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(c, 1));
  *lo = static_cast<uint64_t>(_mm512_reduce_or_epi64(_mm512_sllv_epi64(l, sh)));
  *hi = static_cast<uint64_t>(_mm512_reduce_or_epi64(_mm512_sllv_epi64(h, sh)));
}
QC_TI VI unpack_codes_generic(uint64_t lo, uint64_t hi, int q) {
  const __m512i sh = generic_shifts(q);
  const __m512i m = _mm512_set1_epi64(static_cast<long long>((1u << q) - 1u));
  const __m256i a = _mm512_cvtepi64_epi32(
      _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(lo)), sh), m));
  const __m256i b = _mm512_cvtepi64_epi32(
      _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(hi)), sh), m));
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

QC_TI void store_bytes8(uint8_t* p, VI c, size_t n) {
  const __m128i b = _mm512_cvtepi32_epi8(c);
  if (n >= 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
  else _mm_mask_storeu_epi8(p, static_cast<__mmask16>((1u << n) - 1u), b);
}
QC_TI VI load_bytes8(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Buckets of 16 * kFixedChunks elements (the default 128) stay in registers.
constexpr int kFixedChunks = 8;

// 16-bit inputs of the encoders: 16 values (n < 16: the first n, the rest
// +0) at p (unaligned), widened to float32. The hardware quiets a signalling
// NaN where half_to_float keeps its bits; either is a NaN, which makes its
// bucket a NaN bucket, so the encoded bytes are the same.
QC_TI VF load_f16(const uint8_t* p, size_t n) {
  const __m256i h = n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                            : _mm256_maskz_loadu_epi16(tail_mask(n), p);
  return _mm512_cvtph_ps(h);
}
QC_TI VF load_bf16(const uint8_t* p, size_t n) {
  const __m256i h = n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                            : _mm256_maskz_loadu_epi16(tail_mask(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#include "cpu/simd_codec_impl.h"

// ---- casts ------------------------------------------------------------------------------

QC_T void fp16_encode_v(const float* x, size_t count, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), h);
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1u);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(out + 2 * i, m, h);
  }
}

// Half -> float for 16 halves; signalling NaNs keep their bits as in the
// scalar (the hardware conversion would quiet them).
QC_TI VF half16_to_float(__m256i h) {
  VF v = _mm512_cvtph_ps(h);
  const __mmask16 snan =
      _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7e00)),
                              _mm256_set1_epi16(0x7c00)) &
      _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x01ff));
  if (snan != 0) {
    const VI w = _mm512_cvtepu16_epi32(h);
    const VI f = _mm512_or_si512(
        _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16),
        _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                        _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13)));
    v = _mm512_mask_blend_ps(snan, v, _mm512_castsi512_ps(f));
  }
  return v;
}

QC_T void fp16_decode_v(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    VF v = half16_to_float(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i)));
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(dst + i), v);
    _mm512_storeu_ps(dst + i, v);
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1u);
    VF v = half16_to_float(_mm256_maskz_loadu_epi16(m, in + 2 * i));
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), v);
    _mm512_mask_storeu_ps(dst + i, m, v);
  }
}

QC_TI __m256i bf16_round(VF f) {
  const VI x = _mm512_castps_si512(f);
  const VI hi16 = _mm512_srli_epi32(x, 16);
  const VI rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
                       _mm512_and_si512(hi16, _mm512_set1_epi32(1))),
      16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const VI r = _mm512_mask_or_epi32(rounded, nan, hi16, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

QC_T void bf16_encode_v(const float* x, size_t count, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), bf16_round(_mm512_loadu_ps(x + i)));
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1u);
    _mm256_mask_storeu_epi16(out + 2 * i, m, bf16_round(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

QC_T void bf16_decode_v(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    VF v = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i))),
        16));
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(dst + i), v);
    _mm512_storeu_ps(dst + i, v);
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1u);
    VF v = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + 2 * i)), 16));
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), v);
    _mm512_mask_storeu_ps(dst + i, m, v);
  }
}

// Lanes d[0..16) in two 8-double registers; the tail and the fold as the
// scalar kernel does them.
QC_T double squared_norm_v(const float* x, size_t count) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
    hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
  }
  alignas(64) double d[16];
  _mm512_store_pd(d, lo);
  _mm512_store_pd(d + 8, hi);
  for (size_t j = 0; i < count; ++i, ++j) d[j] += static_cast<double>(x[i]) * x[i];
  for (size_t w = 8; w >= 1; w /= 2) {
    for (size_t j = 0; j < w; ++j) d[j] += d[j + w];
  }
  return d[0];
}

#undef QC_T
#undef QC_TI

const KernelTable kAvx512Table = {
    Isa::kAvx512,   "avx512",       minmax_encode_v, minmax_decode_v, qsgd_encode_v, qsgd_decode_v,
    onebit_encode_v, onebit_decode_v, fp16_encode_v,  fp16_decode_v,   bf16_encode_v, bf16_decode_v,
    squared_norm_v, global_sum_of_squares_v, global_max_abs_v, global_encode_v, global_decode_v,
    block_encode_v, block_decode_v, copy_streaming_v,
};

}  // namespace avx512_impl

const KernelTable* avx512_kernels() { return &avx512_impl::kAvx512Table; }
#else
const KernelTable* avx512_kernels() { return nullptr; }
#endif

}  // namespace cpu
}  // namespace qc
