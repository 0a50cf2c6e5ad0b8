// qc-perf: input data, dtype conversion, the exact fp64 reference and the
// error bounds that decide #wrong.
#include "perf.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

namespace {
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

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
      const uint64_t bits = splitmix64(state) >> 40;                    // 24 bits
      const float x = static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
      switch (opt.dtype) {
        case QC_DTYPE_FLOAT32: static_cast<float*>(dst)[i] = x; break;
        case QC_DTYPE_FLOAT16: static_cast<uint16_t*>(dst)[i] = float_to_half(x); break;
        case QC_DTYPE_BFLOAT16: static_cast<uint16_t*>(dst)[i] = float_to_bf16(x); break;
      }
    }
  });
}

// ============================================================================
// THE ERROR BOUNDS. Every bound qc-perf checks against is decided here.
//
// The exact result is computed in fp64 from the inputs as they are stored
// (after rounding to half/bfloat16). Two normalisations:
//   PerElement: err_i = |out_i - exact_i| / max(S_i, floor), S_i = sum_r |x_{r,i}|
//               (alltoall: S_i = |x_i|). Used for casts (none, fp16, bf16),
//               whose error is relative to each value; dividing by the sum of
//               magnitudes instead of |exact_i| keeps cancellation from
//               inflating it.
//   Global:     err_i = |out_i - exact_i| / max(max_j S_j, floor). Used for
//               bucketed quantisers, whose error is relative to the range of
//               a bucket, not to the value itself.
//   For op avg both exact_i and S are divided by nranks.
//   floor: 2^-14 (half's smallest normal) when half is the dtype or the wire
//   type, else 2^-126: below it rounding errors are absolute, not relative.
//
// "hops" = how often a value may be rounded on its way: allreduce at most
// nranks (ring: n-1 re-encodes of partial sums, plus the final rounding to
// the output dtype / the avg multiply); alltoall once.
//   none, fp16, bf16: bound = 2 * hops * u, u = unit roundoff of the coarsest
//       type involved (float 2^-24, half 2^-11, bfloat16 2^-8); the factor 2
//       is slack. alltoall with codec none must be an exact copy (bound 0).
//   minmax, q bits: one encode errs by at most s/2 (s after stochastic
//       rounding), s = range/(2^q-1) and range <= 2 max_j S_j, so
//       bound = hops * (1 or 2)/(2^q-1) + 2*hops*u(dtype); doubled with error
//       feedback (the previous call's residual is added back).
//   qsgd, global_linear, global_exp, onebit, topk: no bound yet (it comes
//       with the codecs issue); the error is reported and only NaN counts as
//       wrong.
// Replica consistency: allreduce outputs must be bit-identical on every rank;
// an element where any rank differs is wrong whatever its error.
// ============================================================================
ErrorModel error_model(Op op, int nranks, qc_dtype_t dtype, qc_reduce_op_t redop,
                       const qc_policy_t& p) {
  (void)redop;  // avg divides exact and normaliser alike; see check_result
  auto unit_roundoff = [](qc_dtype_t d) {
    switch (d) {
      case QC_DTYPE_FLOAT16: return std::ldexp(1.0, -11);
      case QC_DTYPE_BFLOAT16: return std::ldexp(1.0, -8);
      default: return std::ldexp(1.0, -24);
    }
  };
  ErrorModel m;
  const double hops = op == Op::Allreduce ? std::max(nranks, 1) : 1;
  const double u_dtype = unit_roundoff(dtype);
  const bool half_involved = dtype == QC_DTYPE_FLOAT16 || p.codec == QC_CODEC_FP16;
  m.floor = half_involved ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
  char buf[256];
  switch (p.codec) {
    case QC_CODEC_NONE:
      m.norm = Norm::PerElement;
      if (op == Op::Alltoall) {
        m.bound = 0;
        m.text = "codec none: alltoall must copy exactly";
      } else {
        m.bound = 2 * hops * u_dtype;
        std::snprintf(buf, sizeof buf, "codec none: 2*%g*u(%s), u=2^%d", hops,
                      dtype_name(dtype), static_cast<int>(std::log2(u_dtype)));
        m.text = buf;
      }
      break;
    case QC_CODEC_FP16:
    case QC_CODEC_BF16: {
      const double u_wire = std::ldexp(1.0, p.codec == QC_CODEC_FP16 ? -11 : -8);
      const double u = std::max(u_dtype, u_wire);
      m.norm = Norm::PerElement;
      m.bound = 2 * hops * u;
      std::snprintf(buf, sizeof buf, "cast: 2*%g*u, u=2^%d", hops,
                    static_cast<int>(std::log2(u)));
      m.text = buf;
      break;
    }
    case QC_CODEC_MINMAX: {
      const double levels = std::ldexp(1.0, p.bits) - 1;
      const double per = (p.rounding == QC_ROUND_STOCHASTIC ? 2.0 : 1.0) / levels;
      m.norm = Norm::Global;
      m.bound = hops * per + 2 * hops * u_dtype;
      if (p.error_feedback) m.bound *= 2;
      std::snprintf(buf, sizeof buf, "minmax: %g*%s/(2^%d-1)%s + dtype rounding",
                    hops, p.rounding == QC_ROUND_STOCHASTIC ? "2" : "1", p.bits,
                    p.error_feedback ? " x2 (error feedback)" : "");
      m.text = buf;
      break;
    }
    default:
      m.norm = Norm::Global;
      m.bound = std::numeric_limits<double>::infinity();
      m.text = std::string("codec ") + codec_name(p.codec) +
               ": no bound yet (comes with the codecs issue), only NaN counts as wrong";
      break;
  }
  return m;
}

