// The global codecs' kernels (cpu/codec_kernels.h: global_sum_of_squares,
// global_max_abs, global_encode, global_decode; codec_global.h defines the
// arithmetic):
//  - the scalar kernels equal the per-element definition of codec_global.h
//    that the codec computed before the kernels existed (the oracle below);
//  - every SIMD table this CPU has (AVX2, AVX-512) equals the scalar one bit
//    for bit: norms, codes, residuals e, decode and decode-accumulate, for
//    bits 2..8, both codecs, both roundings, with and without e, awkward
//    counts, nonzero index bases (one straddling 2^32), and inputs with NaN,
//    Inf, subnormals, zeros, huge values, rounding ties and the exponential
//    grid's level boundaries (subnormal r included);
//  - max-abs's NaN / Inf rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/canonical_sum.h"
#include "cpu/codec_kernels.h"
#include "cpu/global_levels.h"
#include "cpu/random.h"
#include "kernel_test_data.h"

namespace {

using namespace qc_kernel_test;
using qc::cpu::Isa;
using qc::cpu::KernelTable;
using qc::cpu::QuantArgs;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- the oracle: codec_global.h's definition, one element at a time ---------------
// Written from the format comment, not from the kernels: its own bit
// packing and level arithmetic (exp_level is the shared definition of
// global_levels.h, also used by the CUDA kernels).

int top_level(int bits) { return (1 << (bits - 1)) - 1; }

// Element i's magnitude level m (0..M).
uint32_t oracle_level(float z, size_t i, const QuantArgs& a, bool exponential, float norm) {
  const int M = top_level(a.bits);
  if (exponential) {
    const float r = norm > 0 ? std::fabs(z) / norm : 0.0f;
    return qc::cpu::exp_level(r, M, a.stochastic, a.rng, a.index_base + i);
  }
  const float inv = norm > 0 ? static_cast<float>(M) / norm : 0.0f;
  const float t = std::fabs(z) * inv;
  const float u = a.stochastic ? qc::cpu::random_uniform(a.rng, a.index_base + i) : 0.0f;
  const float rounded = a.stochastic ? std::floor(t + u) : std::nearbyint(t);
  return static_cast<uint32_t>(std::min(std::max(rounded, 0.0f), static_cast<float>(M)));
}

// The decoded magnitude of level m.
float oracle_value(uint32_t m, int bits, bool exponential, float norm) {
  const int M = top_level(bits);
  if (exponential) return norm * qc::cpu::exp_value(static_cast<int>(m), M);
  return static_cast<float>(m) * (norm / static_cast<float>(M));
}

void oracle_encode(const float* src, float* e, size_t count, const QuantArgs& a, bool exponential,
                   float norm, uint8_t* codes) {
  std::fill(codes, codes + qc::cpu::codes_bytes(count, a.bits), uint8_t{0});
  for (size_t i = 0; i < count; ++i) {
    const float z = e == nullptr ? src[i] : src[i] + e[i];
    const uint32_t m = oracle_level(z, i, a, exponential, norm);
    const uint32_t code = (z < 0 ? 1u << (a.bits - 1) : 0u) | m;
    for (int k = 0; k < a.bits; ++k) {  // element i owns bits [i*q, (i+1)*q)
      const size_t bit = i * static_cast<size_t>(a.bits) + static_cast<size_t>(k);
      if ((code >> k) & 1u) codes[bit / 8] = static_cast<uint8_t>(codes[bit / 8] | (1u << (bit % 8)));
    }
    if (e == nullptr) continue;
    const float v = oracle_value(m, a.bits, exponential, norm);
    e[i] = z - (z < 0 ? -v : v);
  }
}

void oracle_decode(const uint8_t* codes, size_t count, int bits, bool exponential, float norm,
                   float* dst, bool accumulate) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t code = 0;
    for (int k = 0; k < bits; ++k) {
      const size_t bit = i * static_cast<size_t>(bits) + static_cast<size_t>(k);
      code |= static_cast<uint32_t>((codes[bit / 8] >> (bit % 8)) & 1u) << k;
    }
    const uint32_t sign = 1u << (bits - 1);
    const float v = oracle_value(code & (sign - 1u), bits, exponential, norm);
    const float s = (code & sign) ? -v : v;
    dst[i] = accumulate ? dst[i] + s : s;
  }
}

float oracle_sum_of_squares(const float* t, const float* e, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) {
    const float z = e != nullptr ? t[i] + e[i] : t[i];
    acc[i % 16] = acc[i % 16] + z * z;
  }
  return qc::cpu::canonical_reduce16(acc);
}

