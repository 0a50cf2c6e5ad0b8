// qc-perf: input data, dtype conversion, the exact fp64 reference and the
// error bounds that decide #wrong.
#include "perf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qcperf {

// ---- dtype conversion ------------------------------------------------------

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN (NaN stays quiet NaN)
    return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {
    // Below 2^-14: a half subnormal, m * 2^-24. Scaling by 2^24 is exact and
    // nearbyint rounds half to even in the default rounding mode.
    float a;
    std::memcpy(&a, &ax, 4);
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);  // m == 1024 is the smallest normal
  }
  const uint32_t exp = (ax >> 23) - 127 + 15;
  const uint32_t mant = ax & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may reach inf
  return static_cast<uint16_t>(sign | h);
}

namespace {
float half_to_float_slow(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // exact
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct HalfTable {
  float v[65536];
  HalfTable() {
    for (uint32_t i = 0; i < 65536; ++i) v[i] = half_to_float_slow(static_cast<uint16_t>(i));
  }
};
const HalfTable& half_table() {
  static const HalfTable table;  // thread-safe initialisation
  return table;
}
}  // namespace

float half_to_float(uint16_t h) { return half_table().v[h]; }

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// ---- input data ------------------------------------------------------------

// Rank r's inputs: uniform in [-1, 1), 24 random bits each (exact in float),
// from a splitmix64 stream seeded by the rank. half / bfloat16 inputs are the
// floats rounded to that dtype; the reference reads those rounded values back.
void fill_inputs(WorkerPool& pool, const Options& opt, Op op, Buffers& buf,
                 size_t elems_per_rank) {
  (void)op;
  pool.run([&](int rank) {
    uint64_t state = 0x0123456789abcdefull ^ (0x9e3779b97f4a7c15ull * (uint64_t(rank) + 1));
    void* dst = buf.rank[rank].send;
    for (size_t i = 0; i < elems_per_rank; ++i) {
      const uint64_t bits = next_random(state) >> 40;                    // 24 bits
      const float x = static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
      switch (opt.dtype) {
        case QC_DTYPE_FLOAT32: static_cast<float*>(dst)[i] = x; break;
        case QC_DTYPE_FLOAT16: static_cast<uint16_t*>(dst)[i] = float_to_half(x); break;
        case QC_DTYPE_BFLOAT16: static_cast<uint16_t*>(dst)[i] = float_to_bf16(x); break;
      }
    }
  });
}

// ---- input statistics ------------------------------------------------------

InputStats input_stats(WorkerPool& pool, const Options& opt, Op op, const Buffers& buf,
                       size_t count) {
  const int n = opt.nranks;
  const qc_dtype_t d = opt.dtype;
  const size_t per_rank = send_elems(op, n, count);
  // Elements summed over ranks (Smax); none where outputs are copies.
  const size_t summed = op_reduces(op) ? per_rank : 0;
  const size_t win = std::max<size_t>(1, std::min<size_t>(opt.policy.bucket_size, per_rank));
  struct Part {
    double amax = 0, sq = 0, win = 0, smax = 0;
  };
  std::vector<Part> part(n);
  pool.run([&](int w) {
    Part& p = part[w];
    // A broadcast sends the root's inputs only.
    const bool sent = op != Op::Broadcast || w == kBroadcastRoot;
    const void* x = buf.rank[w].send;
    double run = 0;  // sum of squares over the last `win` elements
    for (size_t i = 0; sent && i < per_rank; ++i) {
      const double v = load_elem(x, d, i);
      p.amax = std::max(p.amax, std::fabs(v));
      p.sq += v * v;
      run += v * v;
      if (i >= win) {
        const double old = load_elem(x, d, i - win);
        run -= old * old;
      }
      p.win = std::max(p.win, run);
    }
    // Rounding in the running sum: a window's sum of squares is at most
    // win * amax^2, so take the smaller of that and the measured value plus
    // a margin for the subtractions.
    p.win = std::min(p.win * (1 + 1e-9) + 1e-12 * p.sq, double(win) * p.amax * p.amax);
    const size_t lo = summed * w / n, hi = summed * (w + 1) / n;
    for (size_t i = lo; i < hi; ++i) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += std::fabs(load_elem(buf.rank[r].send, d, i));
      p.smax = std::max(p.smax, s);
    }
  });
  InputStats st;
  st.count = count;
  st.bucket = static_cast<int>(win);
  double all = 0;
  for (const Part& p : part) {
    st.amax = std::max(st.amax, p.amax);
    st.l2max = std::max(st.l2max, std::sqrt(p.sq));
    st.l2bucket = std::max(st.l2bucket, std::sqrt(p.win));
    st.smax = std::max(st.smax, p.smax);
    all += p.sq;
  }
  st.l2all = std::sqrt(all);
  if (!op_reduces(op)) st.smax = st.amax;
  return st;
}

