// AVX2 kernels: bit-identical to the scalar reference (codec_kernels.h).
//
// A 16-lane vector is two 8-lane halves (lanes 0-7 and 8-15), so the
// canonical sum's acc[i % 16] maps onto the halves directly. Only the
// functions below carry the avx2 target attribute; the rest of the build
// stays plain x86-64, and isa_dispatch.cpp only hands this table out on a
// CPU with avx2, fma and f16c (fma is never used: it would change rounding).
#include "cpu/codec_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QC_HAVE_AVX2_KERNELS 1
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/dtype_convert.h"
#include "cpu/global_levels.h"
#endif

namespace qc {
namespace cpu {

#if QC_HAVE_AVX2_KERNELS
namespace avx2_impl {

#define QC_T __attribute__((target("avx2,fma,f16c")))
#define QC_TI inline __attribute__((target("avx2,fma,f16c"), always_inline))

// ---- 16-lane primitives (two 8-lane halves) --------------------------------------------

struct VF {
  __m256 a, b;
};
struct VI {
  __m256i a, b;
};
using VM = VI;  // all-ones / all-zeros lanes

QC_TI __m256i iota8(int k0) {
  return _mm256_add_epi32(_mm256_set1_epi32(k0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
QC_TI VM tail_mask(size_t n) {
  const __m256i vn = _mm256_set1_epi32(static_cast<int32_t>(n));
  return {_mm256_cmpgt_epi32(vn, iota8(0)), _mm256_cmpgt_epi32(vn, iota8(8))};
}
QC_TI VF loadu(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
QC_TI VF load_partial(const float* p, size_t n) {
  const VM m = tail_mask(n);
  // maskload never touches the masked-off lanes; keep the pointer in range.
  return {_mm256_maskload_ps(p, m.a), n > 8 ? _mm256_maskload_ps(p + 8, m.b) : _mm256_setzero_ps()};
}
QC_TI void storeu(float* p, VF v) {
  _mm256_storeu_ps(p, v.a);
  _mm256_storeu_ps(p + 8, v.b);
}
QC_TI void store_partial(float* p, VF v, size_t n) {
  const VM m = tail_mask(n);
  _mm256_maskstore_ps(p, m.a, v.a);
  if (n > 8) _mm256_maskstore_ps(p + 8, m.b, v.b);
}
QC_TI void store_a(float* p, VF v) {
  _mm256_store_ps(p, v.a);
  _mm256_store_ps(p + 8, v.b);
}
QC_TI VF load_a(const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
// A whole, aligned cache line past the caches (no read for ownership).
QC_TI void stream_a(float* p, VF v) {
  _mm256_stream_ps(p, v.a);
  _mm256_stream_ps(p + 8, v.b);
}
QC_TI void stream_fence() { _mm_sfence(); }
// a where m, else b
QC_TI VF select(VM m, VF a, VF b) {
  return {_mm256_blendv_ps(b.a, a.a, _mm256_castsi256_ps(m.a)),
          _mm256_blendv_ps(b.b, a.b, _mm256_castsi256_ps(m.b))};
}
QC_TI VI select_i(VM m, VI a, VI b) {
  return {_mm256_blendv_epi8(b.a, a.a, m.a), _mm256_blendv_epi8(b.b, a.b, m.b)};
}
QC_TI VF set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
QC_TI VF zero_f() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
QC_TI VI zero_i() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
QC_TI VI set1_i(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
QC_TI VF add(VF x, VF y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
QC_TI VF sub(VF x, VF y) { return {_mm256_sub_ps(x.a, y.a), _mm256_sub_ps(x.b, y.b)}; }
QC_TI VF mul(VF x, VF y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
// minps/maxps semantics: (x < y) ? x : y and (x > y) ? x : y; y when unordered.
QC_TI VF vmin_(VF x, VF y) { return {_mm256_min_ps(x.a, y.a), _mm256_min_ps(x.b, y.b)}; }
QC_TI VF vmax_(VF x, VF y) { return {_mm256_max_ps(x.a, y.a), _mm256_max_ps(x.b, y.b)}; }
QC_TI VF round_near(VF t) {
  return {_mm256_round_ps(t.a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
          _mm256_round_ps(t.b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
QC_TI VF round_floor(VF t) {
  return {_mm256_round_ps(t.a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
          _mm256_round_ps(t.b, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};
}
QC_TI VI cvtt(VF v) { return {_mm256_cvttps_epi32(v.a), _mm256_cvttps_epi32(v.b)}; }
// rint (the MXCSR mode, round-to-nearest-even as for nearbyint) / floor
// straight to int32 (NaN and out-of-range give INT_MIN).
QC_TI VI cvt_near(VF v) { return {_mm256_cvtps_epi32(v.a), _mm256_cvtps_epi32(v.b)}; }
QC_TI VI cvt_floor(VF v) { return cvtt(round_floor(v)); }
QC_TI VF cvt_i2f(VI v) { return {_mm256_cvtepi32_ps(v.a), _mm256_cvtepi32_ps(v.b)}; }
QC_TI VI and_i(VI x, VI y) { return {_mm256_and_si256(x.a, y.a), _mm256_and_si256(x.b, y.b)}; }
QC_TI VI or_i(VI x, VI y) { return {_mm256_or_si256(x.a, y.a), _mm256_or_si256(x.b, y.b)}; }
QC_TI VM test_i(VI x, VI y) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi32(-1);
  return {_mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(x.a, y.a), z), ones),
          _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(x.b, y.b), z), ones)};
}
QC_TI VF abs_f(VF v) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  return {_mm256_and_ps(v.a, m), _mm256_and_ps(v.b, m)};
}
QC_TI VM lt_zero(VF z) {
  const __m256 zero = _mm256_setzero_ps();
  return {_mm256_castps_si256(_mm256_cmp_ps(z.a, zero, _CMP_LT_OQ)),
          _mm256_castps_si256(_mm256_cmp_ps(z.b, zero, _CMP_LT_OQ))};
}
QC_TI VF negate_where(VM m, VF v) {
  const __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  return {_mm256_xor_ps(v.a, _mm256_and_ps(_mm256_castsi256_ps(m.a), s)),
          _mm256_xor_ps(v.b, _mm256_and_ps(_mm256_castsi256_ps(m.b), s))};
}
// Lane k of m as bit k.
QC_TI uint32_t mask_bits(VM m) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.a))) |
         static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.b))) << 8;
}
QC_TI uint32_t nonfinite_bits(VF z) {
  const __m256 da = _mm256_sub_ps(z.a, z.a);  // NaN exactly for NaN and +-Inf
  const __m256 db = _mm256_sub_ps(z.b, z.b);
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(da, da, _CMP_UNORD_Q))) |
         static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(db, db, _CMP_UNORD_Q))) << 8;
}
// For exponential dithering (global_exp): IEEE division, float bits as
// integers and back, lane compares (ordered: false for NaN) and mask logic.
QC_TI VF div(VF x, VF y) { return {_mm256_div_ps(x.a, y.a), _mm256_div_ps(x.b, y.b)}; }
QC_TI VI bits_of(VF v) { return {_mm256_castps_si256(v.a), _mm256_castps_si256(v.b)}; }
QC_TI VF float_of(VI v) { return {_mm256_castsi256_ps(v.a), _mm256_castsi256_ps(v.b)}; }
QC_TI VI add_i(VI x, VI y) { return {_mm256_add_epi32(x.a, y.a), _mm256_add_epi32(x.b, y.b)}; }
QC_TI VI sub_i(VI x, VI y) { return {_mm256_sub_epi32(x.a, y.a), _mm256_sub_epi32(x.b, y.b)}; }
QC_TI VI shr23_i(VI x) { return {_mm256_srli_epi32(x.a, 23), _mm256_srli_epi32(x.b, 23)}; }
QC_TI VI shl23_i(VI x) { return {_mm256_slli_epi32(x.a, 23), _mm256_slli_epi32(x.b, 23)}; }
template <int N>
QC_TI VI shr_i(VI x) { return {_mm256_srli_epi32(x.a, N), _mm256_srli_epi32(x.b, N)}; }
template <int N>
QC_TI VI shl_i(VI x) { return {_mm256_slli_epi32(x.a, N), _mm256_slli_epi32(x.b, N)}; }
template <int Cmp>
QC_TI VM cmp_f(VF x, VF y) {
  return {_mm256_castps_si256(_mm256_cmp_ps(x.a, y.a, Cmp)),
          _mm256_castps_si256(_mm256_cmp_ps(x.b, y.b, Cmp))};
}
QC_TI VM lt_f(VF x, VF y) { return cmp_f<_CMP_LT_OQ>(x, y); }
QC_TI VM ge_f(VF x, VF y) { return cmp_f<_CMP_GE_OQ>(x, y); }
QC_TI VM eq_f(VF x, VF y) { return cmp_f<_CMP_EQ_OQ>(x, y); }
QC_TI VM and_m(VM x, VM y) { return and_i(x, y); }
QC_TI VM or_m(VM x, VM y) { return or_i(x, y); }
// Table lookups for the block-scaled decoders: lane k gets t[idx[k] & 15]
// (lut16) or the (idx[k] & 31)-th of t0's and t1's 32 entries (lut32).
QC_TI __m256 lut16_half(__m256i idx, VF t) {
  const __m256 lo = _mm256_permutevar8x32_ps(t.a, idx);
  const __m256 hi = _mm256_permutevar8x32_ps(t.b, idx);
  return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3
}
QC_TI VF lut16(VI idx, VF t) { return {lut16_half(idx.a, t), lut16_half(idx.b, t)}; }
QC_TI VF lut32(VI idx, VF t0, VF t1) {
  const __m256 a = _mm256_blendv_ps(lut16_half(idx.a, t0), lut16_half(idx.a, t1),
                                    _mm256_castsi256_ps(_mm256_slli_epi32(idx.a, 27)));  // bit 4
  const __m256 b = _mm256_blendv_ps(lut16_half(idx.b, t0), lut16_half(idx.b, t1),
                                    _mm256_castsi256_ps(_mm256_slli_epi32(idx.b, 27)));
  return {a, b};
}
QC_TI VI max_i(VI x, VI y) { return {_mm256_max_epi32(x.a, y.a), _mm256_max_epi32(x.b, y.b)}; }
QC_TI VI min_i(VI x, VI y) { return {_mm256_min_epi32(x.a, y.a), _mm256_min_epi32(x.b, y.b)}; }
QC_TI VI sra1_i(VI x) { return {_mm256_srai_epi32(x.a, 1), _mm256_srai_epi32(x.b, 1)}; }
// Lane j: the largest lane of r[j] (signed int32), for 16 rows at once: each
// level halves the rows and doubles the rows per register (128-, 64-, then
// 32-bit groups), and a final permutation puts row j in lane j.
QC_TI VI hmax_rows16(const VI* r) {
  __m256i m[16], n[8], o[4], w[2];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) m[j] = _mm256_max_epi32(r[j].a, r[j].b);
