// Generic SIMD codec kernels over a 16-lane vector abstraction, shared by the
// AVX2 (two 8-lane halves) and AVX-512 (one 16-lane register) tables.
//
// Included by kernels_avx2.cpp / kernels_avx512.cpp inside their own
// namespace, after they define QC_T (the function target attribute) and the
// primitives used below (VF, VI, VM, loadu, load_partial, ...). Every kernel
// follows the arithmetic of kernels_scalar.cpp operation for operation (no
// FMA, same operand order, canonical summation order), so the bytes, the
// metadata and the decoded floats are bit-identical to the scalar reference.
//
// Structure: per bucket, z = x (+ e) is reduced (min/max, sum of squares or
// sum of magnitudes, plus a non-finite check), then quantized 16 lanes at a
// time; the codes go to one continuous little-endian bitstream (buckets need
// not start on a byte boundary) and the residual is written back to e. A
// bucket of 16 * kFixedChunks elements (the default 128) is read once and
// kept in registers; any other size reads its bucket twice (the second time
// from L1), with masked loads/stores for a partial last vector.
// The encoders are templates over the input element type (float, or a 16-bit
// type widened to float32 as it is loaded, see load_x), chosen at run time by
// QuantArgs::input_dtype; a 16-bit input never comes with a residual e.
// Bit widths 1, 2, 4 and 8 have dedicated packers; 3, 5, 6 and 7 pack each
// half-vector as one 8q-bit word.
//
// This file is not a standalone header: no include guard on purpose.

// ---- bitstream writer --------------------------------------------------------

struct BitOut {
  uint8_t* p;
  uint8_t* end;
  uint64_t acc;
  int used;  // < 8 between calls
};

// Appends the low `nbits` (<= 64) bits of v (no bits set above nbits).
QC_TI void bo_put(BitOut& o, uint64_t v, int nbits) {
  if (o.used == 0 && (nbits & 7) == 0) {
    if (o.end - o.p >= 8) {
      std::memcpy(o.p, &v, 8);  // bytes past nbits/8 are zero and rewritten later
    } else {
      for (int k = 0; k < nbits / 8; ++k) o.p[k] = static_cast<uint8_t>(v >> (8 * k));
    }
    o.p += nbits >> 3;
    return;
  }
  const unsigned __int128 a =
      static_cast<unsigned __int128>(o.acc) | (static_cast<unsigned __int128>(v) << o.used);
  const int total = o.used + nbits;
  const int nb = total >> 3;
  if (o.end - o.p >= 16) {
    std::memcpy(o.p, &a, 16);
  } else {
    for (int k = 0; k < nb; ++k) o.p[k] = static_cast<uint8_t>(a >> (8 * k));
  }
  o.p += nb;
  o.acc = static_cast<uint64_t>(a >> (8 * nb));
  o.used = total & 7;
}

QC_TI void bo_zeros(BitOut& o, size_t nbits) {
  while (nbits > 0) {
    const int k = nbits > 64 ? 64 : static_cast<int>(nbits);
    bo_put(o, 0, k);
    nbits -= static_cast<size_t>(k);
  }
}

QC_TI void bo_flush(BitOut& o) {
  if (o.used > 0) *o.p++ = static_cast<uint8_t>(o.acc);
  o.acc = 0;
  o.used = 0;
}

// Appends 16 codes (lanes >= nvalid ignored) of q bits each.
template <int Q>
QC_TI void emit_codes(BitOut& o, VI c, size_t nvalid, int q) {
  if constexpr (Q == 8) {
    // q = 8 keeps the stream byte-aligned (o.used == 0 always).
    store_bytes8(o.p, c, nvalid);
    o.p += nvalid;
  } else if constexpr (Q == 1 || Q == 2 || Q == 4) {
    uint64_t v = pack_codes<Q>(c);
    const int nb = static_cast<int>(nvalid) * Q;
    if (nb < 64) v &= (uint64_t{1} << nb) - 1u;
    bo_put(o, v, nb);
  } else {
    // Codes are already < 2^q (masked by the caller).
    uint64_t w[2];
    pack_codes_generic(c, q, &w[0], &w[1]);
    for (size_t h = 0; h < nvalid; h += 8) {
      const size_t m = nvalid - h < 8 ? nvalid - h : 8;
      const int nb = static_cast<int>(m) * q;  // <= 56
      bo_put(o, w[h / 8] & ((uint64_t{1} << nb) - 1u), nb);
    }
  }
}

// Appends 16 codes of Q bits to a stream at a byte boundary (o.used == 0),
// as 16 Q / 8 whole bytes: the block-scaled encoders' whole blocks.
template <int Q>
QC_TI void emit_whole(BitOut& o, VI c) {
  if constexpr (Q == 4) {
    const uint64_t v = pack_codes<4>(c);
    std::memcpy(o.p, &v, 8);
    o.p += 8;
  } else {
    emit_codes<Q>(o, c, 16, Q);
  }
}

// ---- bitstream reader --------------------------------------------------------

// 64 bits of the stream starting at bit `bitpos` (bits past the end read 0).
QC_TI uint64_t read_bits64(const uint8_t* codes, size_t total, size_t bitpos) {
  const size_t byte = bitpos >> 3;
  const int sh = static_cast<int>(bitpos & 7);
  unsigned __int128 a;
  if (byte + 16 <= total) {
    std::memcpy(&a, codes + byte, 16);
  } else {
    uint8_t buf[16] = {};
    const size_t m = total - byte < 16 ? total - byte : 16;
    for (size_t k = 0; k < m; ++k) buf[k] = codes[byte + k];
    std::memcpy(&a, buf, 16);
  }
  return static_cast<uint64_t>(a >> sh);
}

// Codes of elements idx .. idx+15 (lanes >= nvalid hold garbage).
template <int Q>
QC_TI VI read_codes(const uint8_t* codes, size_t total, size_t idx, size_t nvalid, int q) {
  if constexpr (Q == 8) {
    if (idx + 16 <= total) return load_bytes8(codes + idx);
    uint8_t buf[16] = {};
    for (size_t k = 0; k < nvalid; ++k) buf[k] = codes[idx + k];
    return load_bytes8(buf);
  } else if constexpr (Q == 1 || Q == 2 || Q == 4) {
    return unpack_codes<Q>(read_bits64(codes, total, idx * Q));
  } else {
    // 8 codes = 8q <= 56 bits: one 64-bit read per half.
    const uint64_t lo = read_bits64(codes, total, idx * static_cast<size_t>(q));
    const uint64_t hi = nvalid > 8 ? read_bits64(codes, total, (idx + 8) * static_cast<size_t>(q)) : 0;
    return unpack_codes_generic(lo, hi, q);
  }
}

// ---- helpers -------------------------------------------------------------------

inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}



// ---- input element types ---------------------------------------------------------
// The encoders read x as XT: float, or one of the 16-bit types below, which
// are widened to float32 as they are loaded (exactly; the ISA file supplies
// load_f16 / load_bf16). alignof 1: the caller's buffer may be unaligned.

struct InF16 {
  uint8_t b[2];
};
struct InBF16 {
  uint8_t b[2];
};

QC_TI VF load_x(const float* p) { return loadu(p); }
QC_TI VF load_x(const InF16* p) { return load_f16(p->b, 16); }
QC_TI VF load_x(const InBF16* p) { return load_bf16(p->b, 16); }
// n < 16 valid lanes; the others are +0.
QC_TI VF load_x_partial(const float* p, size_t n) { return load_partial(p, n); }
QC_TI VF load_x_partial(const InF16* p, size_t n) { return load_f16(p->b, n); }
QC_TI VF load_x_partial(const InBF16* p, size_t n) { return load_bf16(p->b, n); }
inline float get_x(const float* p) { return *p; }
inline float get_x(const InF16* p) {
  uint16_t v;
  std::memcpy(&v, p->b, 2);
  return half_to_float(v);
}
inline float get_x(const InBF16* p) {
  uint16_t v;
  std::memcpy(&v, p->b, 2);
  return bfloat16_to_float(v);
}

// z = x (+ e) for 16 lanes starting at i; `n` valid lanes (n < 16: tail, zeros).
template <class XT>
QC_TI VF load_z(const XT* x, const float* e, size_t i, size_t n) {
  if (n >= 16) {
    VF z = load_x(x + i);
    if (e != nullptr) z = add(z, loadu(e + i));
    return z;
  }
  VF z = load_x_partial(x + i, n);
  if (e != nullptr) z = add(z, load_partial(e + i, n));
  return z;
}

QC_TI void store_f(float* p, VF v, size_t n) {
  if (n >= 16) storeu(p, v);
  else store_partial(p, v, n);
}

QC_TI void zero_bucket_e(float* e, size_t n) {
  if (e == nullptr) return;
  for (size_t i = 0; i < n; i += 16) store_f(e + i, zero_f(), n - i);
}