// ============================================================================
// THE ERROR BOUNDS. Every bound qc-perf checks against is decided here.
// README.md ("How error and #wrong are defined") has the same derivation.
//
// The exact result is computed in fp64 from the inputs as they are stored
// (after rounding to half/bfloat16). Two normalisations:
//   PerElement: err_i = |out_i - exact_i| / max(S_i, floor), S_i = sum_r |x_ri|
//               (alltoall, allgather, broadcast: |x_i| of the value copied).
//               Casts (none, fp16, bf16) and topk.
//   Global:     err_i = |out_i - exact_i| / max(Smax, floor), Smax = max_i S_i.
//               The bucketed and global quantisers, whose error follows a
//               bucket's range or a message's norm, not the value itself.
//   (avg divides exact and S by n; floor: 2^-14 if half is involved, else 2^-126.)
//
// The bound is a worst case, not a statistic: it holds for every rounding
// outcome, stochastic ones included. It is built by following one element
// through the algorithm's encodes (the "chain"):
//
//   A partial sum P of k inputs carries   E = bound on |P - exact partial|,
//                                         D = bound on max |P| (sup norm),
//   with D <= min(k*A, Smax) + E (A = max |x|). An input is {k=1, E=0, D=A}.
//   encode(P) adds the codec's per-encode error e(P) to E; adding two partials
//   adds their E and D plus one float32 rounding u32*(D1+D2).
//
// Per-encode error e (L = 2^q-1 levels for minmax, M = 2^(q-1)-1 for the
// sign-magnitude codecs; c = 1 nearest, 2 stochastic):
//   none       0 for float (exact), u(dtype)*D for half/bfloat16 (sent in the dtype)
//   fp16, bf16 u(wire)*D
//   minmax     c*D/L        (range <= 2D; nearest errs <= range/(2L), stochastic < range/L)
//   qsgd       nearest min(N_b/(2M), D), stochastic N_b/M; N_b = the bucket's L2 norm
//   onebit     D            (|x - sign(x)*scale| <= max(|x|, scale), scale = mean|x| <= D)
//   topk       D if dropped (sent values are exact)
//   global_linear nearest min(N/(2M), D), stochastic N/M; N = the message's L2 norm
//   global_exp nearest min(D, max(D/2, N*2^-M)), stochastic max(D, N*2^(1-M))
//              (levels 2^(m-M): the gap above a value r is <= r; below 2^(1-M) it is 2^(1-M))
//   Each also gets a float32 term 32*u32*max(D, N) (scales, inv, the decode
//   multiply-add) and norms a relative margin (len/16 + n + 8)*u32 for the
//   canonical float32 sum of squares. L2 norms of a partial of k inputs over a
//   window of len elements are bounded by min(sqrt(len)*D, k*W + sqrt(len)*E),
//   W = the largest L2 norm of one rank's inputs over such a window
//   (qsgd: bucket windows; global codecs: the whole buffer).
//   Decoding does not grow D for minmax, onebit, topk (decoded values lie
//   within the encoded ones); for the others D grows by e.
//
// Chains (n ranks):
//   ring   P1 = x; P(k+1) = enc(Pk) + x (k = 1..n-1); out = enc(Pn)   (n encodes)
//   sra    P = x + (n-1) * enc(x); out = enc(P)                        (2 encodes per input)
//   tree   T1 = x; T(2m) = T(m) + enc(T(m)) up to the power of two >= n; out = enc(T)
//   rd     G = min(group_size, n), P = largest power of two with G*P <= n:
//          B = x (+ enc(x) when extra ranks fold in); X = B + (G-1)*enc(B);
//          log2(P) times X = X + enc(X); out = enc(X)
//   native each input encoded once on the shared grid (norm N_all = all-rank
//          norm), codes summed exactly as integers, decoded once:
//          global_linear: nearest min(n*N_all/(2M), Smax), stochastic n*N_all/M
//          global_exp:    nearest min(Smax, Smax/2 + n*N_all*2^-M),
//                         stochastic Smax + n*N_all*2^(1-M)
//   auto   the algorithm the library picks (algorithm.h: 1 rank ring; global_linear,
//          and global_exp with bits <= 5, native; < 64 KiB rd; else sra)
//   reduce_scatter (its result is not encoded again: it stays where it was summed)
//          ring   P1 = x; P(k+1) = enc(Pk) + x (k = 1..n-1); out = Pn     (n-1 encodes)
//          direct P = x + (n-1) * enc(x); out = P                       (1 encode per input)
//          (the schedule: schedule_name(), as the library picks it)
//   topk (ratio < 1) is bounded directly: every partial is a float32 sum of a
//   subset of the inputs (a dropped partial contributes 0), so
//   |out - exact| <= S_i (1 + (n+1) u32): per-element bound 1 + slack.
//   alltoall, allgather, broadcast: one encode of the input (k = 1), codec
//   none an exact copy (bound 0).
//   sparse_allreduce, per row of the table (one scale per row: the codec's
//          bucket is the row). x = a rank's row of that index (its repeated
//          indices added in float32 first: A and W include that rounding and
//          E gets (m-k) u32 S for it; m rows of the index in all, k ranks):
//          allgather  out = sum of k enc(x)                  (1 encode per input)
//          sra        P = sum of k enc(x); out = enc(P)      (the owner's sum
//                     requantized: 2 encodes per input; its own rows enter
//                     exact, which the chain does not count on)
//          auto: sra's chain (the looser; AUTO may pick either). A row no
//          rank has must be exactly 0. Normalised per element (none, fp16,
//          bf16) or by the row's S = max_j sum |x_j| (minmax, qsgd, onebit).
// Then the output: avg's multiply (2*u32*D) and rounding to the dtype (u(dtype)*D).
//
// Error feedback: run_collective resets every error buffer before the last
// (checked) call, so the checked call starts from zero residuals; its encodes
// send z = v + 0 = v and the same bounds apply.
//
// Replica consistency: allreduce, allgather and broadcast outputs must be
// bit-identical on every rank (qc.h promises it); an element where any rank
// differs is wrong whatever its error.
// ============================================================================