// ---- inputs ------------------------------------------------------------------------

// Values on and between the exponential levels of norm 1 for every bits:
// +-2^-k, +-1.5 * 2^-k (nearest-rounding ties), their neighbours, subnormals
// (r subnormal), and values >= 1 (clipped to the top level).
std::vector<float> exp_grid_data() {
  std::vector<float> x;
  for (int k = 0; k <= 149; ++k) {
    const float p = std::ldexp(1.0f, -k);
    for (float v : {p, 1.5f * p, std::nextafter(1.5f * p, 0.0f), std::nextafter(1.5f * p, 2.0f),
                    std::nextafter(p, 0.0f), 1.25f * p}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (float v : {1.0f, 1.5f, 3.0f, 0.0f, -0.0f}) x.push_back(v);
  return x;
}

// Encodable data (every z finite) of a few kinds.
std::vector<std::vector<float>> encode_inputs(size_t n, uint64_t seed) {
  std::vector<std::vector<float>> sets;
  for (Data kind : {Data::kPlain, Data::kSpecial, Data::kTies, Data::kConstant, Data::kHuge}) {
    std::vector<float> x = make_data(n, kind, seed);
    for (float& v : x)
      if (!std::isfinite(v)) v = 0.0f;
    sets.push_back(std::move(x));
  }
  sets.push_back(std::vector<float>(n, 0.0f));
  return sets;
}

// Residuals: small values around the input's scale, a few subnormals.
std::vector<float> residuals(size_t n, uint64_t seed) {
  std::vector<float> e = make_data(n, Data::kPlain, seed ^ 0x5eed);
  for (size_t i = 0; i < n; ++i) {
    e[i] *= 0.01f;
    if (i % 7 == 3) e[i] = bits_f32(static_cast<uint32_t>(i) + 1);
  }
  return e;
}

// The norms an encode sees: the local one, agreed ones that clip (smaller)
// or leave headroom (larger), 0, 1 and tiny ones.
std::vector<float> norms_for(const std::vector<float>& x, const std::vector<float>* e,
                             bool exponential) {
  const float local =
      std::sqrt(qc::cpu::global_sum_of_squares_scalar(x.data(), e ? e->data() : nullptr, x.size()));
  std::vector<float> norms = {0.0f, 1.0f, 1e-30f};
  if (exponential) norms.push_back(1e-40f);  // r overflows to Inf or stays 0
  if (std::isfinite(local)) {
    norms.push_back(local);
    norms.push_back(local * 0.25f);
    if (std::isfinite(local * 3.0f)) norms.push_back(local * 3.0f);
  }
  return norms;
}

struct Encoded {
  std::vector<uint8_t> codes;
  std::vector<float> e;
};

Encoded run_encode(qc::cpu::GlobalEncodeFn fn, const std::vector<float>& x,
                   const std::vector<float>* e0, const QuantArgs& a, bool exponential,
                   float norm) {
  Encoded out;
  // One canary byte past the codes: the kernels write exactly codes_bytes.
  out.codes.assign(qc::cpu::codes_bytes(x.size(), a.bits) + 1, 0xCD);
  if (e0 != nullptr) out.e = *e0;
  fn(x.data(), e0 != nullptr ? out.e.data() : nullptr, x.size(), a, exponential, norm,
     out.codes.data());
  return out;
}

std::string where(const char* isa, bool exponential, int bits, bool stochastic, bool with_e,
                  size_t n, float norm, uint64_t base) {
  return std::string(isa) + (exponential ? " global_exp" : " global_linear") +
         " bits=" + std::to_string(bits) + (stochastic ? " stochastic" : " nearest") +
         (with_e ? " with e" : " no e") + " n=" + std::to_string(n) +
         " norm=" + std::to_string(norm) + " base=" + std::to_string(base);
}

const std::vector<size_t> kCounts = {0, 1, 15, 16, 17, 33, 1000, 4099};
const std::vector<uint64_t> kBases = {0, 12345, (uint64_t{1} << 32) - 7};

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> t;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (const KernelTable* k = qc::cpu::kernels_for(isa)) t.push_back(k);
  return t;
}

// ---- tests -------------------------------------------------------------------------

TEST(GlobalKernels, ScalarReferenceIsThePerElementDefinition) {
  const KernelTable& s = *qc::cpu::scalar_kernels();
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    const std::vector<float> e0 = residuals(n, n + 3);
    for (const std::vector<float>& x : encode_inputs(n, n + 1)) {
      for (bool with_e : {false, true}) {
        const std::vector<float>* e = with_e ? &e0 : nullptr;
        EXPECT_EQ(f32_bits(s.global_sum_of_squares(x.data(), e ? e->data() : nullptr, n)),
                  f32_bits(oracle_sum_of_squares(x.data(), e ? e->data() : nullptr, n)));
        for (bool exponential : {false, true}) {
          for (int bits = 2; bits <= 8; ++bits) {
            for (bool stochastic : {false, true}) {
              for (float norm : norms_for(x, e, exponential)) {
                QuantArgs a;
                a.bits = bits;
                a.stochastic = stochastic;
                a.rng = qc::cpu::make_random_stream(7, 1, 3);
                a.index_base = 12345;
                const std::string ctx =
                    where("scalar", exponential, bits, stochastic, with_e, n, norm, 12345);
                const Encoded got = run_encode(s.global_encode, x, e, a, exponential, norm);
                const Encoded want = run_encode(oracle_encode, x, e, a, exponential, norm);
                ASSERT_TRUE(got.codes == want.codes) << ctx;
                ASSERT_EQ(first_float_diff(got.e, want.e), -1) << ctx;
                std::vector<float> d1(n, 0.5f), d2(n, 0.5f);
                s.global_decode(got.codes.data(), n, bits, exponential, norm, d1.data(), true);
                oracle_decode(got.codes.data(), n, bits, exponential, norm, d2.data(), true);
                ASSERT_EQ(first_float_diff(d1, d2), -1) << ctx;
              }
            }
          }
        }
      }
    }
  }
}