// Residual hygiene (codec_kernels.h): after a bucket's residuals are
// written, zero them unless its gauge is within the limit and none was
// non-finite (`bad_e`: nonfinite_bits of every residual vector, which
// matters only with reused scales). Rare, so it rewrites from L1.
QC_TI void drop_unkeepable_residuals(float* eb, size_t n, float gauge, float limit,
                                     uint32_t bad_e) {
  if (eb == nullptr || (bad_e == 0 && keeps_residuals(gauge, limit))) return;
  zero_bucket_e(eb, n);
}

// The stochastic or nearest rounding of t for global indices base .. base+15.
QC_TI VF round_code(VF t, const QuantArgs& a, uint64_t base) {
  if (!a.stochastic) return round_near(t);
  return round_floor(add(t, uniform16(a.rng, base)));
}

// Scale reuse (codec_kernels.h): bucket b's reused metadata, or nullptr.
inline const uint8_t* reuse_at(const QuantArgs& a, size_t meta_offset) {
  return a.reuse_meta != nullptr ? a.reuse_meta + meta_offset : nullptr;
}
// The scale float at reuse_b + offset, when it may be reused (finite, > 0).
inline bool reused_scale(const uint8_t* reuse_b, size_t offset, float* scale) {
  if (reuse_b == nullptr) return false;
  *scale = get_f32(reuse_b + offset);
  return std::isfinite(*scale) && *scale > 0;
}

// ---- minmax ----------------------------------------------------------------------

// A bucket's minmax_levels (codec_kernels.h) in every lane.
struct VLevels {
  VF lo, scale, f;
};
QC_TI VLevels vlevels(float lo, float scale, float L) {
  const MinmaxLevels m = minmax_levels(lo, scale, L);
  return {set1(m.lo), set1(m.scale), set1(m.f)};
}
// Decoded level j. min_ps returns its second operand when either is NaN, so
// the level goes second and a NaN bucket stays NaN, as in the scalar.
QC_TI VF minmax_level(const VLevels& v, VF j) {
  return vmin_(set1(std::numeric_limits<float>::max()), mul(add(v.lo, mul(j, v.scale)), v.f));
}

struct MinmaxConsts {
  VF vL, vzero;
  VI lmask;
  int q;
  float L;
  float keep_limit;  // residual hygiene: minmax_residual_limit()
};

// Codes of 16 lanes of z (and the residual z - decode, into *res, when
// res != nullptr). Without a residual the float code j is never needed, so
// clamp-then-convert replaces round-clamp-truncate: rounding (rint, or floor
// after adding u) is monotone and maps [0, L] onto itself, so clamping
// before or after it gives the same code, also for the t < 0 or t > L that
// a reused scale produces; a NaN t converts to INT_MIN whose masked (or
// byte-truncated) code is 0, as in the scalar.
QC_TI VI minmax_quant(VF z, VF vlo, VF vinv, const VLevels& levels, const MinmaxConsts& c,
                            const QuantArgs& a, uint64_t base, VF* res) {
  const VF t = mul(sub(z, vlo), vinv);
  if (res != nullptr) {
    const VF j = vmin_(c.vL, vmax_(c.vzero, round_code(t, a, base)));
    *res = sub(z, minmax_level(levels, j));
    return and_i(cvtt(j), c.lmask);
  }
  if (!a.stochastic) return and_i(cvt_near(vmin_(c.vL, vmax_(c.vzero, t))), c.lmask);
  const VF s = add(t, uniform16(a.rng, base));
  return and_i(cvt_floor(vmin_(c.vL, vmax_(c.vzero, s))), c.lmask);
}

QC_TI void minmax_nan_bucket(uint8_t* meta_b, BitOut& o, float* eb, size_t n, int q) {
  put_f32(meta_b, std::numeric_limits<float>::quiet_NaN());
  put_f32(meta_b + 4, std::numeric_limits<float>::quiet_NaN());
  bo_zeros(o, n * static_cast<size_t>(q));
  zero_bucket_e(eb, n);
}

// lo/hi from the lane reductions; +0 and -0 compare equal, and the scalar
// keeps the first zero it meets, so a zero extreme takes that element's sign.
template <class XT>
QC_TI void minmax_extremes(VF vmin, VF vmax, const XT* xb, const float* eb, size_t n,
                                 float* lo_out, float* hi_out) {
  float lo = hmin(vmin), hi = hmax(vmax);
  if (lo == 0.0f || hi == 0.0f) {
    for (size_t k = 0; k < n; ++k) {
      const float zk = eb != nullptr ? get_x(xb + k) + eb[k] : get_x(xb + k);
      if (zk == 0.0f) {
        if (lo == 0.0f) lo = zk;
        if (hi == 0.0f) hi = zk;
        break;
      }
    }
  }
  *lo_out = lo;
  *hi_out = hi;
}

// One full bucket of NC*16 elements held in registers: one read of x and e.
template <int Q, int NC, bool WithE, class XT>
QC_TI void minmax_bucket_fixed(const XT* xb, float* eb, const QuantArgs& a,
                                     uint64_t base, uint8_t* meta_b,
                                     const uint8_t* reuse_b, BitOut& o,
                                     const MinmaxConsts& c) {
  VF z[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    z[k] = load_x(xb + 16 * k);
    if (WithE) z[k] = add(z[k], loadu(eb + 16 * k));
  }
  VF vmin = z[0], vmax = z[0];
  uint32_t bad = nonfinite_bits(z[0]);
#pragma GCC unroll 16
  for (int k = 1; k < NC; ++k) {
    bad |= nonfinite_bits(z[k]);
    vmin = vmin_(z[k], vmin);
    vmax = vmax_(vmax, z[k]);
  }
  if (bad != 0) return minmax_nan_bucket(meta_b, o, WithE ? eb : nullptr, NC * 16, c.q);
  float lo, scale;
  if (reused_scale(reuse_b, 4, &scale) && std::isfinite(get_f32(reuse_b))) {
    lo = get_f32(reuse_b);
  } else {
    float hi;
    minmax_extremes(vmin, vmax, xb, WithE ? eb : nullptr, NC * 16, &lo, &hi);
    scale = (hi - lo) / c.L;
  }
  put_f32(meta_b, lo);
  put_f32(meta_b + 4, scale);
  const float inv = scale >= kMinInvertibleScale ? 1.0f / scale : 0.0f;
  const VF vlo = set1(lo), vinv = set1(inv);
  const VLevels levels = vlevels(lo, scale, c.L);
  uint32_t bad_e = 0;
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    VF r = zero_f();
    const VI code = minmax_quant(z[k], vlo, vinv, levels, c, a, base + 16 * k, WithE ? &r : nullptr);
    emit_codes<Q>(o, code, 16, c.q);
    if (WithE) {
      storeu(eb + 16 * k, r);
      bad_e |= nonfinite_bits(r);
    }
  }
  if (WithE) drop_unkeepable_residuals(eb, NC * 16, scale, c.keep_limit, bad_e);
}

// Any bucket: pass 1 reduces, pass 2 re-reads the bucket (from L1) and codes it.
template <int Q, class XT>
QC_TI void minmax_bucket_any(const XT* xb, float* eb, size_t n, const QuantArgs& a,
                                   uint64_t base, uint8_t* meta_b,
                                   const uint8_t* reuse_b, BitOut& o,
                                   const MinmaxConsts& c) {
  const float z0 = eb != nullptr ? get_x(xb) + eb[0] : get_x(xb);
  VF vmin = set1(z0), vmax = vmin;
  const VF vfirst = vmin;
  uint32_t bad = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const VF z = load_z(xb, eb, i, 16);
    bad |= nonfinite_bits(z);
    vmin = vmin_(z, vmin);
    vmax = vmax_(vmax, z);
  }
  if (i < n) {
    const VF z = select(tail_mask(n - i), load_z(xb, eb, i, n - i), vfirst);
    bad |= nonfinite_bits(z);
    vmin = vmin_(z, vmin);
    vmax = vmax_(vmax, z);
  }
  if (bad != 0) return minmax_nan_bucket(meta_b, o, eb, n, c.q);
  float lo, scale;
  if (reused_scale(reuse_b, 4, &scale) && std::isfinite(get_f32(reuse_b))) {
    lo = get_f32(reuse_b);
  } else {
    float hi;
    minmax_extremes(vmin, vmax, xb, eb, n, &lo, &hi);
    scale = (hi - lo) / c.L;
  }
  put_f32(meta_b, lo);
  put_f32(meta_b + 4, scale);
  const float inv = scale >= kMinInvertibleScale ? 1.0f / scale : 0.0f;
  const VF vlo = set1(lo), vinv = set1(inv);
  const VLevels levels = vlevels(lo, scale, c.L);
  uint32_t bad_e = 0;
  for (i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const VF z = load_z(xb, eb, i, m);
    VF r = zero_f();
    const VI code = minmax_quant(z, vlo, vinv, levels, c, a, base + i, eb != nullptr ? &r : nullptr);
    emit_codes<Q>(o, code, m, c.q);
    if (eb != nullptr) {
      store_f(eb + i, r, m);
      bad_e |= nonfinite_bits(r);  // tail lanes: r of +0 inputs, finite
    }
  }
  drop_unkeepable_residuals(eb, n, scale, c.keep_limit, bad_e);
}