#pragma GCC unroll 16
  for (int p = 0; p < 8; ++p) {  // 128-bit half h: row 2p + h
    n[p] = _mm256_max_epi32(_mm256_permute2x128_si256(m[2 * p], m[2 * p + 1], 0x20),
                            _mm256_permute2x128_si256(m[2 * p], m[2 * p + 1], 0x31));
  }
#pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) {  // half h: rows 4q + h (lanes 0-1), 4q + 2 + h (2-3)
    o[q] = _mm256_max_epi32(_mm256_unpacklo_epi64(n[2 * q], n[2 * q + 1]),
                            _mm256_unpackhi_epi64(n[2 * q], n[2 * q + 1]));
  }
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
#pragma GCC unroll 16
  for (int h = 0; h < 2; ++h) {  // half g: rows 8h + g, 8h + 2 + g, 8h + 4 + g, 8h + 6 + g
    const __m256 x = _mm256_castsi256_ps(o[2 * h]), y = _mm256_castsi256_ps(o[2 * h + 1]);
    w[h] = _mm256_permutevar8x32_epi32(
        _mm256_max_epi32(_mm256_castps_si256(_mm256_shuffle_ps(x, y, 0x88)),
                         _mm256_castps_si256(_mm256_shuffle_ps(x, y, 0xDD))),
        order);
  }
  return {w[0], w[1]};
}
// The bucket is finite here, so min/max are order-independent up to the
// sign of zero, which the caller fixes up.
QC_TI float hmin(VF v) {
  const __m256 m = _mm256_min_ps(v.a, v.b);
  __m128 x = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  x = _mm_min_ps(x, _mm_movehl_ps(x, x));
  x = _mm_min_ps(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}
QC_TI float hmax(VF v) {
  const __m256 m = _mm256_max_ps(v.a, v.b);
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ps(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// The canonical sum's fold: acc[j] += acc[j + w] for w = 8, 4, 2, 1 (lane-wise
// adds in the same order and with the same operands as the scalar loop).
QC_TI float canonical_fold_v(VF acc) {
  const __m256 a8 = _mm256_add_ps(acc.a, acc.b);
  __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  a4 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  a4 = _mm_add_ss(a4, _mm_shuffle_ps(a4, a4, 1));
  return _mm_cvtss_f32(a4);
}

QC_TI __m256i lowbias32_v(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0x846ca68bu)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  return x;
}

QC_TI __m256 uniform8(const RandomStream& s, __m256i lo, __m256i hi) {
  __m256i r = lowbias32_v(_mm256_xor_si256(lo, _mm256_set1_epi32(static_cast<int32_t>(s.k0))));
  r = lowbias32_v(
      _mm256_xor_si256(r, _mm256_xor_si256(hi, _mm256_set1_epi32(static_cast<int32_t>(s.k1)))));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(r, 8)),
                       _mm256_set1_ps(1.0f / 16777216.0f));
}