namespace {

double unit_roundoff(qc_dtype_t d) {
  switch (d) {
    case QC_DTYPE_FLOAT16: return std::ldexp(1.0, -11);
    case QC_DTYPE_BFLOAT16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

const double kU32 = std::ldexp(1.0, -24);

// One partial sum as the chain sees it.
struct Partial {
  double k = 1;  // inputs in it
  double E = 0;  // bound on |P - exact partial|
  double D = 0;  // bound on max |P|
};

// The block-scaled codecs (docs/wire-format.md, "Block-scaled formats"):
// one element's largest error relative to its block's largest |value| (so
// at most D): half a unit of the top binade, 2^-(m+1) (a whole unit with
// stochastic rounding), or the saturation gap below 2^(emax+1) of the
// scale, 1 - largest/2^(emax+1), whichever is larger. nvfp4: the E4M3 block
// scale is within 2^-4 of amax_b/6, so half a unit of E2M1's top binade (2)
// is at most amax_b (1 + 2^-4)/6 < 0.18 amax_b (stochastic: twice that), plus
// 2^-13 for blocks below E4M3's normal range (amax_b < 3.5e-5 of the
// message's largest, which is at most D).
bool block_scaled(qc_codec_t c) { return c >= QC_CODEC_MXFP8 && c <= QC_CODEC_NVFP4; }

double block_scaled_error(qc_codec_t c, bool stochastic) {
  const double k = stochastic ? 2.0 : 1.0;
  int m = 0;
  double saturation = 0;
  switch (c) {
    case QC_CODEC_MXFP8: m = 3; saturation = 1 - 448.0 / 512; break;
    case QC_CODEC_MXFP8_E5M2: m = 2; saturation = 1 - 57344.0 / 65536; break;
    case QC_CODEC_MXFP6: m = 3; saturation = 1 - 7.5 / 8; break;
    case QC_CODEC_MXFP6_E3M2: m = 2; saturation = 1 - 28.0 / 32; break;
    case QC_CODEC_MXFP4: m = 1; saturation = 1 - 6.0 / 8; break;
    case QC_CODEC_MXINT8: m = 6; saturation = 1 - 127.0 / 128; break;
    case QC_CODEC_NVFP4: return k * 0.18 + std::ldexp(1.0, -13);
    default: return 1;
  }
  return std::max(k * std::ldexp(1.0, -(m + 1)), saturation);
}

struct Chain {
  qc_codec_t codec;
  bool stochastic;
  int bits;
  double ratio;       // topk
  qc_dtype_t dtype;
  int n;
  double A, Smax;     // in the chain's units
  double Wb, Wm;      // per-rank L2 norm over a bucket window / the whole buffer
  double len_b, len_m;
  double norm_margin_b, norm_margin_m;

  Partial input() const { return Partial{1, 0, A}; }

  double cap(const Partial& p) const { return std::min(p.k * A, Smax) + p.E; }

  Partial add(const Partial& a, const Partial& b) const {
    Partial p;
    p.k = a.k + b.k;
    p.E = a.E + b.E + kU32 * (a.D + b.D);
    p.D = a.D + b.D;
    p.D = std::min(p.D, cap(p));
    return p;
  }

  // L2 norm of P over a window of len elements (inputs' part, then errors).
  double l2(const Partial& p, double len, double W) const {
    const double s = std::sqrt(len);
    return std::min(s * p.D, p.k * W + s * p.E);
  }

  Partial encode(const Partial& p) const {
    const double D = p.D;
    const double c = stochastic ? 2.0 : 1.0;
    const double L = std::ldexp(1.0, bits) - 1;
    const double M = std::ldexp(1.0, bits - 1) - 1;
    double e = 0, grow = 1;  // grow: D grows by e (1) or not (0)
    double scale = D;        // what the float32 term is relative to
    switch (codec) {
      case QC_CODEC_NONE:
        e = dtype == QC_DTYPE_FLOAT32 ? 0 : unit_roundoff(dtype) * D;
        scale = 0;
        break;
      case QC_CODEC_FP16: e = std::ldexp(1.0, -11) * D; scale = 0; break;
      case QC_CODEC_BF16: e = std::ldexp(1.0, -8) * D; scale = 0; break;
      case QC_CODEC_MINMAX: e = c * D / L; grow = 0; break;
      case QC_CODEC_QSGD: {
        const double N = l2(p, len_b, Wb) * (1 + norm_margin_b);
        e = stochastic ? N / M : std::min(N / (2 * M), D);
        scale = std::max(D, N);
        break;
      }
      case QC_CODEC_ONEBIT: e = D * (1 + norm_margin_b); grow = 0; break;
      case QC_CODEC_TOPK: e = ratio >= 1 ? 0 : D; grow = 0; scale = 0; break;
      case QC_CODEC_GLOBAL_LINEAR: {
        const double N = l2(p, len_m, Wm) * (1 + norm_margin_m);
        e = stochastic ? N / M : std::min(N / (2 * M), D);
        scale = std::max(D, N);
        break;
      }
      case QC_CODEC_GLOBAL_EXP: {
        const double N = l2(p, len_m, Wm) * (1 + norm_margin_m);
        const double floor_level = N * std::ldexp(1.0, -static_cast<int>(M));
        e = stochastic ? std::max(D, 2 * floor_level) : std::min(D, std::max(D / 2, floor_level));
        scale = std::max(D, N);
        break;
      }
      default:
        if (block_scaled(codec)) e = block_scaled_error(codec, stochastic) * D;
        break;
    }
    e += 32 * kU32 * scale;
    Partial q = p;
    q.E = p.E + e;
    q.D = grow > 0 ? D + e : D * (1 + 64 * kU32);
    q.D = std::min(q.D + 64 * kU32 * D, cap(q) + 64 * kU32 * D);
    return q;
  }
};

// The chain of a reduce-scatter schedule: the float32 result before avg /
// dtype rounding.
Partial reduce_scatter_chain(const Chain& ch, bool ring) {
  Partial p = ch.input();
  if (ring) {
    for (int k = 1; k < ch.n; ++k) p = ch.add(ch.encode(p), ch.input());
    return p;
  }
  const Partial q = ch.encode(ch.input());
  for (int k = 1; k < ch.n; ++k) p = ch.add(p, q);
  return p;
}

// The chain of one allreduce algorithm: the partial that the final encode's
// decode produces (the float32 result before avg / dtype rounding).
Partial run_chain(const Chain& ch, qc_algorithm_t algo, int group_size) {
  const int n = ch.n;
  switch (algo) {
    case QC_ALGO_RING: {
      Partial p = ch.input();
      for (int k = 1; k < n; ++k) p = ch.add(ch.encode(p), ch.input());
      return ch.encode(p);
    }
    case QC_ALGO_SRA: {
      Partial p = ch.input();
      const Partial q = ch.encode(ch.input());
      for (int k = 1; k < n; ++k) p = ch.add(p, q);
      return ch.encode(p);
    }
    case QC_ALGO_TREE: {
      Partial t = ch.input();
      for (int m = 1; m < n; m *= 2) t = ch.add(t, ch.encode(t));
      return ch.encode(t);
    }
    case QC_ALGO_RECURSIVE_DOUBLING:
    default: {
      const int G = std::max(1, std::min(group_size, n));
      int P = 1;
      while (G * P * 2 <= n) P *= 2;
      Partial b = ch.input();
      if (G * P < n) b = ch.add(b, ch.encode(ch.input()));
      Partial x = b;
      const Partial eb = ch.encode(b);
      for (int k = 1; k < G; ++k) x = ch.add(x, eb);
      for (int d = P / 2; d >= 1; d /= 2) x = ch.add(x, ch.encode(x));
      return ch.encode(x);
    }
  }
}

bool per_element(qc_codec_t c, const qc_policy_t& p) {
  return c == QC_CODEC_NONE || c == QC_CODEC_FP16 || c == QC_CODEC_BF16 ||
         (c == QC_CODEC_TOPK && p.topk_ratio < 1.0f);
}

std::string sparse_bound_text(const qc_policy_t& p, bool stochastic) {
  const char* per_encode = nullptr;
  switch (p.codec) {
    case QC_CODEC_NONE: return "per element, float32 additions only";
    case QC_CODEC_FP16: return "per element, 2^-11 per encode + float32 additions";
    case QC_CODEC_BF16: return "per element, 2^-8 per encode + float32 additions";
    case QC_CODEC_MINMAX: per_encode = stochastic ? "2D/(2^q-1)" : "D/(2^q-1)"; break;
    case QC_CODEC_QSGD: per_encode = stochastic ? "N_row/M" : "min(N_row/2M, D)"; break;
    case QC_CODEC_ONEBIT: per_encode = "D"; break;
    default: return "n/a (no per-row form)";
  }
  return std::string(per_encode) + " per encode of a row (sra: the owner's sum once more), "
                                   "normalised by the row's S";
}

}  // namespace

qc_algorithm_t resolve_auto(const qc_policy_t& p, int nranks, size_t message_bytes) {
  if (nranks == 1) return QC_ALGO_RING;
  if (p.codec == QC_CODEC_GLOBAL_LINEAR) return QC_ALGO_NATIVE;
  if (p.codec == QC_CODEC_GLOBAL_EXP && p.bits <= 5) return QC_ALGO_NATIVE;
  if (message_bytes < 64 * 1024) return QC_ALGO_RECURSIVE_DOUBLING;
  return QC_ALGO_SRA;
}

std::string bound_formula(Op op, qc_dtype_t dtype, const qc_policy_t& p) {
  const bool st = qctool::rounds_stochastically(p);
  std::string s = std::string(codec_name(p.codec)) + ": ";
  if (op == Op::SparseAllreduce) return s + sparse_bound_text(p, st);
  switch (p.codec) {
    case QC_CODEC_NONE:
      s += !op_reduces(op) ? "exact copy (0)"
           : dtype == QC_DTYPE_FLOAT32 ? "per element, float32 additions only"
                                       : "per element, u(dtype) per encode + float32 additions";
      break;
    case QC_CODEC_FP16: s += "per element, 2^-11 per encode + float32 additions"; break;
    case QC_CODEC_BF16: s += "per element, 2^-8 per encode + float32 additions"; break;
    case QC_CODEC_MINMAX: s += st ? "2D/(2^q-1) per encode" : "D/(2^q-1) per encode"; break;
    case QC_CODEC_QSGD: s += st ? "N_bucket/M per encode" : "min(N_bucket/2M, D) per encode"; break;
    case QC_CODEC_ONEBIT: s += "D per encode"; break;
    case QC_CODEC_TOPK:
      s += p.topk_ratio < 1.0f ? "per element, 1 + float32 slack (output = sum of a subset)"
                               : "ratio 1: exact encodes, float32 additions";
      break;
    case QC_CODEC_GLOBAL_LINEAR:
      s += st ? "N/M per encode; native n*N_all/M" : "min(N/2M, D) per encode; native min(n*N_all/2M, Smax)";
      break;
    case QC_CODEC_GLOBAL_EXP:
      s += st ? "max(D, N*2^(1-M)) per encode; native Smax + n*N_all*2^(1-M)"
              : "min(D, max(D/2, N*2^-M)) per encode; native min(Smax, Smax/2 + n*N_all*2^-M)";
      break;
    default: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.4g*D per encode (half a unit or saturation)",
                    block_scaled_error(p.codec, st));
      s += buf;
      break;
    }
  }
  if (p.codec != QC_CODEC_NONE && p.codec != QC_CODEC_TOPK && p.codec != QC_CODEC_FP16 &&
      p.codec != QC_CODEC_BF16)
    s += ", normalised by Smax";
  return s;
}