template <int Q, class XT>
QC_T void minmax_encode_q(const XT* x, float* e, size_t count, const QuantArgs& a,
                          uint8_t* meta, uint8_t* codes) {
  MinmaxConsts c;
  c.q = Q != 0 ? Q : a.bits;
  c.L = static_cast<float>((1u << c.q) - 1u);
  c.vL = set1(c.L);
  c.vzero = zero_f();
  c.lmask = set1_i(static_cast<int32_t>((1u << c.q) - 1u));
  c.keep_limit = minmax_residual_limit();
  BitOut o{codes, codes + codes_bytes(count, c.q), 0, 0};
  const size_t bucket = a.bucket;
  size_t b0 = 0, b = 0;
  if (bucket == 16 * kFixedChunks) {
    for (; b0 + bucket <= count; b0 += bucket, ++b) {
      if (e != nullptr)
        minmax_bucket_fixed<Q, kFixedChunks, true>(x + b0, e + b0, a, a.index_base + b0,
                                                   meta + 8 * b, reuse_at(a, 8 * b), o, c);
      else
        minmax_bucket_fixed<Q, kFixedChunks, false>(x + b0, nullptr, a, a.index_base + b0,
                                                    meta + 8 * b, reuse_at(a, 8 * b), o, c);
    }
  }
  for (; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    minmax_bucket_any<Q>(x + b0, e != nullptr ? e + b0 : nullptr, n, a, a.index_base + b0,
                         meta + 8 * b, reuse_at(a, 8 * b), o, c);
  }
  bo_flush(o);
}

template <int Q>
QC_T void minmax_decode_q(const uint8_t* meta, const uint8_t* codes, size_t count, int bits,
                          size_t bucket, float* dst, bool accumulate) {
  const int q = Q != 0 ? Q : bits;
  const size_t total = codes_bytes(count, q);
  const float L = static_cast<float>((1u << q) - 1u);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    const VLevels levels = vlevels(get_f32(meta + 8 * b), get_f32(meta + 8 * b + 4), L);
    float* d = dst + b0;
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const VI c = read_codes<Q>(codes, total, b0 + i, m, q);
      VF v = minmax_level(levels, cvt_i2f(c));
      if (accumulate) v = add(m >= 16 ? loadu(d + i) : load_partial(d + i, m), v);
      store_f(d + i, v, m);
    }
  }
}

// ---- qsgd ---------------------------------------------------------------------------

struct QsgdConsts {
  VF vM, vzero;
  VI mmask, vsign;
  int q;
  float M;
  float keep_limit;  // residual hygiene: qsgd_residual_limit(bucket)
};

// Codes of 16 lanes (residual into *res when res != nullptr); t >= 0, so
// without a residual clamp-then-convert equals round-clamp-truncate.
QC_TI VI qsgd_quant(VF z, VF vinv, VF vstep, const QsgdConsts& c, const QuantArgs& a,
                    uint64_t base, VF* res) {
  const VF t = mul(abs_f(z), vinv);
  const VM neg = lt_zero(z);
  const VI sign = select_i(neg, c.vsign, zero_i());
  if (res != nullptr) {
    const VF level = vmin_(c.vM, vmax_(c.vzero, round_code(t, a, base)));
    *res = sub(z, negate_where(neg, mul(level, vstep)));
    return or_i(and_i(cvtt(level), c.mmask), sign);
  }
  VI level;
  if (!a.stochastic) {
    level = cvt_near(vmin_(c.vM, vmax_(c.vzero, t)));
  } else {
    level = cvt_floor(vmin_(c.vM, vmax_(c.vzero, add(t, uniform16(a.rng, base)))));
  }
  return or_i(and_i(level, c.mmask), sign);
}

QC_TI void scalar_nan_bucket(uint8_t* meta_b, BitOut& o, float* eb, size_t n, int q) {
  put_f32(meta_b, std::numeric_limits<float>::quiet_NaN());
  bo_zeros(o, n * static_cast<size_t>(q));
  zero_bucket_e(eb, n);
}

template <int Q, int NC, bool WithE, class XT>
QC_TI void qsgd_bucket_fixed(const XT* xb, float* eb, const QuantArgs& a, uint64_t base,
                             uint8_t* meta_b, const uint8_t* reuse_b, BitOut& o,
                             const QsgdConsts& c) {
  VF z[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    z[k] = load_x(xb + 16 * k);
    if (WithE) z[k] = add(z[k], loadu(eb + 16 * k));
  }
  VF acc = mul(z[0], z[0]);  // +0 + v == v for v = z*z >= +0
  uint32_t bad = nonfinite_bits(z[0]);
#pragma GCC unroll 16
  for (int k = 1; k < NC; ++k) {
    bad |= nonfinite_bits(z[k]);
    acc = add(acc, mul(z[k], z[k]));
  }
  if (bad != 0) return scalar_nan_bucket(meta_b, o, WithE ? eb : nullptr, NC * 16, c.q);
  float norm;
  if (!reused_scale(reuse_b, 0, &norm)) norm = std::sqrt(canonical_fold_v(acc));
  put_f32(meta_b, norm);
  const float inv = norm > 0 ? c.M / norm : 0.0f;
  const float step = norm / c.M;
  const VF vinv = set1(inv), vstep = set1(step);
  uint32_t bad_e = 0;
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    VF r = zero_f();
    const VI code = qsgd_quant(z[k], vinv, vstep, c, a, base + 16 * k, WithE ? &r : nullptr);
    emit_codes<Q>(o, code, 16, c.q);
    if (WithE) {
      storeu(eb + 16 * k, r);
      bad_e |= nonfinite_bits(r);
    }
  }
  if (WithE) drop_unkeepable_residuals(eb, NC * 16, step, c.keep_limit, bad_e);
}

template <int Q, class XT>
QC_TI void qsgd_bucket_any(const XT* xb, float* eb, size_t n, const QuantArgs& a,
                           uint64_t base, uint8_t* meta_b, const uint8_t* reuse_b, BitOut& o,
                           const QsgdConsts& c) {
  VF acc = zero_f();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const VF z = load_z(xb, eb, i, m);  // tail lanes are +0: z*z = +0 adds nothing
    bad |= nonfinite_bits(z);
    acc = add(acc, mul(z, z));
  }
  if (bad != 0) return scalar_nan_bucket(meta_b, o, eb, n, c.q);
  float norm;
  if (!reused_scale(reuse_b, 0, &norm)) norm = std::sqrt(canonical_fold_v(acc));
  put_f32(meta_b, norm);
  const float inv = norm > 0 ? c.M / norm : 0.0f;
  const float step = norm / c.M;
  const VF vinv = set1(inv), vstep = set1(step);
  uint32_t bad_e = 0;
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const VF z = load_z(xb, eb, i, m);
    VF r = zero_f();
    const VI code = qsgd_quant(z, vinv, vstep, c, a, base + i, eb != nullptr ? &r : nullptr);
    emit_codes<Q>(o, code, m, c.q);
    if (eb != nullptr) {
      store_f(eb + i, r, m);
      bad_e |= nonfinite_bits(r);
    }
  }
  drop_unkeepable_residuals(eb, n, step, c.keep_limit, bad_e);
}

// Sign-magnitude codes of q bits (qsgd, and the global codecs).
QC_TI QsgdConsts qsgd_consts(int q, float keep_limit) {
  QsgdConsts c;
  c.q = q;
  const uint32_t sign_bit = 1u << (q - 1);
  c.M = static_cast<float>(sign_bit - 1u);
  c.vM = set1(c.M);
  c.vzero = zero_f();
  c.mmask = set1_i(static_cast<int32_t>(sign_bit - 1u));
  c.vsign = set1_i(static_cast<int32_t>(sign_bit));
  c.keep_limit = keep_limit;
  return c;
}

template <int Q, class XT>
QC_T void qsgd_encode_q(const XT* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                        uint8_t* codes) {
  const QsgdConsts c = qsgd_consts(Q != 0 ? Q : a.bits, qsgd_residual_limit(a.bucket));
  BitOut o{codes, codes + codes_bytes(count, c.q), 0, 0};
  const size_t bucket = a.bucket;
  size_t b0 = 0, b = 0;
  if (bucket == 16 * kFixedChunks) {
    for (; b0 + bucket <= count; b0 += bucket, ++b) {
      if (e != nullptr)
        qsgd_bucket_fixed<Q, kFixedChunks, true>(x + b0, e + b0, a, a.index_base + b0,
                                                 meta + 4 * b, reuse_at(a, 4 * b), o, c);
      else
        qsgd_bucket_fixed<Q, kFixedChunks, false>(x + b0, nullptr, a, a.index_base + b0,
                                                  meta + 4 * b, reuse_at(a, 4 * b), o, c);
    }
  }
  for (; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    qsgd_bucket_any<Q>(x + b0, e != nullptr ? e + b0 : nullptr, n, a, a.index_base + b0,
                       meta + 4 * b, reuse_at(a, 4 * b), o, c);
  }
  bo_flush(o);
}