TEST(GlobalKernels, EveryIsaMatchesScalarEncode) {
  const KernelTable& s = *qc::cpu::scalar_kernels();
  const std::vector<const KernelTable*> tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (size_t n : kCounts) {
    const std::vector<float> e0 = residuals(n, n + 5);
    std::vector<std::vector<float>> inputs = encode_inputs(n, n + 2);
    if (n == 1000) inputs.push_back(exp_grid_data());  // its own length
    for (const std::vector<float>& x : inputs) {
      const size_t m = x.size();
      std::vector<float> em(e0);
      em.resize(m, 1e-3f);
      for (bool with_e : {false, true}) {
        const std::vector<float>* e = with_e ? &em : nullptr;
        for (bool exponential : {false, true}) {
          for (int bits = 2; bits <= 8; ++bits) {
            for (bool stochastic : {false, true}) {
              for (float norm : norms_for(x, e, exponential)) {
                for (uint64_t base : kBases) {
                  QuantArgs a;
                  a.bits = bits;
                  a.stochastic = stochastic;
                  a.rng = qc::cpu::make_random_stream(11, 2, 5);
                  a.index_base = base;
                  const Encoded want = run_encode(s.global_encode, x, e, a, exponential, norm);
                  for (const KernelTable* t : tables) {
                    const std::string ctx =
                        where(t->name, exponential, bits, stochastic, with_e, m, norm, base);
                    const Encoded got = run_encode(t->global_encode, x, e, a, exponential, norm);
                    ASSERT_TRUE(got.codes == want.codes) << ctx;
                    ASSERT_EQ(first_float_diff(got.e, want.e), -1) << ctx;
                  }
                  if (!stochastic || base != 0) continue;  // decode: once per code set
                  for (bool accumulate : {false, true}) {
                    std::vector<float> want_d(m, -0.25f);
                    s.global_decode(want.codes.data(), m, bits, exponential, norm, want_d.data(),
                                    accumulate);
                    for (const KernelTable* t : tables) {
                      std::vector<float> got_d(m, -0.25f);
                      t->global_decode(want.codes.data(), m, bits, exponential, norm,
                                       got_d.data(), accumulate);
                      ASSERT_EQ(first_float_diff(got_d, want_d), -1)
                          << where(t->name, exponential, bits, stochastic, with_e, m, norm, base)
                          << (accumulate ? " decode-accumulate" : " decode");
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Every q-bit pattern is a valid code: random bytes, with finite, NaN and
// Inf norms, decode alike on every table.
TEST(GlobalKernels, EveryIsaMatchesScalarDecodeOfAnyCodes) {
  const KernelTable& s = *qc::cpu::scalar_kernels();
  const std::vector<const KernelTable*> tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  Rng rng(99);
  for (size_t n : kCounts) {
    for (int bits = 2; bits <= 8; ++bits) {
      std::vector<uint8_t> codes(qc::cpu::codes_bytes(n, bits));
      for (uint8_t& b : codes) b = static_cast<uint8_t>(rng.next());
      for (bool exponential : {false, true}) {
        for (float norm : {0.0f, 1.0f, 3.5e-39f, 2.0e38f, kNaN, kInf}) {
          for (bool accumulate : {false, true}) {
            std::vector<float> want(n, 1.5f);
            s.global_decode(codes.data(), n, bits, exponential, norm, want.data(), accumulate);
            for (const KernelTable* t : tables) {
              std::vector<float> got(n, 1.5f);
              t->global_decode(codes.data(), n, bits, exponential, norm, got.data(), accumulate);
              ASSERT_EQ(first_float_diff(got, want), -1)
                  << t->name << (exponential ? " exp" : " linear") << " bits=" << bits
                  << " n=" << n << " norm=" << norm << (accumulate ? " accumulate" : "");
            }
          }
        }
      }
    }
  }
}

TEST(GlobalKernels, EveryIsaMatchesScalarNormAndMaxAbs) {
  const std::vector<const KernelTable*> tables = simd_tables();
  const KernelTable& s = *qc::cpu::scalar_kernels();
  for (size_t n : kCounts) {
    const std::vector<float> e0 = residuals(n, n + 9);
    for (Data kind : {Data::kPlain, Data::kSpecial, Data::kHuge, Data::kConstant}) {
      const std::vector<float> x = make_data(n, kind, n + 4);
      for (bool with_e : {false, true}) {
        const float* e = with_e ? e0.data() : nullptr;
        const float want_sum = s.global_sum_of_squares(x.data(), e, n);
        const float want_max = s.global_max_abs(x.data(), e, n);
        EXPECT_EQ(f32_bits(want_sum), f32_bits(oracle_sum_of_squares(x.data(), e, n)));
        for (const KernelTable* t : tables) {
          const float got_sum = t->global_sum_of_squares(x.data(), e, n);
          const float got_max = t->global_max_abs(x.data(), e, n);
          const std::string ctx = std::string(t->name) + " n=" + std::to_string(n) +
                                  " kind=" + std::to_string(static_cast<int>(kind)) +
                                  (with_e ? " with e" : "");
          if (std::isnan(want_sum)) EXPECT_TRUE(std::isnan(got_sum)) << ctx;
          else EXPECT_EQ(f32_bits(got_sum), f32_bits(want_sum)) << ctx;
          if (std::isnan(want_max)) EXPECT_TRUE(std::isnan(got_max)) << ctx;
          else EXPECT_EQ(f32_bits(got_max), f32_bits(want_max)) << ctx;
        }
      }
    }
  }
}

// max-abs's contract (codec_kernels.h), on every table.
TEST(GlobalKernels, MaxAbsRules) {
  std::vector<const KernelTable*> all = simd_tables();
  all.push_back(qc::cpu::scalar_kernels());
  for (const KernelTable* t : all) {
    const auto max_abs = [t](std::vector<float> x, std::vector<float> e = {}) {
      return t->global_max_abs(x.data(), e.empty() ? nullptr : e.data(), x.size());
    };
    SCOPED_TRACE(t->name);
    EXPECT_EQ(f32_bits(max_abs({})), f32_bits(0.0f));
    EXPECT_EQ(f32_bits(max_abs({-0.0f, -0.0f})), f32_bits(0.0f));
    EXPECT_EQ(max_abs({-3.0f, 2.0f}), 3.0f);
    EXPECT_EQ(max_abs({1e-45f}), 1e-45f);
    EXPECT_EQ(max_abs({1.0f, 2.0f, 3.0f}, {0.5f, -4.5f, 0.0f}), 3.0f);  // |z| = 1.5, 2.5, 3
    std::vector<float> long_x(37, 1.0f);
    long_x[35] = -7.0f;
    EXPECT_EQ(max_abs(long_x), 7.0f);
    EXPECT_EQ(max_abs({1.0f, -kInf}), kInf);
    EXPECT_TRUE(std::isnan(max_abs({kInf, kNaN, 1.0f})));
    EXPECT_TRUE(std::isnan(max_abs({kNaN, kInf})));
    EXPECT_TRUE(std::isnan(max_abs({1.0f}, {kNaN})));
    EXPECT_TRUE(std::isnan(max_abs({kInf}, {-kInf})));  // z = Inf - Inf
    EXPECT_EQ(max_abs({3e38f}, {3e38f}), kInf);          // z overflows
    long_x[20] = kNaN;
    EXPECT_TRUE(std::isnan(max_abs(long_x)));
  }
}

}  // namespace