ErrorModel error_model(Op op, int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                       const qc_policy_t& p, const InputStats& st) {
  ErrorModel m;
  const int n = std::max(nranks, 1);
  const double u_dtype = unit_roundoff(dtype);
  const bool half_involved = dtype == QC_DTYPE_FLOAT16 || p.codec == QC_CODEC_FP16;
  m.floor = half_involved ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
  m.text = bound_formula(op, dtype, p);
  const double div = (op_reduces(op) && redop == QC_OP_AVG) ? n : 1.0;
  // The longest message one encode sees: a call's count (alltoall: the
  // rank's whole buffer, an upper bound).
  const size_t per_rank = op == Op::Alltoall ? st.count * n : st.count;

  qc_algorithm_t algo = p.algorithm;
  if (op == Op::Allreduce && algo == QC_ALGO_AUTO)
    algo = resolve_auto(p, n, st.count * dtype_size(dtype));

  if (!op_reduces(op) && p.codec == QC_CODEC_NONE) {
    m.norm = Norm::PerElement;
    m.bound = 0;
    return m;
  }
  if (per_element(p.codec, p)) {
    m.norm = Norm::PerElement;
    if (p.codec == QC_CODEC_TOPK) {
      // Output = float32 sum of a subset of the inputs, then the output rounding.
      m.bound = 1 + (n + 1) * kU32 + 2 * kU32 + u_dtype;
      m.bound *= 1 + 1e-9;
      return m;
    }
  } else {
    m.norm = Norm::Global;
  }

  // Chain units: per element, everything is relative to max(S_i, floor), so
  // A = Smax = 1; globally, absolute values.
  Chain ch;
  ch.codec = p.codec;
  ch.stochastic = qctool::rounds_stochastically(p);
  ch.bits = p.bits;
  ch.ratio = p.topk_ratio;
  ch.dtype = dtype;
  ch.n = n;
  const bool pe = m.norm == Norm::PerElement;
  ch.A = pe ? 1.0 : st.amax;
  ch.Smax = pe ? 1.0 : st.smax;
  ch.Wb = st.l2bucket;
  ch.Wm = st.l2max;
  ch.len_b = std::max(1, st.bucket);
  ch.len_m = std::max<double>(1, double(per_rank));
  ch.norm_margin_b = (ch.len_b / 16 + n + 8) * kU32;
  ch.norm_margin_m = (ch.len_m / 16 + n + 8) * kU32;

  Partial out;
  if (!op_reduces(op)) {
    out = ch.encode(ch.input());
  } else if (op == Op::ReduceScatter) {
    const size_t bytes = st.count * dtype_size(dtype);
    out = reduce_scatter_chain(ch, std::string(schedule_name(op, algo, n, bytes)) == "ring");
  } else if (algo == QC_ALGO_NATIVE &&
             (p.codec == QC_CODEC_GLOBAL_LINEAR || p.codec == QC_CODEC_GLOBAL_EXP)) {
    const double Nall = st.l2all * (1 + (ch.len_m / 16 + n + 8) * kU32);
    const double M = std::ldexp(1.0, p.bits - 1) - 1;
    double E;
    if (p.codec == QC_CODEC_GLOBAL_LINEAR) {
      E = ch.stochastic ? n * Nall / M : std::min(n * Nall / (2 * M), st.smax);
    } else {
      const double lvl = Nall * std::ldexp(1.0, -static_cast<int>(M));
      E = ch.stochastic ? st.smax + 2 * n * lvl : std::min(st.smax, st.smax / 2 + n * lvl);
    }
    // Float32: shared-grid encode (32 u32 per input) and the one decode multiply.
    E += n * 32 * kU32 * std::max(st.amax, Nall) + 4 * kU32 * (st.smax + E);
    out = Partial{double(n), E, st.smax + E};
  } else {
    out = run_chain(ch, algo, p.group_size);
  }
  // Output: avg's multiply by 1/n, then rounding to the dtype (subnormal
  // halves: absolute 2^-25 = u_half * floor).
  double E = out.E + 2 * kU32 * out.D + u_dtype * out.D;
  double den_units;
  if (pe) {
    den_units = 1.0;  // E already relative to max(S_i, floor)
    E += u_dtype;     // output rounding below the floor
  } else {
    E += u_dtype * m.floor * div;
    den_units = std::max(ch.Smax / div, m.floor) * div;
  }
  m.bound = E / den_units * (1 + 1e-9);
  return m;
}