// ---- the check ---------------------------------------------------------------

namespace {
struct Partial {
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
                         Op op, const Buffers& buf, size_t count) {
  const int n = opt.nranks;
  const qc_dtype_t d = opt.dtype;
  const size_t ds = dtype_size(d);
  const double div = (op == Op::Allreduce && opt.redop == QC_OP_AVG) ? n : 1.0;
  std::vector<Partial> part(n);

  // Pass 1 (Global only): the largest normaliser over the whole result.
  double global_norm = 0;
  if (model.norm == Norm::Global) {
    pool.run([&](int w) {
      double mx = 0;
      if (op == Op::Allreduce) {
        const size_t lo = count * w / n, hi = count * (w + 1) / n;
        for (size_t i = lo; i < hi; ++i) {
          double s = 0;
          for (int r = 0; r < n; ++r) s += std::fabs(load_elem(buf.rank[r].send, d, i));
          mx = std::max(mx, s);
        }
      } else {
        const size_t total = count * n;
        for (size_t i = 0; i < total; ++i)
          mx = std::max(mx, std::fabs(load_elem(buf.rank[w].send, d, i)));
      }
      part[w].max_norm = mx;
    });
    for (const Partial& p : part) global_norm = std::max(global_norm, p.max_norm);
    global_norm /= div;
  }

  const double bound = model.bound;
  const double floor = model.floor;
  const bool global = model.norm == Norm::Global;

  pool.run([&](int w) {
    Partial& p = part[w];
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
    if (op == Op::Allreduce) {
      const size_t lo = count * w / n, hi = count * (w + 1) / n;
      // Replica consistency: cheap whole-slice compare first.
      bool slice_differs = false;
      for (int r = 1; r < n && !slice_differs; ++r)
        slice_differs = std::memcmp(static_cast<const char*>(buf.rank[r].recv) + lo * ds,
                                    static_cast<const char*>(buf.rank[0].recv) + lo * ds,
                                    (hi - lo) * ds) != 0;
      for (size_t i = lo; i < hi; ++i) {
        double sum = 0, abs_sum = 0;
        for (int r = 0; r < n; ++r) {
          const double x = load_elem(buf.rank[r].send, d, i);
          sum += x;
          abs_sum += std::fabs(x);
        }
        double err = error_of(load_elem(buf.rank[0].recv, d, i), sum / div, abs_sum / div);
        bool replica_bad = false;
        if (slice_differs) {
          // Ranks disagree somewhere in this slice: look at every rank's value.
          for (int r = 1; r < n; ++r) {
            if (same_bits(buf.rank[r].recv, buf.rank[0].recv, i, ds)) continue;
            replica_bad = true;
            const double e = error_of(load_elem(buf.rank[r].recv, d, i), sum / div, abs_sum / div);
            if (!(e <= err)) err = e;
          }
        }
        account(err, replica_bad);
      }
    } else {
      // Rank w received block j from rank j: recv[w][j*count + k] = send[j][w*count + k].
      for (int j = 0; j < n; ++j) {
        const void* src = buf.rank[j].send;
        const void* dst = buf.rank[w].recv;
        for (size_t k = 0; k < count; ++k) {
          const double in = load_elem(src, d, size_t(w) * count + k);
          const double out = load_elem(dst, d, size_t(j) * count + k);
          account(error_of(out, in, std::fabs(in)), false);
        }
      }
    }
  });

  CheckResult res;
  bool nan = false;
  for (const Partial& p : part) {
    nan = nan || p.nan;
    res.max_err = std::max(res.max_err, p.max_err);
    res.wrong += p.wrong;
    res.replica_diff += p.replica;
  }
  if (nan) res.max_err = std::numeric_limits<double>::quiet_NaN();
  return res;
}

}  // namespace qcperf