template <int Q>
QC_T void qsgd_decode_q(const uint8_t* meta, const uint8_t* codes, size_t count, int bits,
                        size_t bucket, float* dst, bool accumulate) {
  const int q = Q != 0 ? Q : bits;
  const uint32_t sign_bit = 1u << (q - 1);
  const float M = static_cast<float>(sign_bit - 1u);
  const VI mmask = set1_i(static_cast<int32_t>(sign_bit - 1u));
  const VI vsign = set1_i(static_cast<int32_t>(sign_bit));
  const size_t total = codes_bytes(count, q);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    const VF vstep = set1(get_f32(meta + 4 * b) / M);
    float* d = dst + b0;
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const VI c = read_codes<Q>(codes, total, b0 + i, m, q);
      const VF v = mul(cvt_i2f(and_i(c, mmask)), vstep);
      VF s = negate_where(test_i(c, vsign), v);
      if (accumulate) s = add(m >= 16 ? loadu(d + i) : load_partial(d + i, m), s);
      store_f(d + i, s, m);
    }
  }
}

// ---- onebit -------------------------------------------------------------------------

template <int NC, bool WithE, class XT>
QC_TI void onebit_bucket_fixed(const XT* xb, float* eb, uint8_t* meta_b, const uint8_t* reuse_b,
                               BitOut& o, float keep_limit) {
  VF z[NC];
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    z[k] = load_x(xb + 16 * k);
    if (WithE) z[k] = add(z[k], loadu(eb + 16 * k));
  }
  VF acc = abs_f(z[0]);  // +0 + v == v for v = |z| >= +0
  uint32_t bad = nonfinite_bits(z[0]);
#pragma GCC unroll 16
  for (int k = 1; k < NC; ++k) {
    bad |= nonfinite_bits(z[k]);
    acc = add(acc, abs_f(z[k]));
  }
  if (bad != 0) return scalar_nan_bucket(meta_b, o, WithE ? eb : nullptr, NC * 16, 1);
  float scale;
  if (!reused_scale(reuse_b, 0, &scale)) scale = canonical_fold_v(acc) / static_cast<float>(NC * 16);
  put_f32(meta_b, scale);
  const VF vpos = set1(scale), vneg = set1(-scale);
  const VI one = set1_i(1);
  uint32_t bad_e = 0;
#pragma GCC unroll 16
  for (int k = 0; k < NC; ++k) {
    const VM neg = lt_zero(z[k]);
    emit_codes<1>(o, select_i(neg, one, zero_i()), 16, 1);
    if (WithE) {
      const VF r = sub(z[k], select(neg, vneg, vpos));
      storeu(eb + 16 * k, r);
      bad_e |= nonfinite_bits(r);
    }
  }
  if (WithE) drop_unkeepable_residuals(eb, NC * 16, scale, keep_limit, bad_e);
}

template <class XT>
QC_TI void onebit_bucket_any(const XT* xb, float* eb, size_t n, uint8_t* meta_b,
                             const uint8_t* reuse_b, BitOut& o, float keep_limit) {
  const VI one = set1_i(1);
  VF acc = zero_f();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const VF z = load_z(xb, eb, i, m);
    bad |= nonfinite_bits(z);
    acc = add(acc, abs_f(z));
  }
  if (bad != 0) return scalar_nan_bucket(meta_b, o, eb, n, 1);
  float scale;
  if (!reused_scale(reuse_b, 0, &scale)) scale = canonical_fold_v(acc) / static_cast<float>(n);
  put_f32(meta_b, scale);
  const VF vpos = set1(scale), vneg = set1(-scale);
  uint32_t bad_e = 0;
  for (size_t i = 0; i < n; i += 16) {
    const size_t m = n - i < 16 ? n - i : 16;
    const VF z = load_z(xb, eb, i, m);
    const VM neg = lt_zero(z);
    emit_codes<1>(o, select_i(neg, one, zero_i()), m, 1);
    if (eb != nullptr) {
      const VF r = sub(z, select(neg, vneg, vpos));
      store_f(eb + i, r, m);
      bad_e |= nonfinite_bits(r);  // tail lanes: +0 - scale, finite when scale is
    }
  }
  drop_unkeepable_residuals(eb, n, scale, keep_limit, bad_e);
}

template <class XT>
QC_T void onebit_encode_t(const XT* x, float* e, size_t count, const QuantArgs& a,
                          uint8_t* meta, uint8_t* codes) {
  BitOut o{codes, codes + codes_bytes(count, 1), 0, 0};
  const size_t bucket = a.bucket;
  const float keep_limit = onebit_residual_limit(bucket);
  size_t b0 = 0, b = 0;
  if (bucket == 16 * kFixedChunks) {
    for (; b0 + bucket <= count; b0 += bucket, ++b) {
      if (e != nullptr)
        onebit_bucket_fixed<kFixedChunks, true>(x + b0, e + b0, meta + 4 * b, reuse_at(a, 4 * b), o,
                                                keep_limit);
      else
        onebit_bucket_fixed<kFixedChunks, false>(x + b0, nullptr, meta + 4 * b, reuse_at(a, 4 * b),
                                                 o, keep_limit);
    }
  }
  for (; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    onebit_bucket_any(x + b0, e != nullptr ? e + b0 : nullptr, n, meta + 4 * b, reuse_at(a, 4 * b),
                      o, keep_limit);
  }
  bo_flush(o);
}

void onebit_encode_v(const float* x, float* e, size_t count, const QuantArgs& a,
                     uint8_t* meta, uint8_t* codes) {
  switch (a.input_dtype) {
    case QC_DTYPE_FLOAT16:
      return onebit_encode_t(reinterpret_cast<const InF16*>(x), nullptr, count, a, meta, codes);
    case QC_DTYPE_BFLOAT16:
      return onebit_encode_t(reinterpret_cast<const InBF16*>(x), nullptr, count, a, meta, codes);
    default: return onebit_encode_t(x, e, count, a, meta, codes);
  }
}

QC_T void onebit_decode_v(const uint8_t* meta, const uint8_t* codes, size_t count, int,
                          size_t bucket, float* dst, bool accumulate) {
  const size_t total = codes_bytes(count, 1);
  const VI one = set1_i(1);
  for (size_t b0 = 0, b = 0; b0 < count; b0 += bucket, ++b) {
    const size_t n = bucket < count - b0 ? bucket : count - b0;
    const float scale = get_f32(meta + 4 * b);
    const VF vpos = set1(scale), vneg = set1(-scale);
    float* d = dst + b0;
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const VI c = read_codes<1>(codes, total, b0 + i, m, 1);
      VF v = select(test_i(c, one), vneg, vpos);
      if (accumulate) v = add(m >= 16 ? loadu(d + i) : load_partial(d + i, m), v);
      store_f(d + i, v, m);
    }
  }
}

// ---- dispatch on bits ------------------------------------------------------------------

template <class XT>
void minmax_encode_t(const XT* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                     uint8_t* codes) {
  switch (a.bits) {
    case 8: return minmax_encode_q<8>(x, e, count, a, meta, codes);
    case 4: return minmax_encode_q<4>(x, e, count, a, meta, codes);
    case 2: return minmax_encode_q<2>(x, e, count, a, meta, codes);
    case 1: return minmax_encode_q<1>(x, e, count, a, meta, codes);
    default: return minmax_encode_q<0>(x, e, count, a, meta, codes);
  }
}

// x holds a.input_dtype values; a 16-bit input comes without e (codec_kernels.h).
void minmax_encode_v(const float* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                     uint8_t* codes) {
  switch (a.input_dtype) {
    case QC_DTYPE_FLOAT16:
      return minmax_encode_t(reinterpret_cast<const InF16*>(x), nullptr, count, a, meta, codes);
    case QC_DTYPE_BFLOAT16:
      return minmax_encode_t(reinterpret_cast<const InBF16*>(x), nullptr, count, a, meta, codes);
    default: return minmax_encode_t(x, e, count, a, meta, codes);
  }
}

void minmax_decode_v(const uint8_t* meta, const uint8_t* codes, size_t count, int bits,
                     size_t bucket, float* dst, bool accumulate) {
  switch (bits) {
    case 8: return minmax_decode_q<8>(meta, codes, count, bits, bucket, dst, accumulate);
    case 4: return minmax_decode_q<4>(meta, codes, count, bits, bucket, dst, accumulate);
    case 2: return minmax_decode_q<2>(meta, codes, count, bits, bucket, dst, accumulate);
    case 1: return minmax_decode_q<1>(meta, codes, count, bits, bucket, dst, accumulate);
    default: return minmax_decode_q<0>(meta, codes, count, bits, bucket, dst, accumulate);
  }
}