// ---- the sparse allreduce's bound --------------------------------------------

bool sparse_per_element(const qc_policy_t& p) {
  return p.codec == QC_CODEC_NONE || p.codec == QC_CODEC_FP16 || p.codec == QC_CODEC_BF16;
}

double sparse_floor(qc_dtype_t dtype, const qc_policy_t& p) {
  const bool half_involved = dtype == QC_DTYPE_FLOAT16 || p.codec == QC_CODEC_FP16;
  return half_involved ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
}

double sparse_row_bound(int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                        const qc_policy_t& p, size_t row_len, const SparseRowStats& s) {
  if (s.ranks == 0) return 0;  // no rank has the row: it must be exactly 0
  const int n = std::max(nranks, 1);
  const double div = redop == QC_OP_AVG ? n : 1.0;
  const double u_dtype = unit_roundoff(dtype);
  const double floor = sparse_floor(dtype, p);
  const bool pe = sparse_per_element(p);
  Chain ch;
  ch.codec = p.codec;
  ch.stochastic = qctool::rounds_stochastically(p);
  ch.bits = p.bits;
  ch.ratio = 1;
  ch.dtype = QC_DTYPE_FLOAT32;  // rows are widened to float32 before they are encoded
  ch.n = n;
  // Per element everything is relative to S_ij (A = Smax = 1); per row,
  // absolute values, normalised by the row's S at the end.
  const double S = pe ? 1.0 : s.smax;
  ch.A = pe ? 1.0 : s.amax;
  ch.Smax = S;
  ch.Wb = ch.Wm = s.l2;
  ch.len_b = ch.len_m = std::max<double>(1, double(row_len));
  ch.norm_margin_b = ch.norm_margin_m = (ch.len_b / 16 + n + 8) * kU32;
  const Partial q = ch.encode(ch.input());
  Partial out = q;
  for (int k = 1; k < s.ranks; ++k) out = ch.add(out, q);
  if (p.algorithm == QC_ALGO_SRA || p.algorithm == QC_ALGO_AUTO) out = ch.encode(out);
  // Repeated indices added in float32 before anything is encoded.
  double E = out.E + (s.terms - s.ranks) * kU32 * S;
  // Output: avg's multiply, then rounding to the dtype.
  E += 2 * kU32 * out.D + u_dtype * out.D;
  if (pe) return (E + u_dtype) * (1 + 1e-9);
  E += u_dtype * floor * div;
  return E / (std::max(s.smax / div, floor) * div) * (1 + 1e-9);
}