// random_uniform(s, base + k) in lane k.
QC_TI VF uniform16(const RandomStream& s, uint64_t base) {
  const uint32_t lo0 = static_cast<uint32_t>(base);
  if (lo0 <= 0xffffffffu - 15u) {
    const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(base >> 32)));
    const __m256i l = _mm256_set1_epi32(static_cast<int32_t>(lo0));
    return {uniform8(s, _mm256_add_epi32(l, iota8(0)), hi),
            uniform8(s, _mm256_add_epi32(l, iota8(8)), hi)};
  }
  // The 16 indices straddle a 2^32 boundary.
  alignas(32) uint32_t l[16], h[16];
  for (int k = 0; k < 16; ++k) {
    const uint64_t idx = base + static_cast<uint64_t>(k);
    l[k] = static_cast<uint32_t>(idx);
    h[k] = static_cast<uint32_t>(idx >> 32);
  }
  const __m256i* lv = reinterpret_cast<const __m256i*>(l);
  const __m256i* hv = reinterpret_cast<const __m256i*>(h);
  return {uniform8(s, _mm256_load_si256(lv), _mm256_load_si256(hv)),
          uniform8(s, _mm256_load_si256(lv + 1), _mm256_load_si256(hv + 1))};
}

// 16 dword lanes (each < 256) -> 16 bytes in lane order.
QC_TI __m128i to_bytes(VI c) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(c.a, c.b), 0xd8);
  return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