template <class XT>
void qsgd_encode_t(const XT* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                   uint8_t* codes) {
  switch (a.bits) {
    case 8: return qsgd_encode_q<8>(x, e, count, a, meta, codes);
    case 4: return qsgd_encode_q<4>(x, e, count, a, meta, codes);
    case 2: return qsgd_encode_q<2>(x, e, count, a, meta, codes);
    default: return qsgd_encode_q<0>(x, e, count, a, meta, codes);
  }
}

void qsgd_encode_v(const float* x, float* e, size_t count, const QuantArgs& a, uint8_t* meta,
                   uint8_t* codes) {
  switch (a.input_dtype) {
    case QC_DTYPE_FLOAT16:
      return qsgd_encode_t(reinterpret_cast<const InF16*>(x), nullptr, count, a, meta, codes);
    case QC_DTYPE_BFLOAT16:
      return qsgd_encode_t(reinterpret_cast<const InBF16*>(x), nullptr, count, a, meta, codes);
    default: return qsgd_encode_t(x, e, count, a, meta, codes);
  }
}

void qsgd_decode_v(const uint8_t* meta, const uint8_t* codes, size_t count, int bits,
                   size_t bucket, float* dst, bool accumulate) {
  switch (bits) {
    case 8: return qsgd_decode_q<8>(meta, codes, count, bits, bucket, dst, accumulate);
    case 4: return qsgd_decode_q<4>(meta, codes, count, bits, bucket, dst, accumulate);
    case 2: return qsgd_decode_q<2>(meta, codes, count, bits, bucket, dst, accumulate);
    default: return qsgd_decode_q<0>(meta, codes, count, bits, bucket, dst, accumulate);
  }
}

// ---- global codecs (codec_global.h; scalar reference: kernels_global_scalar.cpp) ----
// One message is one bucket of any length, so every pass streams straight
// through memory: the norm pass reads z once, the code pass reads z once
// more and writes the codes (and e). global_linear's arithmetic is qsgd's
// with the message norm (qsgd_quant, qsgd_decode_q with one bucket).

QC_T float global_sum_of_squares_v(const float* t, const float* e, size_t count) {
  VF acc = zero_f();  // lane k is the scalar acc[k]: the same adds in the same order
  size_t i = 0;
  if (e != nullptr) {
    for (; i + 16 <= count; i += 16) {
      const VF z = add(loadu(t + i), loadu(e + i));
      acc = add(acc, mul(z, z));
    }
  } else {
    for (; i + 16 <= count; i += 16) {
      const VF z = loadu(t + i);
      acc = add(acc, mul(z, z));
    }
  }
  if (i < count) {
    const VF z = load_z(t, e, i, count - i);  // tail lanes +0: acc + 0 == acc
    acc = add(acc, mul(z, z));
  }
  return canonical_fold_v(acc);
}

// A max is order independent; a message with a NaN or Inf (rare) is
// answered by the scalar definition, which orders NaN above Inf.
QC_T float global_max_abs_v(const float* t, const float* e, size_t count) {
  VF m = zero_f();
  uint32_t bad = 0;
  for (size_t i = 0; i < count; i += 16) {
    const VF z = load_z(t, e, i, count - i < 16 ? count - i : 16);
    bad |= nonfinite_bits(z);
    m = vmax_(m, abs_f(z));
  }
  if (bad != 0) return global_max_abs_scalar(t, e, count);
  return hmax(m);
}

// global_exp's per-message constants (global_levels.h).
struct ExpConsts {
  VF vnorm;      // norm
  VF value1;     // value(1) = 2^(1 - M), the lowest nonzero level
  VF one;        // value(M)
  VI exp_bits;   // the exponent field of a float
  VI odd_exp;    // its lowest bit
  VI level_off;  // m = exponent field + (M - 127)
  VI value_off;  // value(m) has exponent field m + (127 - M)
  VI vMi;
  VI two_254;    // 254 << 23: bits(2^-k) = two_254 - bits(2^k)
};
QC_TI ExpConsts exp_consts(float norm, int Mi) {
  return {set1(norm),        set1(exp_value(1, Mi)),   set1(1.0f),
          set1_i(0x7f800000), set1_i(1 << 23),          set1_i(Mi - 127),
          set1_i(127 - Mi),  set1_i(Mi),              set1_i(254 << 23)};
}

// value(m) for integer levels m (0..M) in the lanes.
QC_TI VF exp_values(VI m, const ExpConsts& x) {
  return select(test_i(m, m), float_of(shl23_i(add_i(m, x.value_off))), zero_f());
}

// exp_level of 16 lanes, with sign, and the residual when res != nullptr.
// r = |z| / norm (a true division; 0 when norm is 0). For 0 <= r < 1 the
// level below r is lo0 = r with its mantissa cleared, 2^floor(log2 r) (0 for
// a subnormal r); lo0 < value(1) is exactly exp_level's m < 1 case (lo = 0,
// hi = value(1)), else lo = lo0 = value(m), hi = 2 lo0 and m = exponent
// field + M - 127. M - 127 is even for every q, so m is odd iff the
// exponent field of lo is (lo = 0 when m = 0). r >= 1 takes level M.
QC_TI VI exp_quant(VF z, bool norm_positive, const QsgdConsts& c, const ExpConsts& x,
                   const QuantArgs& a, uint64_t base, VF* res) {
  const VF r = norm_positive ? div(abs_f(z), x.vnorm) : zero_f();
  const VF lo0 = float_of(and_i(bits_of(r), x.exp_bits));
  const VM small = lt_f(lo0, x.value1);
  const VF lo = select(small, zero_f(), lo0);
  VM up;
  if (a.stochastic) {
    // p = (r - lo) / (hi - lo) (global_levels.h). hi - lo = 2^k with
    // 1 - M <= k <= -1, so 1 / (hi - lo) = 2^-k is a normal float (exponent
    // field 254 - that of 2^k) and multiplying by it rounds the same real
    // quotient as the division does: the same p, without a second divide.
    const VF gap = vmax_(lo0, x.value1);  // hi - lo: value(1) - 0, or 2 lo0 - lo0
    const VF inv_gap = float_of(sub_i(x.two_254, bits_of(gap)));
    up = lt_f(uniform16(a.rng, base), mul(sub(r, lo), inv_gap));
  } else {
    const VF hi = select(small, x.value1, add(lo0, lo0));
    const VF dlo = sub(r, lo), dhi = sub(hi, r);
    up = or_m(lt_f(dhi, dlo), and_m(eq_f(dhi, dlo), test_i(bits_of(lo), x.odd_exp)));
  }
  VI m = select_i(small, zero_i(), add_i(shr23_i(bits_of(lo0)), x.level_off));
  m = add_i(m, select_i(up, set1_i(1), zero_i()));
  m = select_i(ge_f(r, x.one), x.vMi, m);
  const VM neg = lt_zero(z);
  if (res != nullptr) *res = sub(z, negate_where(neg, mul(x.vnorm, exp_values(m, x))));
  return or_i(m, select_i(neg, c.vsign, zero_i()));
}

template <int Q, bool Exp, bool WithE>
QC_T void global_encode_q(const float* t, float* e, size_t count, const QuantArgs& args,
                          float norm, uint8_t* codes) {
  // A local copy: the code stores (uint8_t) may alias `args`, which would
  // make the compiler reload the rounding mode and random key every vector.
  const QuantArgs a = args;
  const QsgdConsts c = qsgd_consts(Q != 0 ? Q : a.bits, 0.0f);
  const ExpConsts x = exp_consts(norm, static_cast<int>(c.M));
  const bool norm_positive = norm > 0;
  const VF vinv = set1(norm_positive ? c.M / norm : 0.0f), vstep = set1(norm / c.M);
  BitOut o{codes, codes + codes_bytes(count, c.q), 0, 0};
  for (size_t i = 0; i < count; i += 16) {
    const size_t m = count - i < 16 ? count - i : 16;
    const VF z = load_z(t, WithE ? e : nullptr, i, m);
    VF r = zero_f();
    const uint64_t base = a.index_base + i;
    const VI code = Exp ? exp_quant(z, norm_positive, c, x, a, base, WithE ? &r : nullptr)
                        : qsgd_quant(z, vinv, vstep, c, a, base, WithE ? &r : nullptr);
    emit_codes<Q>(o, code, m, c.q);
    if (WithE) store_f(e + i, r, m);
  }
  bo_flush(o);
}

template <int Q>
QC_T void global_exp_decode_q(const uint8_t* codes, size_t count, int bits, float norm,
                              float* dst, bool accumulate) {
  const QsgdConsts c = qsgd_consts(Q != 0 ? Q : bits, 0.0f);
  const ExpConsts x = exp_consts(norm, static_cast<int>(c.M));
  const size_t total = codes_bytes(count, c.q);
  for (size_t i = 0; i < count; i += 16) {
    const size_t m = count - i < 16 ? count - i : 16;
    const VI code = read_codes<Q>(codes, total, i, m, c.q);
    const VF v = mul(x.vnorm, exp_values(and_i(code, c.mmask), x));
    VF s = negate_where(test_i(code, c.vsign), v);
    if (accumulate) s = add(m >= 16 ? loadu(dst + i) : load_partial(dst + i, m), s);
    store_f(dst + i, s, m);
  }
}