// ---- wire check ----------------------------------------------------------------

uint64_t encoded_bytes(const qc_policy_t& p, qc_dtype_t dtype, size_t k) {
  const uint64_t header = 32;
  const uint64_t nb = k == 0 ? 0 : (k + p.bucket_size - 1) / p.bucket_size;
  auto codes = [&](int bits) { return (uint64_t(k) * bits + 7) / 8; };
  switch (p.codec) {
    case QC_CODEC_NONE: return header + k * dtype_size(dtype);
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: return header + 2 * uint64_t(k);
    case QC_CODEC_MINMAX: return header + 8 * nb + codes(p.bits);
    case QC_CODEC_QSGD: return header + 4 * nb + codes(p.bits);
    case QC_CODEC_ONEBIT: return header + 4 * nb + codes(1);
    case QC_CODEC_GLOBAL_LINEAR:
    case QC_CODEC_GLOBAL_EXP: return header + 4 + codes(p.bits);
    case QC_CODEC_MXFP8:
    case QC_CODEC_MXFP8_E5M2:
    case QC_CODEC_MXINT8: return header + (k + 31) / 32 + codes(8);
    case QC_CODEC_MXFP6:
    case QC_CODEC_MXFP6_E3M2: return header + (k + 31) / 32 + codes(6);
    case QC_CODEC_MXFP4: return header + (k + 31) / 32 + codes(4);
    case QC_CODEC_NVFP4: return header + 4 + (k + 15) / 16 + codes(4);
    case QC_CODEC_TOPK: {
      uint64_t kk = 0;
      if (k > 0) {
        const double c = std::ceil(double(p.topk_ratio) * double(k));
        kk = !(c >= 1.0) ? 1 : (c >= double(k) ? k : static_cast<uint64_t>(c));
      }
      return header + 4 + 8 * kk;
    }
  }
  return header;
}