// Codes (each < 2^Q, in 32-bit lanes) -> 16*Q bits, element k at bits [kQ, kQ+Q).
template <int Q>
QC_TI uint64_t pack_codes(VI c) {
  if constexpr (Q == 1) {
    const int lo = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c.a, 31)));
    const int hi = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c.b, 31)));
    return static_cast<uint64_t>(static_cast<uint32_t>(lo | (hi << 8)));
  } else if constexpr (Q == 2) {
    const __m128i w = _mm_maddubs_epi16(to_bytes(c), _mm_set1_epi16(0x0401));  // c0 | c1 << 2
    const __m128i d = _mm_madd_epi16(w, _mm_set1_epi32(0x00100001));  // .. | c2 << 4 | c3 << 6
    const __m128i b = _mm_shuffle_epi8(
        d, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(b));
  } else {
    const __m128i w = _mm_maddubs_epi16(to_bytes(c), _mm_set1_epi16(0x1001));  // c0 | c1 << 4
    return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(w, w)));
  }
}

template <int Q>
QC_TI VI unpack_codes(uint64_t v) {
  if constexpr (Q == 1) {
    const __m256i w = _mm256_set1_epi32(static_cast<int32_t>(v & 0xffffu));
    const __m256i one = _mm256_set1_epi32(1);
    return {_mm256_and_si256(_mm256_srlv_epi32(w, iota8(0)), one),
            _mm256_and_si256(_mm256_srlv_epi32(w, iota8(8)), one)};
  } else if constexpr (Q == 2) {
    const __m256i w = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(v)));
    const __m256i s = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i three = _mm256_set1_epi32(3);
    return {_mm256_and_si256(_mm256_srlv_epi32(w, s), three),
            _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_add_epi32(s, _mm256_set1_epi32(16))),
                             three)};
  } else {
    const __m256i s = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i f = _mm256_set1_epi32(15);
    const __m256i lo = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(v)));
    const __m256i hi = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(v >> 32)));
    return {_mm256_and_si256(_mm256_srlv_epi32(lo, s), f),
            _mm256_and_si256(_mm256_srlv_epi32(hi, s), f)};
  }
}