template <int Q>
void global_encode_b(const float* t, float* e, size_t count, const QuantArgs& a, bool exponential,
                     float norm, uint8_t* codes) {
  if (exponential) {
    if (e != nullptr) return global_encode_q<Q, true, true>(t, e, count, a, norm, codes);
    return global_encode_q<Q, true, false>(t, e, count, a, norm, codes);
  }
  if (e != nullptr) return global_encode_q<Q, false, true>(t, e, count, a, norm, codes);
  return global_encode_q<Q, false, false>(t, e, count, a, norm, codes);
}

void global_encode_v(const float* t, float* e, size_t count, const QuantArgs& a, bool exponential,
                     float norm, uint8_t* codes) {
  switch (a.bits) {
    case 8: return global_encode_b<8>(t, e, count, a, exponential, norm, codes);
    case 4: return global_encode_b<4>(t, e, count, a, exponential, norm, codes);
    case 2: return global_encode_b<2>(t, e, count, a, exponential, norm, codes);
    default: return global_encode_b<0>(t, e, count, a, exponential, norm, codes);
  }
}

void global_decode_v(const uint8_t* codes, size_t count, int bits, bool exponential, float norm,
                     float* dst, bool accumulate) {
  if (!exponential) {
    uint8_t meta[4];  // the message is one qsgd bucket with the norm as its metadata
    put_f32(meta, norm);
    return qsgd_decode_v(meta, codes, count, bits, count, dst, accumulate);
  }
  switch (bits) {
    case 8: return global_exp_decode_q<8>(codes, count, bits, norm, dst, accumulate);
    case 4: return global_exp_decode_q<4>(codes, count, bits, norm, dst, accumulate);
    case 2: return global_exp_decode_q<2>(codes, count, bits, norm, dst, accumulate);
    default: return global_exp_decode_q<0>(codes, count, bits, norm, dst, accumulate);
  }
}

// ---- block-scaled formats (OCP MX, nvfp4) ------------------------------------------
//
// block_formats.h operation for operation: the element rounding's exponent
// is that of max(|q|, 2^emin) (the same as max(floor(log2 |q|), emin)), the
// integer steps are exact float arithmetic on small integers. The kernels
// are templates over the element format (a reference to one of
// block_formats.h's constants, so that every field folds), nvfp4, the
// rounding and whether there is a residual. A whole block whose largest |z|
// is finite and non-zero takes the fast path, its scale computed inline;
// a zero or non-finite block and a partial last block go through the scalar
// block_scale, the definition.

struct BlockConsts {
  VF two_emin, mant_scale, max_code, largest;
  VI exp_base, sign_bit, ulp_base, emin_bits;
  VF values;  // the 4-bit formats: element_value of the codes 0..15
};

template <const ElementFormat& F>
QC_TI BlockConsts block_consts() {
  BlockConsts c;
  c.two_emin = set1(pow2f(F.emin));
  c.mant_scale = set1(static_cast<float>(1u << F.mbits));
  c.max_code = set1(static_cast<float>(F.max_code));
  c.largest = set1(element_value(F.max_code, F));
  c.exp_base = set1_i(254 + F.mbits);  // 2^(m - e) = float bits (m - ebits + 254) << 23
  c.sign_bit = set1_i(static_cast<int32_t>(1u << (F.bits - 1)));
  c.ulp_base = set1_i(F.mbits);        // 2^(e - m) = float bits (ebits - m) << 23
  c.emin_bits = set1_i(127 + F.emin);
  alignas(64) float v[16] = {};
  if constexpr (F.bits == 4) {
    for (uint32_t code = 0; code < 16; ++code) v[code] = element_value(code, F);
  }
  c.values = loadu(v);
  return c;
}

// The codes of q (finite) and, for the residual, their values (before the
// block's scale): round_element and element_value of block_formats.h.
template <const ElementFormat& F, bool SR>
QC_TI VI block_quant(VF q, const BlockConsts& k, VF u, VF* value) {
  if constexpr (F.integer) {
    VF t = mul(q, set1(64.0f));
    t = vmin_(vmax_(t, set1(-256.0f)), set1(256.0f));
    VF r = SR ? round_floor(add(t, u)) : round_near(t);
    r = vmin_(vmax_(r, set1(-127.0f)), set1(127.0f));
    // + 0 turns a -0 into the +0 that code 0 decodes to (INT8 has no -0)
    *value = mul(add(r, zero_f()), set1(0.015625f));
    return and_i(cvtt(r), set1_i(0xFF));
  } else if constexpr (F.bits == 4 && !SR) {
    // E2M1 nearest-even on the bits of a = |q|. From 1 up (exponent
    // field >= 127) the code is the exponent and the first mantissa bit
    // after rounding the float to one mantissa bit in the integers:
    // (A + 2^21 - 1 + bit 22) >> 22, less 252 for 1.0's 254. Below 1 it is
    // rint(2a), which adding 2^22 3/2 (ulp 1/2) does in the float unit.
    const VI qb = bits_of(q);
    const VI A = and_i(qb, set1_i(0x7fffffff));
    const VI up = add_i(and_i(shr_i<22>(A), set1_i(1)), set1_i(0x1FFFFF - (252 << 22)));
    const VI normal = min_i(shr_i<22>(add_i(A, up)), set1_i(7));
    const VI small = sub_i(bits_of(add(float_of(A), set1(6291456.0f))), set1_i(0x4AC00000));
    const VI c = or_i(select_i(lt_f(float_of(A), set1(1.0f)), small, normal),
                      and_i(shr_i<28>(qb), set1_i(8)));
    *value = lut16(c, k.values);
    return c;
  } else {
    const VF a = abs_f(q);
    const VI ebits = shr23_i(bits_of(vmax_(a, k.two_emin)));  // e + 127, e >= emin
    const VF scaled = mul(a, float_of(shl23_i(sub_i(k.exp_base, ebits))));
    const VF n = SR ? round_floor(add(scaled, u)) : round_near(scaled);
    const VF c_raw = add(mul(cvt_i2f(sub_i(ebits, k.emin_bits)), k.mant_scale), n);
    const VM saturated = lt_f(k.max_code, c_raw);
    const VF c = vmin_(c_raw, k.max_code);
    const VM negative = test_i(bits_of(q), set1_i(static_cast<int32_t>(0x80000000u)));
    const VF magnitude =
        select(saturated, k.largest, mul(n, float_of(shl23_i(sub_i(ebits, k.ulp_base)))));
    *value = negate_where(negative, magnitude);
    const VI ci = cvtt(c);
    return select_i(negative, or_i(ci, k.sign_bit), ci);
  }
}

// element_value of 16 codes, arithmetically (the 8-bit formats).
template <const ElementFormat& F>
QC_TI VF block_values(VI c, const BlockConsts& k) {
  if constexpr (F.integer) {
    VF cf = cvt_i2f(c);
    cf = select(ge_f(cf, set1(128.0f)), sub(cf, set1(256.0f)), cf);  // int8
    return mul(cf, set1(0.015625f));
  } else {
    // A normal magnitude M is the float whose bits are M moved up to the
    // float's mantissa, plus the difference of the biases (127 - (1 - emin))
    // in the exponent field; a subnormal one (exponent field 0) is
    // M 2^(emin - m).
    const VI m = and_i(c, sub_i(k.sign_bit, set1_i(1)));
    const VF cf = cvt_i2f(m);
    const VF normal = float_of(add_i(shl_i<23 - F.mbits>(m), set1_i((126 + F.emin) << 23)));
    const VF subnormal = mul(cf, set1(pow2f(F.emin - F.mbits)));
    VF v = select(lt_f(cf, set1(static_cast<float>(1u << F.mbits))), subnormal, normal);
    if constexpr (F.has_nan) {
      v = select(lt_f(k.max_code, cf), set1(std::numeric_limits<float>::quiet_NaN()), v);
    }
    if constexpr (F.has_inf) {
      v = select(eq_f(cf, set1(124.0f)), set1(std::numeric_limits<float>::infinity()), v);
    }
    return negate_where(test_i(c, k.sign_bit), v);
  }
}

// A block's scale as vectors: MX q = (z f1) f2, decoded = (value d1) d2;
// nvfp4 q = z / f1, decoded = value d1 (f1 = d1 = x).
struct VecScale {
  VF f1, f2, d1, d2;
};
QC_TI VecScale vec_scale(const BlockScale& bs, bool nvfp4) {
  if (nvfp4) return {set1(bs.x), set1(1.0f), set1(bs.x), set1(1.0f)};
  return {set1(bs.enc.first), set1(bs.enc.second), set1(bs.dec.first), set1(bs.dec.second)};
}