uint64_t sra_ideal_bytes(const qc_policy_t& p, qc_dtype_t dtype, int n, int r, size_t count) {
  auto block = [&](int j) {
    const size_t base = count / n, extra = count % n;
    return base + (size_t(j) < extra ? 1 : 0);
  };
  uint64_t total = 0;
  for (int j = 0; j < n; ++j)
    if (j != r) total += encoded_bytes(p, dtype, block(j));          // scatter
  total += uint64_t(n - 1) * encoded_bytes(p, dtype, block(r));     // allgather
  return total;
}

uint64_t sra_allowance_bytes(int n, size_t pieces) {
  return uint64_t(n - 1) * pieces * (24 + 24 + 16);
}

namespace {

// QC_PIPELINE_CHUNK in bytes as the library reads it (decimal, optional
// K/M/G suffix); its default when unset or empty.
size_t pipeline_chunk_bytes() {
  const char* text = std::getenv("QC_PIPELINE_CHUNK");
  if (text == nullptr || *text == '\0') return size_t{128} * 1024;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  return static_cast<size_t>(v) << shift;
}

// The codec's piece granule (Codec::chunk_granule): 0 where blocks are never cut.
size_t chunk_granule(const qc_policy_t& p) {
  switch (p.codec) {
    case QC_CODEC_MINMAX:
    case QC_CODEC_QSGD:
    case QC_CODEC_ONEBIT: return static_cast<size_t>(p.bucket_size);
    case QC_CODEC_NONE:
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: return 1;
    // MX blocks are independent (32 values); nvfp4's message scale is not.
    case QC_CODEC_MXFP8:
    case QC_CODEC_MXFP8_E5M2:
    case QC_CODEC_MXFP6:
    case QC_CODEC_MXFP6_E3M2:
    case QC_CODEC_MXFP4:
    case QC_CODEC_MXINT8: return 32;
    default: return 0;
  }
}

size_t largest_block(int n, size_t count) {
  return count / size_t(n) + (count % size_t(n) != 0 ? 1 : 0);
}

}  // namespace

size_t sra_piece_values(const qc_policy_t& p, int n, size_t count) {
  const size_t granule = chunk_granule(p);
  const size_t set = pipeline_chunk_bytes() / sizeof(float);
  if (granule == 0 || set == 0 || n < 2) return 0;
  const size_t fewest = (count / size_t(n) + 1) / 1024 + 1;
  const size_t chunk = (std::max(set, fewest) + granule - 1) / granule * granule;
  return largest_block(n, count) > chunk ? chunk : 0;
}

size_t sra_pieces(const qc_policy_t& p, int n, size_t count) {
  const size_t chunk = sra_piece_values(p, n, count);
  return chunk == 0 ? 1 : (largest_block(n, count) + chunk - 1) / chunk;
}

uint64_t sra_expected_bytes(const qc_policy_t& p, qc_dtype_t dtype, int n, int r, size_t count) {
  const size_t chunk = sra_piece_values(p, n, count);
  if (chunk == 0) return sra_ideal_bytes(p, dtype, n, r, count);
  auto block = [&](int j) {
    const size_t base = count / n, extra = count % n;
    return base + (size_t(j) < extra ? 1 : 0);
  };
  // A block's pieces; empty ones send nothing.
  auto pieces_bytes = [&](size_t k) {
    uint64_t total = 0;
    for (size_t done = 0; done < k; done += chunk) {
      total += encoded_bytes(p, dtype, std::min(chunk, k - done));
    }
    return total;
  };
  uint64_t total = 0;
  for (int j = 0; j < n; ++j)
    if (j != r) total += pieces_bytes(block(j));               // scatter
  total += uint64_t(n - 1) * pieces_bytes(block(r));          // allgather
  return total;
}

// ---- the check ---------------------------------------------------------------

namespace {
struct CheckPart {
  double max_norm = 0;
  double max_err = 0;
  bool nan = false;
  uint64_t wrong = 0;
  uint64_t replica = 0;
};

inline bool same_bits(const void* a, const void* b, size_t i, size_t dsize) {
  return std::memcmp(static_cast<const char*>(a) + i * dsize,
                     static_cast<const char*>(b) + i * dsize, dsize) == 0;
}
}  // namespace