// Any q (3, 5, 6, 7): the 8 codes of each half as one 8q-bit word (q*k
// shifts in 64-bit lanes, then an OR reduction), and back.
QC_TI uint64_t pack8_generic(__m256i c, __m256i sh0, __m256i sh1) {
  const __m256i l = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(c)), sh0);
  const __m256i h = _mm256_sllv_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(c, 1)), sh1);
  const __m256i o = _mm256_or_si256(l, h);
  __m128i r = _mm_or_si128(_mm256_castsi256_si128(o), _mm256_extracti128_si256(o, 1));
  r = _mm_or_si128(r, _mm_unpackhi_epi64(r, r));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(r));
}
QC_TI void pack_codes_generic(VI c, int q, uint64_t* lo, uint64_t* hi) {
  const __m256i sh0 = _mm256_mul_epu32(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i sh1 = _mm256_mul_epu32(_mm256_set1_epi64x(q), _mm256_setr_epi64x(4, 5, 6, 7));
  *lo = pack8_generic(c.a, sh0, sh1);
  *hi = pack8_generic(c.b, sh0, sh1);
}
QC_TI __m256i unpack8_generic(uint64_t v, int q) {
  const __m256i sh0 = _mm256_mul_epu32(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i sh1 = _mm256_mul_epu32(_mm256_set1_epi64x(q), _mm256_setr_epi64x(4, 5, 6, 7));
  const __m256i m = _mm256_set1_epi64x(static_cast<long long>((1u << q) - 1u));
  const __m256i w = _mm256_set1_epi64x(static_cast<long long>(v));
  const __m256i a = _mm256_and_si256(_mm256_srlv_epi64(w, sh0), m);  // codes 0..3 (qwords)
  const __m256i b = _mm256_and_si256(_mm256_srlv_epi64(w, sh1), m);  // codes 4..7
  const __m256 ab = _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b),
                                      _MM_SHUFFLE(2, 0, 2, 0));  // a0 a1 b0 b1 | a2 a3 b2 b3
  return _mm256_permute4x64_epi64(_mm256_castps_si256(ab), 0xd8);
}
QC_TI VI unpack_codes_generic(uint64_t lo, uint64_t hi, int q) {
  return {unpack8_generic(lo, q), unpack8_generic(hi, q)};
}

QC_TI void store_bytes8(uint8_t* p, VI c, size_t n) {
  const __m128i b = to_bytes(c);
  if (n >= 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
  } else {
    alignas(16) uint8_t t[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), b);
    std::memcpy(p, t, n);
  }
}
QC_TI VI load_bytes8(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_cvtepu8_epi32(b), _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b))};
}

// Buckets of 16 * kFixedChunks elements (the default 128) are coded from
// registers (16 ymm, some spill to L1) after one read of x and e.
constexpr int kFixedChunks = 8;

// 16-bit inputs of the encoders: 16 values (n < 16: the first n, the rest
// +0) at p (unaligned), widened to float32. F16C quiets a signalling NaN
// where half_to_float keeps its bits; either is a NaN, which makes its bucket
// a NaN bucket, so the encoded bytes are the same.
QC_TI VF load_f16(const uint8_t* p, size_t n) {
  __m128i a, b;
  if (n >= 16) {
    a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  } else {
    alignas(16) uint16_t t[16] = {};
    std::memcpy(t, p, 2 * n);
    a = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
    b = _mm_load_si128(reinterpret_cast<const __m128i*>(t + 8));
  }
  return {_mm256_cvtph_ps(a), _mm256_cvtph_ps(b)};
}
QC_TI VF load_bf16(const uint8_t* p, size_t n) {
  __m128i a, b;
  if (n >= 16) {
    a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  } else {
    alignas(16) uint16_t t[16] = {};
    std::memcpy(t, p, 2 * n);
    a = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
    b = _mm_load_si128(reinterpret_cast<const __m128i*>(t + 8));
  }
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16)),
          _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16))};
}

#include "cpu/simd_codec_impl.h"

// ---- casts ------------------------------------------------------------------------------