// The codes of 16 values z of a block with a non-zero scale, and the
// decoded values.
template <const ElementFormat& F, bool NV, bool SR>
QC_TI VI block_codes(VF z, const VecScale& s, const BlockConsts& k, const BlockArgs& a,
                     uint64_t index, VF* decoded) {
  const VF q = NV ? div(z, s.f1) : mul(mul(z, s.f1), s.f2);
  const VF u = SR ? uniform16(a.rng, index) : zero_f();
  VF value;
  const VI c = block_quant<F, SR>(q, k, u, &value);
  *decoded = NV ? mul(value, s.d1) : mul(mul(value, s.d1), s.d2);
  return c;
}

// Any block (n <= 32 values from b0) through the scalar block_scale: a zero
// or non-finite block, or the last, partial one.
template <const ElementFormat& F, bool NV, bool SR, bool HE>
__attribute__((noinline)) QC_T void block_encode_any(BitOut& o, const float* t, float* e,
                                                     size_t b0, size_t n, float S,
                                                     const BlockConsts& k, const BlockArgs& a,
                                                     uint8_t* scale_byte) {
  VF z[2];
  VF vm = zero_f();
  bool finite = true;
  for (size_t i = 0, v = 0; i < n; i += 16, ++v) {
    z[v] = load_z(t, HE ? e : nullptr, b0 + i, n - i);
    if (nonfinite_bits(z[v]) != 0) finite = false;
    vm = vmax_(vm, abs_f(z[v]));
  }
  const BlockScale bs = block_scale(finite ? hmax(vm) : 0.0f, finite, S, a);
  *scale_byte = bs.byte;
  const VecScale s = vec_scale(bs, NV);
  for (size_t i = 0, v = 0; i < n; i += 16, ++v) {
    const size_t m = n - i < 16 ? n - i : 16;
    VI c = zero_i();
    VF decoded = zero_f();
    if (!bs.zero) c = block_codes<F, NV, SR>(z[v], s, k, a, a.index_base + b0 + i, &decoded);
    emit_codes<F.bits>(o, c, m, F.bits);
    if (HE) store_f(e + b0 + i, finite ? sub(z[v], decoded) : zero_f(), m);
  }
}