CheckResult check_result(WorkerPool& pool, const Options& opt, const ErrorModel& model,
                         Op op, const Buffers& buf, size_t count, const InputStats& stats) {
  const int n = opt.nranks;
  const qc_dtype_t d = opt.dtype;
  const size_t ds = dtype_size(d);
  const double div = (op_reduces(op) && opt.redop == QC_OP_AVG) ? n : 1.0;
  std::vector<CheckPart> part(n);

  // Global normalisation: Smax (reductions) or max |x| (copies), from input_stats.
  const double global_norm = stats.smax / div;

  const double bound = model.bound;
  const double floor = model.floor;
  const bool global = model.norm == Norm::Global;

  // The exact value of element i of a replicated output and its
  // normaliser's S_i (before div).
  auto replicated_exact = [&](size_t i, double* exact, double* abs_sum) {
    if (op == Op::Allreduce) {
      double sum = 0, a = 0;
      for (int r = 0; r < n; ++r) {
        const double x = load_elem(buf.rank[r].send, d, i);
        sum += x;
        a += std::fabs(x);
      }
      *exact = sum;
      *abs_sum = a;
      return;
    }
    // Allgather: block j of the output is rank j's input; broadcast: the root's.
    const double x = op == Op::Allgather ? load_elem(buf.rank[i / count].send, d, i % count)
                                         : load_elem(buf.rank[kBroadcastRoot].send, d, i);
    *exact = x;
    *abs_sum = std::fabs(x);
  };

  pool.run([&](int w) {
    CheckPart& p = part[w];
    // Error of one output value; max_err covers every value looked at.
    auto error_of = [&](double out, double exact, double norm) {
      const double den = std::max(global ? global_norm : norm, floor);
      const double err = std::fabs(out - exact) / den;
      if (std::isnan(err)) p.nan = true;
      else if (err > p.max_err) p.max_err = err;
      return err;
    };
    // One element: wrong if beyond the bound or if the ranks disagree.
    auto account = [&](double err, bool replica_bad) {
      const bool bad = !(err <= bound);
      if (replica_bad) ++p.replica;
      if (bad || replica_bad) ++p.wrong;
    };
    if (op_replicated(op)) {
      // Worker w checks slice w of the output, on every rank.
      const size_t len = recv_elems(op, n, count);
      const size_t lo = len * w / n, hi = len * (w + 1) / n;
      // Replica consistency: cheap whole-slice compare first.
      bool slice_differs = false;
      for (int r = 1; r < n && !slice_differs; ++r)
        slice_differs = std::memcmp(static_cast<const char*>(buf.rank[r].recv) + lo * ds,
                                    static_cast<const char*>(buf.rank[0].recv) + lo * ds,
                                    (hi - lo) * ds) != 0;
      for (size_t i = lo; i < hi; ++i) {
        double exact = 0, abs_sum = 0;
        replicated_exact(i, &exact, &abs_sum);
        double err = error_of(load_elem(buf.rank[0].recv, d, i), exact / div, abs_sum / div);
        bool replica_bad = false;
        if (slice_differs) {
          // Ranks disagree somewhere in this slice: look at every rank's value.
          for (int r = 1; r < n; ++r) {
            if (same_bits(buf.rank[r].recv, buf.rank[0].recv, i, ds)) continue;
            replica_bad = true;
            const double e = error_of(load_elem(buf.rank[r].recv, d, i), exact / div, abs_sum / div);
            if (!(e <= err)) err = e;
          }
        }
        account(err, replica_bad);
      }
    } else if (!opt.mpi || w == opt.mpi_rank) {
      // Worker w checks rank w's own output (MPI: this process holds only its own).
      const void* dst = buf.rank[w].recv;
      if (op == Op::Alltoall) {
        // Rank w received block j from rank j: recv[w][j*count + k] = send[j][w*count + k].
        for (int j = 0; j < n; ++j) {
          const void* src = buf.rank[j].send;
          for (size_t k = 0; k < count; ++k) {
            const double in = load_elem(src, d, size_t(w) * count + k);
            const double out = load_elem(dst, d, size_t(j) * count + k);
            account(error_of(out, in, std::fabs(in)), false);
          }
        }
      } else {
        // Reduce-scatter: rank w's output is the sum of every rank's block w.
        for (size_t k = 0; k < count; ++k) {
          double sum = 0, abs_sum = 0;
          for (int r = 0; r < n; ++r) {
            const double x = load_elem(buf.rank[r].send, d, size_t(w) * count + k);
            sum += x;
            abs_sum += std::fabs(x);
          }
          account(error_of(load_elem(dst, d, k), sum / div, abs_sum / div), false);
        }
      }
    }
  });

  CheckResult res;
  bool nan = false;
  for (const CheckPart& p : part) {
    nan = nan || p.nan;
    res.max_err = std::max(res.max_err, p.max_err);
    res.wrong += p.wrong;
    res.replica_diff += p.replica;
  }
  if (nan) res.max_err = std::numeric_limits<double>::quiet_NaN();
  if (opt.mpi) mpi_reduce_check(opt, op, buf, count, &res);
  return res;
}

}  // namespace qcperf