QC_T void fp16_encode_v(const float* x, size_t count, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  if (i < count) {
    const size_t n = count - i;
    alignas(16) uint16_t t[8];
    const __m128i h = _mm256_cvtps_ph(_mm256_maskload_ps(x + i, tail_mask(n).a),
                                      _MM_FROUND_TO_NEAREST_INT);
    _mm_store_si128(reinterpret_cast<__m128i*>(t), h);
    std::memcpy(out + 2 * i, t, 2 * n);
  }
}

// Half -> float for 8 halves; signalling NaNs keep their bits as in the
// scalar (the hardware conversion would quiet them).
QC_TI __m256 half8_to_float(__m128i h) {
  __m256 v = _mm256_cvtph_ps(h);
  const __m128i snan = _mm_andnot_si128(
      _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x01ff)), _mm_setzero_si128()),
      _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7e00)), _mm_set1_epi16(0x7c00)));
  if (!_mm_testz_si128(snan, snan)) {
    const __m256i w = _mm256_cvtepu16_epi32(h);
    const __m256i f = _mm256_or_si256(
        _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
        _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                        _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13)));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(f),
                         _mm256_castsi256_ps(_mm256_cvtepi16_epi32(snan)));
  }
  return v;
}

QC_T void fp16_decode_v(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = half8_to_float(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
  if (i < count) {
    const size_t n = count - i;
    const __m256i m = tail_mask(n).a;
    alignas(16) uint16_t t[8] = {};
    std::memcpy(t, in + 2 * i, 2 * n);
    __m256 v = half8_to_float(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(dst + i, m), v);
    _mm256_maskstore_ps(dst + i, m, v);
  }
}

QC_TI __m128i bf16_round(__m256 f) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i hi16 = _mm256_srli_epi32(x, 16);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                       _mm256_and_si256(hi16, _mm256_set1_epi32(1))),
      16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i r =
      _mm256_blendv_epi8(rounded, _mm256_or_si256(hi16, _mm256_set1_epi32(0x40)), nan);
  const __m256i p = _mm256_packus_epi32(r, r);  // values <= 0xffff: exact
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

QC_T void bf16_encode_v(const float* x, size_t count, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), bf16_round(_mm256_loadu_ps(x + i)));
  if (i < count) {
    const size_t n = count - i;
    alignas(16) uint16_t t[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(t),
                    bf16_round(_mm256_maskload_ps(x + i, tail_mask(n).a)));
    std::memcpy(out + 2 * i, t, 2 * n);
  }
}

QC_T void bf16_decode_v(const uint8_t* in, size_t count, float* dst, bool accumulate) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))), 16));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
  if (i < count) {
    const size_t n = count - i;
    const __m256i m = tail_mask(n).a;
    alignas(16) uint16_t t[8] = {};
    std::memcpy(t, in + 2 * i, 2 * n);
    __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(t))), 16));
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(dst + i, m), v);
    _mm256_maskstore_ps(dst + i, m, v);
  }
}

// Lanes d[0..16) in four 4-double registers; the tail and the fold as the
// scalar kernel does them.
QC_T double squared_norm_v(const float* x, size_t count) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    for (int k = 0; k < 4; ++k) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
      acc[k] = _mm256_add_pd(acc[k], _mm256_mul_pd(v, v));
    }
  }
  alignas(32) double d[16];
  for (int k = 0; k < 4; ++k) _mm256_store_pd(d + 4 * k, acc[k]);
  for (size_t j = 0; i < count; ++i, ++j) d[j] += static_cast<double>(x[i]) * x[i];
  for (size_t w = 8; w >= 1; w /= 2) {
    for (size_t j = 0; j < w; ++j) d[j] += d[j + w];
  }
  return d[0];
}

#undef QC_T
#undef QC_TI

const KernelTable kAvx2Table = {
    Isa::kAvx2,     "avx2",         minmax_encode_v, minmax_decode_v, qsgd_encode_v, qsgd_decode_v,
    onebit_encode_v, onebit_decode_v, fp16_encode_v,  fp16_decode_v,   bf16_encode_v, bf16_decode_v,
    squared_norm_v, global_sum_of_squares_v, global_max_abs_v, global_encode_v, global_decode_v,
    block_encode_v, block_decode_v, copy_streaming_v,
};

}  // namespace avx2_impl

const KernelTable* avx2_kernels() { return &avx2_impl::kAvx2Table; }
#else
const KernelTable* avx2_kernels() { return nullptr; }
#endif

}  // namespace cpu
}  // namespace qc