// Where nvfp4's first pass parks a chunk's 16 block amax: the 64-byte
// aligned line inside the chunk's 128 code bytes [p, p + 128). A message of
// kStreamParkedBytes or more writes it past the caches (no read of the code
// bytes for ownership; the line would be evicted before the second pass
// anyway); a smaller one, a collective's pipeline piece, keeps it in cache
// for the second pass.
constexpr size_t kStreamParkedBytes = size_t{8} << 20;
QC_TI float* parked_amax(uint8_t* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// max(vm, the largest finite |z| of elements [i0, i1)), lane-wise.
QC_TI VF finite_amax(VF vm, const float* t, const float* e, size_t i0, size_t i1) {
  const VF inf = set1(std::numeric_limits<float>::infinity());
  for (size_t i = i0; i < i1; i += 16) {
    const VF m = abs_f(load_z(t, e, i, i1 - i));
    vm = vmax_(vm, select(lt_f(m, inf), m, zero_f()));
  }
  return vm;
}

// The largest |z| of the nb <= 16 whole blocks from block b, as int32 bits
// (which order like the floats; lanes >= nb 0): one pass and one 16-row
// reduction.
template <size_t B, bool HE>
QC_TI VI chunk_amax_bits(const float* t, const float* e, size_t b, size_t nb) {
  constexpr size_t V = B / 16;
  VI rows[16];
#pragma GCC unroll 16
  for (size_t j = 0; j < 16; ++j) {
    if (j >= nb) {
      rows[j] = zero_i();
      continue;
    }
    VI m = and_i(bits_of(load_z(t, HE ? e : nullptr, (b + j) * B, 16)), set1_i(0x7fffffff));
    for (size_t v = 1; v < V; ++v) {
      m = max_i(m, and_i(bits_of(load_z(t, HE ? e : nullptr, (b + j) * B + 16 * v, 16)),
                         set1_i(0x7fffffff)));
    }
    rows[j] = m;
  }
  return hmax_rows16(rows);
}

// Block j's scale of block_encode_chunk's tables (nvfp4: f1 only).
template <bool NV>
QC_TI VecScale vec_scale_of(const float* f1, const float* f2, const float* d1, const float* d2,
                            size_t j) {
  if (NV) return {set1(f1[j]), set1(1.0f), set1(f1[j]), set1(1.0f)};
  return {set1(f1[j]), set1(f2[j]), set1(d1[j]), set1(d2[j])};
}

// One whole block from b0 whose scale block_encode_chunk computed.
template <const ElementFormat& F, bool NV, bool SR, bool HE>
QC_TI void block_encode_whole(BitOut& o, const float* t, float* e, size_t b0, const VecScale& s,
                              const BlockConsts& k, const BlockArgs& a) {
  constexpr size_t V = (NV ? 16 : 32) / 16;
  for (size_t v = 0; v < V; ++v) {
    const VF z = load_z(t, HE ? e : nullptr, b0 + 16 * v, 16);
    VF decoded;
    const VI c = block_codes<F, NV, SR>(z, s, k, a, a.index_base + b0 + 16 * v, &decoded);
    emit_whole<F.bits>(o, c);
    if (HE) storeu(e + b0 + 16 * v, sub(z, decoded));
  }
}

// nb <= 16 whole blocks from block b: their largest |z| (amax_bits; for
// whole chunks nvfp4's first pass found them, else chunk_amax_bits), their
// scales computed 16 at a time, then each block's codes. A zero or
// non-finite block (nvfp4: one whose scale rounds to zero) goes through
// block_encode_any, which also rewrites its scale byte.
template <const ElementFormat& F, bool NV, bool SR, bool HE>
QC_TI void block_encode_chunk(BitOut& o, const float* t, float* e, size_t b, size_t nb,
                              VI amax_bits, float S, const BlockConsts& k,
                              const BlockConsts& k_scale, const BlockArgs& a, uint8_t* scales) {
  constexpr size_t B = NV ? 16 : 32;
  const size_t c0 = b * B;
  alignas(64) float f1[16], f2[16], d1[16], d2[16];
  if constexpr (NV) {
    // block_scale's e4m3_scale_code((amax / 6) / S) and element_value(code) S
    VF value;
    const VF r = div(div(float_of(amax_bits), set1(6.0f)), set1(S));
    store_bytes8(scales + b, block_quant<kE4M3, false>(r, k_scale, zero_f(), &value), nb);
    store_a(f1, mul(value, set1(S)));
  } else {
    // mx_scale_exponent and pow2_pair
    const VI s = max_i(sub_i(shr23_i(amax_bits), set1_i(127 + F.emax)), set1_i(-127));
    store_bytes8(scales + b, add_i(s, set1_i(127)), nb);
    const VI ns = sub_i(zero_i(), s);
    const VI ea = sra1_i(ns), da = sra1_i(s);
    const VI bias = set1_i(127);
    store_a(f1, float_of(shl23_i(add_i(ea, bias))));
    store_a(f2, float_of(shl23_i(add_i(sub_i(ns, ea), bias))));
    store_a(d1, float_of(shl23_i(add_i(da, bias))));
    store_a(d2, float_of(shl23_i(add_i(sub_i(s, da), bias))));
  }
  // The blocks whose scale is computed above: amax finite and non-zero
  // (nvfp4: and a non-zero x).
  const VF amax_v = float_of(amax_bits);
  uint32_t fast = mask_bits(and_m(lt_f(zero_f(), amax_v),
                                  lt_f(amax_v, set1(std::numeric_limits<float>::infinity()))));
  if constexpr (NV) fast = S > 0.0f ? fast & mask_bits(lt_f(zero_f(), loadu(f1))) : 0;
  // All fast (the common case): a loop without block_encode_any's call,
  // which would make the compiler spill the constants around it.
  if (fast == (1u << nb) - 1) {
    for (size_t j = 0; j < nb; ++j) {
      block_encode_whole<F, NV, SR, HE>(o, t, e, c0 + j * B, vec_scale_of<NV>(f1, f2, d1, d2, j), k, a);
    }
    return;
  }
  for (size_t j = 0; j < nb; ++j) {
    const size_t b0 = c0 + j * B;
    if ((fast >> j & 1u) == 0) {
      block_encode_any<F, NV, SR, HE>(o, t, e, b0, B, S, k, a, scales + b + j);
      continue;
    }
    block_encode_whole<F, NV, SR, HE>(o, t, e, b0, vec_scale_of<NV>(f1, f2, d1, d2, j), k, a);
  }
}

template <const ElementFormat& F, bool NV, bool SR, bool HE>
QC_T void block_encode_f(const float* t, float* e, size_t count, const BlockArgs& a,
                         uint8_t* payload) {
  constexpr int Q = F.bits;
  constexpr size_t B = NV ? 16 : 32;  // the caller checked a.block
  const BlockConsts k = block_consts<F>();
  float* const ez = HE ? e : nullptr;
  uint8_t* p = payload + (NV ? 4 : 0);
  const size_t blocks = count == 0 ? 0 : (count - 1) / B + 1;
  uint8_t* scales = p;
  uint8_t* const codes = p + blocks;
  const size_t chunks = count / (16 * B);  // of 16 whole blocks
  float S = 0.0f;
  if constexpr (NV) {
    // S needs every value first. This pass also finds each chunk's block
    // amax and parks them in the chunk's code bytes (16 x 4 of its 128),
    // which the second pass reads just before it writes the codes there.
    VF vm = zero_f();
    const bool stream = count * sizeof(float) >= kStreamParkedBytes;
    for (size_t ch = 0; ch < chunks; ++ch) {
      static_assert(16 * B * Q / 8 == 128, "a chunk's codes hold an aligned line");
      const VF m = float_of(chunk_amax_bits<B, HE>(t, e, 16 * ch, 16));
      if (stream) {
        stream_a(parked_amax(codes + ch * 128), m);
      } else {
        store_a(parked_amax(codes + ch * 128), m);
      }
      // a block with a NaN or Inf: its finite values, one by one
      vm = mask_bits(lt_f(m, set1(std::numeric_limits<float>::infinity()))) == 0xFFFFu
               ? vmax_(vm, m)
               : finite_amax(vm, t, ez, ch * 16 * B, (ch + 1) * 16 * B);
    }
    if (stream) stream_fence();  // the parked lines before the second pass reads them
    S = hmax(finite_amax(vm, t, ez, chunks * 16 * B, count)) / kNvfp4Range;
    put_f32(payload, S);
  }
  BitOut o{codes, codes + codes_bytes(count, Q), 0, 0};
  size_t b = 0;
  const BlockConsts k_scale = block_consts<kE4M3>();
  for (; b < 16 * chunks; b += 16) {
    const VI amax_bits =
        NV ? bits_of(load_a(parked_amax(o.p))) : chunk_amax_bits<B, HE>(t, e, b, 16);
    block_encode_chunk<F, NV, SR, HE>(o, t, e, b, 16, amax_bits, S, k, k_scale, a, scales);
  }
  const size_t rest = count / B - b;  // whole blocks after the chunks, < 16
  if (rest > 0) {
    block_encode_chunk<F, NV, SR, HE>(o, t, e, b, rest, chunk_amax_bits<B, HE>(t, e, b, rest), S,
                                      k, k_scale, a, scales);
    b += rest;
  }
  if (b * B < count) block_encode_any<F, NV, SR, HE>(o, t, e, b * B, count - b * B, S, k, a, scales + b);
  bo_flush(o);
}

// The values of 16 codes before the block's scale: a table lookup for the
// 4- and 6-bit formats (t0, t1: element_value of the codes 0..31; 6-bit:
// of the magnitudes), arithmetic for the 8-bit ones.
template <const ElementFormat& F>
QC_TI VF block_code_values(VI c, const BlockConsts& k, VF t0, VF t1) {
  if constexpr (F.bits == 4) {
    return lut16(c, t0);
  } else if constexpr (F.bits == 6) {
    return negate_where(test_i(c, k.sign_bit), lut32(c, t0, t1));
  } else {
    return block_values<F>(c, k);
  }
}

template <const ElementFormat& F, bool NV>
QC_T void block_decode_f(const uint8_t* payload, size_t count, const BlockArgs& a, float* dst,
                         bool accumulate) {
  constexpr int Q = F.bits;
  constexpr size_t B = NV ? 16 : 32;
  const BlockConsts k = block_consts<F>();
  alignas(64) float table[32] = {};
  if constexpr (Q <= 6) {
    for (uint32_t c = 0; c < 32 && c < (1u << Q); ++c) table[c] = element_value(c, F);
  }
  const VF t0 = loadu(table), t1 = loadu(table + 16);
  const uint8_t* p = payload;
  float S = 0.0f;
  if constexpr (NV) {
    S = get_f32(p);
    p += 4;
  }
  const size_t blocks = count == 0 ? 0 : (count - 1) / B + 1;
  const uint8_t* codes = p + blocks;
  const size_t total = codes_bytes(count, Q);
  const VF nan = set1(std::numeric_limits<float>::quiet_NaN());
  for (size_t b0 = 0, b = 0; b0 < count; b0 += B, ++b) {
    const size_t n = B < count - b0 ? B : count - b0;
    const BlockDecodeScale ds = block_decode_scale(p[b], S, NV);
    const VF d1 = NV ? set1(ds.x) : set1(ds.dec.first), d2 = set1(ds.dec.second);
    float* d = dst + b0;
    for (size_t i = 0; i < n; i += 16) {
      const size_t m = n - i < 16 ? n - i : 16;
      const VF v = block_code_values<F>(read_codes<Q>(codes, total, b0 + i, m, Q), k, t0, t1);
      VF s = ds.is_nan ? nan : NV ? mul(v, d1) : mul(mul(v, d1), d2);
      if (accumulate) s = add(m >= 16 ? loadu(d + i) : load_partial(d + i, m), s);
      store_f(d + i, s, m);
    }
  }
}

// Which of block_formats.h's constants a's format is (the kernels above are
// instantiated for those); nullptr for anything else, which the scalar
// kernel then encodes.
inline const ElementFormat* block_format_of(const BlockArgs& a) {
  if (a.nvfp4) return a.block == 16 && a.format.bits == 4 ? &kE2M1 : nullptr;
  if (a.block != 32) return nullptr;
  const ElementFormat& f = a.format;
  if (f.integer) return &kInt8;
  const ElementFormat* const fp[] = {&kE4M3, &kE5M2, &kE2M3, &kE3M2, &kE2M1};
  for (const ElementFormat* c : fp) {
    if (c->bits == f.bits && c->mbits == f.mbits) return c;
  }
  return nullptr;
}

template <const ElementFormat& F, bool NV>
void block_encode_nv(const float* t, float* e, size_t count, const BlockArgs& a,
                     uint8_t* payload) {
  if (a.stochastic) {
    if (e != nullptr) return block_encode_f<F, NV, true, true>(t, e, count, a, payload);
    return block_encode_f<F, NV, true, false>(t, e, count, a, payload);
  }
  if (e != nullptr) return block_encode_f<F, NV, false, true>(t, e, count, a, payload);
  return block_encode_f<F, NV, false, false>(t, e, count, a, payload);
}

void block_encode_v(const float* t, float* e, size_t count, const BlockArgs& a,
                    uint8_t* payload) {
  const ElementFormat* f = block_format_of(a);
  if (f == nullptr) return block_encode_scalar(t, e, count, a, payload);
  if (a.nvfp4) return block_encode_nv<kE2M1, true>(t, e, count, a, payload);
  if (f == &kE4M3) return block_encode_nv<kE4M3, false>(t, e, count, a, payload);
  if (f == &kE5M2) return block_encode_nv<kE5M2, false>(t, e, count, a, payload);
  if (f == &kE2M3) return block_encode_nv<kE2M3, false>(t, e, count, a, payload);
  if (f == &kE3M2) return block_encode_nv<kE3M2, false>(t, e, count, a, payload);
  if (f == &kE2M1) return block_encode_nv<kE2M1, false>(t, e, count, a, payload);
  return block_encode_nv<kInt8, false>(t, e, count, a, payload);
}

void block_decode_v(const uint8_t* payload, size_t count, const BlockArgs& a, float* dst,
                    bool accumulate) {
  const ElementFormat* f = block_format_of(a);
  if (f == nullptr) return block_decode_scalar(payload, count, a, dst, accumulate);
  if (a.nvfp4) return block_decode_f<kE2M1, true>(payload, count, a, dst, accumulate);
  if (f == &kE4M3) return block_decode_f<kE4M3, false>(payload, count, a, dst, accumulate);
  if (f == &kE5M2) return block_decode_f<kE5M2, false>(payload, count, a, dst, accumulate);
  if (f == &kE2M3) return block_decode_f<kE2M3, false>(payload, count, a, dst, accumulate);
  if (f == &kE3M2) return block_decode_f<kE3M2, false>(payload, count, a, dst, accumulate);
  if (f == &kE2M1) return block_decode_f<kE2M1, false>(payload, count, a, dst, accumulate);
  return block_decode_f<kInt8, false>(payload, count, a, dst, accumulate);
}

// ---- copy past the caches --------------------------------------------------------

// dst = src, the whole aligned lines of dst streamed past the caches (no read
// for ownership), the ragged ends stored plainly.
QC_T void copy_streaming_v(float* dst, const float* src, size_t count) {
  constexpr size_t kLine = 16;  // floats in one VF, one 64-byte line
  size_t i = 0;
  while (i < count && (reinterpret_cast<uintptr_t>(dst + i) % (kLine * sizeof(float))) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + kLine <= count; i += kLine) stream_a(dst + i, loadu(src + i));
  for (; i < count; ++i) dst[i] = src[i];
  stream_fence();  // visible to the other threads before the call returns
}
