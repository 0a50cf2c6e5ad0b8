// Quantized collectives with every codec and algorithm, and error feedback
// (issue 4's promises): replicas bit-identical, emulation equals threads,
// exact EC bookkeeping, the 1/T decay of the mean's error with EC, unbiased
// stochastic codecs through the whole collective, the minmax per-hop bound
// (docs/fidelity.md), native's exact integer sums, error-buffer binding.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using namespace qct;
using Matrix = std::vector<std::vector<float>>;

struct CodecCase {
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  const char* name;
};

const CodecCase kNone{QC_CODEC_NONE, 4, QC_ROUND_NEAREST_EVEN, "None"};
const CodecCase kFp16{QC_CODEC_FP16, 4, QC_ROUND_NEAREST_EVEN, "Fp16"};
const CodecCase kBf16{QC_CODEC_BF16, 4, QC_ROUND_NEAREST_EVEN, "Bf16"};
const CodecCase kMinMax8{QC_CODEC_MINMAX, 8, QC_ROUND_NEAREST_EVEN, "MinMax8"};
const CodecCase kMinMax2{QC_CODEC_MINMAX, 2, QC_ROUND_NEAREST_EVEN, "MinMax2"};
const CodecCase kMinMax2Sr{QC_CODEC_MINMAX, 2, QC_ROUND_STOCHASTIC, "MinMax2Sr"};
const CodecCase kQsgd4Sr{QC_CODEC_QSGD, 4, QC_ROUND_STOCHASTIC, "Qsgd4Sr"};
const CodecCase kGlin4{QC_CODEC_GLOBAL_LINEAR, 4, QC_ROUND_NEAREST_EVEN, "GlobalLinear4"};
const CodecCase kGlin4Sr{QC_CODEC_GLOBAL_LINEAR, 4, QC_ROUND_STOCHASTIC, "GlobalLinear4Sr"};
const CodecCase kGexp4Sr{QC_CODEC_GLOBAL_EXP, 4, QC_ROUND_STOCHASTIC, "GlobalExp4Sr"};
const CodecCase kGexp8{QC_CODEC_GLOBAL_EXP, 8, QC_ROUND_NEAREST_EVEN, "GlobalExp8"};
const CodecCase kOneBit{QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, "OneBit"};
const CodecCase kTopK{QC_CODEC_TOPK, 4, QC_ROUND_NEAREST_EVEN, "TopK"};
const CodecCase kMxfp8{QC_CODEC_MXFP8, 4, QC_ROUND_NEAREST_EVEN, "Mxfp8"};
const CodecCase kMxfp4Sr{QC_CODEC_MXFP4, 4, QC_ROUND_STOCHASTIC, "Mxfp4Sr"};
const CodecCase kNvfp4{QC_CODEC_NVFP4, 4, QC_ROUND_NEAREST_EVEN, "Nvfp4"};

bool is_global(qc_codec_t c) { return c == QC_CODEC_GLOBAL_LINEAR || c == QC_CODEC_GLOBAL_EXP; }

qc_policy_t policy_for(const CodecCase& cc, qc_algorithm_t algo, bool ef) {
  qc_policy_t p = make_policy(algo);
  p.codec = cc.codec;
  p.bits = cc.bits;
  p.rounding = cc.rounding;
  p.seed = 777;
  p.topk_ratio = 0.25f;
  p.error_feedback = ef ? 1 : 0;
  return p;
}

std::vector<float> as_floats(const Bytes& b) { return decode(b, QC_DTYPE_FLOAT32); }

// n emulation error buffers, destroyed with the object.
struct Buffers {
  std::vector<qc_error_buffer_t> eb;
  Buffers(int n, size_t count, qc_comm_t const* comms = nullptr)
      : eb(static_cast<size_t>(n), nullptr) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(qc_error_buffer_create(comms ? comms[r] : nullptr, count, &eb[r]), QC_SUCCESS)
          << qc_last_error();
    }
  }
  ~Buffers() {
    for (auto b : eb) qc_error_buffer_destroy(b);
  }
  qc_error_buffer_t* data() { return eb.data(); }
  qc_error_buffer_t operator[](int r) const { return eb[static_cast<size_t>(r)]; }
};

// A fresh group of n ranks with `pol` for every layer; each rank calls
// qc_allreduce once per entry of `in` (in[call][rank]) on its own thread,
// with error buffer ebs[rank] (ebs may be null). Returns out[call][rank];
// a failure is described in *failure.
std::vector<Matrix> allreduce_calls(int n, const qc_policy_t& pol, const std::vector<Matrix>& in,
                                    size_t count, qc_error_buffer_t const* ebs,
                                    std::string* failure) {
  Group g(n);
  if (!g.ok() || g.set_policy("*", pol) != QC_SUCCESS) {
    *failure = std::string("group setup: ") + qc_last_error();
    return {};
  }
  const size_t calls = in.size();
  std::vector<Matrix> out(calls, Matrix(static_cast<size_t>(n), std::vector<float>(count)));
  std::vector<std::string> errors(static_cast<size_t>(n));
  run_ranks(n, [&](int r) {
    for (size_t t = 0; t < calls; ++t) {
      const qc_status_t s =
          qc_allreduce(g[r], in[t][static_cast<size_t>(r)].data(),
                       out[t][static_cast<size_t>(r)].data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                       nullptr, ebs ? ebs[r] : nullptr, nullptr);
      if (s != QC_SUCCESS) {
        errors[static_cast<size_t>(r)] = std::string(qc_status_string(s)) + ": " + qc_last_error();
        return;
      }
    }
  });
  for (const auto& e : errors)
    if (!e.empty() && failure->empty()) *failure = e;
  return out;
}

std::vector<double> exact_sum(const Matrix& in) {
  std::vector<double> s(in[0].size(), 0.0);
  for (const auto& v : in)
    for (size_t i = 0; i < v.size(); ++i) s[i] += v[i];
  return s;
}

// ===========================================================================
// Every codec x algorithm x rank count 1..13 x awkward counts, with and
// without error feedback: every replica bit-identical; two calls in a row
// (so that the residuals of the first feed the second).
// ===========================================================================
class CodecAlgorithm
    : public ::testing::TestWithParam<std::tuple<CodecCase, qc_algorithm_t, bool>> {};

TEST_P(CodecAlgorithm, ReplicasBitIdenticalForEveryRankCount) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const bool ef = std::get<2>(GetParam());
  const qc_policy_t pol = policy_for(cc, algo, ef);
  for (int n = 1; n <= 13; ++n) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1001}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", count " + std::to_string(count));
      Buffers ebs(n, count);
      for (int call = 0; call < 2; ++call) {
        const auto bytes = encode_all(random_inputs(n, count, 99 + call + count), QC_DTYPE_FLOAT32);
        const auto emu = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol,
                                           ef ? ebs.data() : nullptr);
        ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
        ASSERT_TRUE(replicas_identical(emu.out));
        for (float v : as_floats(emu.out[0])) ASSERT_TRUE(std::isfinite(v));
      }
    }
  }
}

// Emulation is a threads-driven run: the same bytes, residuals included.
TEST_P(CodecAlgorithm, EmulationEqualsThreadsWithResiduals) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const bool ef = std::get<2>(GetParam());
  const qc_policy_t pol = policy_for(cc, algo, ef);
  const int n = 6;
  const size_t count = 777;
  std::vector<Matrix> in = {random_inputs(n, count, 5), random_inputs(n, count, 6)};

  Buffers emu_eb(n, count);
  std::vector<Bytes> emu_out;
  for (size_t t = 0; t < in.size(); ++t) {
    // Call t of the layer ("*"), as the real run's call t below.
    const auto emu = allreduce_emulate(n, encode_all(in[t], QC_DTYPE_FLOAT32), count,
                                       QC_DTYPE_FLOAT32, QC_OP_SUM, pol, emu_eb.data(), nullptr, t);
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    emu_out = emu.out;
  }
  // Both calls in one group: stochastic rounding is keyed by the layer's
  // call index, which the emulation takes.
  Buffers thr_eb(n, count);
  std::string failure;
  const std::vector<Matrix> out = allreduce_calls(n, pol, in, count, thr_eb.data(), &failure);
  ASSERT_TRUE(failure.empty()) << failure;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(encode(out.back()[static_cast<size_t>(r)], QC_DTYPE_FLOAT32),
              emu_out[static_cast<size_t>(r)])
        << "rank " << r;
    EXPECT_EQ(residuals(thr_eb[r]), residuals(emu_eb[r])) << "rank " << r;
  }
}

const CodecCase kAllCodecs[] = {kNone, kFp16,    kBf16,     kMinMax8, kMinMax2Sr, kQsgd4Sr,
                                kGlin4, kGlin4Sr, kGexp4Sr, kGexp8,   kOneBit,    kTopK,
                                kMxfp8, kMxfp4Sr, kNvfp4};

std::string codec_algo_name(
    const ::testing::TestParamInfo<std::tuple<CodecCase, qc_algorithm_t, bool>>& i) {
  return std::string(std::get<0>(i.param).name) + "_" + algo_name(std::get<1>(i.param)) +
         (std::get<2>(i.param) ? "_EF" : "");
}

// Every algorithm with every codec, native only with the global codecs.
std::vector<std::tuple<CodecCase, qc_algorithm_t, bool>> codec_algorithm_cases() {
  std::vector<std::tuple<CodecCase, qc_algorithm_t, bool>> cases;
  for (const CodecCase& cc : kAllCodecs) {
    for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE,
                             QC_ALGO_NATIVE, QC_ALGO_AUTO}) {
      if (a == QC_ALGO_NATIVE && !is_global(cc.codec)) continue;
      for (bool ef : {false, true}) cases.emplace_back(cc, a, ef);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Local, CodecAlgorithm, ::testing::ValuesIn(codec_algorithm_cases()),
                         codec_algo_name);

TEST(NativeAlgorithm, NeedsAGlobalCodec) {
  const auto bytes = encode_all(random_inputs(3, 10, 1), QC_DTYPE_FLOAT32);
  for (const CodecCase& cc : kAllCodecs) {
    if (is_global(cc.codec)) continue;
    const auto emu = allreduce_emulate(3, bytes, 10, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                       policy_for(cc, QC_ALGO_NATIVE, false));
    EXPECT_EQ(emu.status, QC_ERROR_UNSUPPORTED) << cc.name;
    // Codec none would be the transport's own float sum, which the local
    // transport does not have; the other codecs are not on a shared grid.
    const char* why = cc.codec == QC_CODEC_NONE ? "local transport has none" : "global_linear";
    EXPECT_NE(emu.error.find(why), std::string::npos) << emu.error;
  }
}

// ===========================================================================
// Error-feedback bookkeeping (DESIGN promise 3): over T calls,
// sum of outputs + final residuals of all ranks = sum of all inputs, to
// float rounding. Without EC the identity fails by the quantization error.
// ===========================================================================
class Bookkeeping : public ::testing::TestWithParam<std::tuple<CodecCase, qc_algorithm_t>> {};

TEST_P(Bookkeeping, OutputsPlusResidualsEqualInputs) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const int n = 6;
  // onebit (the cheapest codec) on a tensor of several of the units the
  // residuals are loaded in as encodes touch them (collective_context.h),
  // so that a unit loaded twice, late or never breaks the books.
  const size_t count = cc.codec == QC_CODEC_ONEBIT ? 5 * 4096 + 77 : 999;
  const int T = 12;
  std::vector<Matrix> in;
  for (int t = 0; t < T; ++t) in.push_back(random_inputs(n, count, 1000 + t));

  for (bool ef : {true, false}) {
    SCOPED_TRACE(ef ? "with error feedback" : "without error feedback");
    Buffers ebs(n, count);
    std::string failure;
    const auto out = allreduce_calls(n, policy_for(cc, algo, ef), in, count, ebs.data(), &failure);
    ASSERT_TRUE(failure.empty()) << failure;

    std::vector<double> lhs(count, 0.0), rhs(count, 0.0);
    double scale = 0.0;  // the largest magnitude any term reaches
    for (int t = 0; t < T; ++t) {
      for (size_t i = 0; i < count; ++i) {
        lhs[i] += out[t][0][i];
        scale = std::max(scale, std::fabs(static_cast<double>(out[t][0][i])));
        for (int r = 0; r < n; ++r) rhs[i] += in[t][static_cast<size_t>(r)][i];
      }
    }
    for (int r = 0; r < n; ++r) {
      const auto e = residuals(ebs[r]);
      for (size_t i = 0; i < count; ++i) {
        if (ef) lhs[i] += e[i];
        scale = std::max(scale, std::fabs(static_cast<double>(e[i])));
        if (!ef) {
          EXPECT_EQ(e[i], 0.0f) << "EC off must not touch the buffer";
        }
      }
    }
    // Every encode adds and subtracts float values of magnitude <= scale:
    // a few roundings of FLT_EPSILON * scale per rank and call.
    const double tol = 8.0 * FLT_EPSILON * scale * n * T;
    double worst = 0.0;
    for (size_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(lhs[i] - rhs[i]));
    if (ef) {
      EXPECT_LE(worst, tol) << "bookkeeping broken: largest imbalance " << worst;
    } else if (cc.codec != QC_CODEC_NONE) {
      EXPECT_GT(worst, 4 * tol) << "without EC the quantization error is not booked anywhere";
    }
  }
}

std::vector<std::tuple<CodecCase, qc_algorithm_t>> bookkeeping_cases() {
  std::vector<std::tuple<CodecCase, qc_algorithm_t>> cases;
  for (const CodecCase& cc : {kMinMax2, kMinMax2Sr, kQsgd4Sr, kOneBit, kTopK, kGlin4, kGexp4Sr,
                              kFp16, kMxfp4Sr, kNvfp4}) {
    for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE,
                             QC_ALGO_NATIVE}) {
      if (a != QC_ALGO_NATIVE || is_global(cc.codec)) cases.emplace_back(cc, a);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Local, Bookkeeping, ::testing::ValuesIn(bookkeeping_cases()),
    [](const ::testing::TestParamInfo<std::tuple<CodecCase, qc_algorithm_t>>& i) {
      return std::string(std::get<0>(i.param).name) + "_" + algo_name(std::get<1>(i.param));
    });

// ===========================================================================
// A fixed input repeated T times: with EC the mean output's error is
// |sum of residuals| / T, so it falls like 1/T; without EC (nearest
// rounding) every call returns the same thing and the error stays flat.
// ===========================================================================
class Decay : public ::testing::TestWithParam<std::tuple<CodecCase, qc_algorithm_t>> {};

double mean_error(const std::vector<Matrix>& out, const std::vector<double>& exact, int T) {
  double worst = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    double s = 0.0;
    for (int t = 0; t < T; ++t) s += out[t][0][i];
    worst = std::max(worst, std::fabs(s / T - exact[i]));
  }
  return worst;
}

TEST_P(Decay, MeanErrorFallsLikeOneOverTWithFeedbackOnly) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const int n = 5;
  const size_t count = 500;
  const int T = 64;
  const Matrix x = random_inputs(n, count, 4242);
  const std::vector<Matrix> in(T, x);
  const auto exact = exact_sum(x);
  double err[2][2];  // [ef][T = 8, T = 64]
  for (int ef = 0; ef < 2; ++ef) {
    Buffers ebs(n, count);
    std::string failure;
    const auto out = allreduce_calls(n, policy_for(cc, algo, ef != 0), in, count, ebs.data(), &failure);
    ASSERT_TRUE(failure.empty()) << failure;
    err[ef][0] = mean_error(out, exact, 8);
    err[ef][1] = mean_error(out, exact, T);
  }
  SCOPED_TRACE("errors: no EC " + std::to_string(err[0][0]) + " -> " + std::to_string(err[0][1]) +
               ", EC " + std::to_string(err[1][0]) + " -> " + std::to_string(err[1][1]));
  EXPECT_GT(err[0][1], 0.0);
  EXPECT_DOUBLE_EQ(err[0][0], err[0][1]) << "without EC every call gives the same output";
  // 8x more calls: about 8x smaller with EC (4x leaves room for the residual's wobble).
  EXPECT_LT(err[1][1], err[1][0] / 4);
  EXPECT_LT(err[1][1], err[0][1] / 8);
}

INSTANTIATE_TEST_SUITE_P(
    Local, Decay,
    // onebit converges too, but more slowly than 1/T at these T (its
    // residuals are as large as the values); global_linear with nearest
    // rounding and EC can stall when the tensor's norm dwarfs every element
    // (docs/fidelity.md has both).
    ::testing::Combine(::testing::Values(kMinMax2, kTopK,
                                         CodecCase{QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN,
                                                   "MinMax4"}),
                       ::testing::Values(QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                                         QC_ALGO_TREE, QC_ALGO_AUTO)),
    [](const ::testing::TestParamInfo<std::tuple<CodecCase, qc_algorithm_t>>& i) {
      return std::string(std::get<0>(i.param).name) + "_" + algo_name(std::get<1>(i.param));
    });

// ===========================================================================
// Stochastic rounding stays unbiased through the whole collective: over K
// calls with the same input (each call draws new random bits), the mean
// output converges to the exact sum at the rate of its standard error.
// ===========================================================================
class Unbiased : public ::testing::TestWithParam<std::tuple<CodecCase, qc_algorithm_t>> {};

TEST_P(Unbiased, MeanOfManyCallsIsTheExactSum) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const int n = 5;
  const size_t count = 256;
  const int K = 400;
  const Matrix x = random_inputs(n, count, 77);
  const std::vector<Matrix> in(K, x);
  const auto exact = exact_sum(x);
  std::string failure;
  const auto out =
      allreduce_calls(n, policy_for(cc, algo, false), in, count, nullptr, &failure);
  ASSERT_TRUE(failure.empty()) << failure;
  // z_i = (mean - exact) / (sd / sqrt K): for an unbiased result about N(0, 1).
  double sum_z2 = 0.0, sum_z = 0.0;
  size_t used = 0;
  for (size_t i = 0; i < count; ++i) {
    double m = 0.0, m2 = 0.0;
    for (int k = 0; k < K; ++k) {
      m += out[k][0][i];
      m2 += static_cast<double>(out[k][0][i]) * out[k][0][i];
    }
    m /= K;
    const double var = std::max(m2 / K - m * m, 0.0) * K / (K - 1);
    if (var == 0.0) {
      EXPECT_NEAR(m, exact[i], 1e-5) << "element " << i << " is deterministic and off";
      continue;
    }
    const double z = (m - exact[i]) / std::sqrt(var / K);
    sum_z += z;
    sum_z2 += z * z;
    ++used;
  }
  ASSERT_GT(used, count / 2);
  // For N(0,1) samples: mean z^2 = 1 +- 0.09 (256 elements), mean z = 0 +- 0.06.
  EXPECT_LT(sum_z2 / used, 1.5) << "the collective's result is biased";
  EXPECT_LT(std::fabs(sum_z / used), 0.3) << "the collective's result is biased";
}

INSTANTIATE_TEST_SUITE_P(
    Local, Unbiased,
    ::testing::Values(std::make_tuple(kMinMax2Sr, QC_ALGO_RING),
                      std::make_tuple(kMinMax2Sr, QC_ALGO_RECURSIVE_DOUBLING),
                      std::make_tuple(kMinMax2Sr, QC_ALGO_SRA),
                      std::make_tuple(kMinMax2Sr, QC_ALGO_TREE),
                      std::make_tuple(kQsgd4Sr, QC_ALGO_RING),
                      std::make_tuple(kQsgd4Sr, QC_ALGO_SRA),
                      std::make_tuple(kGlin4Sr, QC_ALGO_NATIVE),
                      std::make_tuple(kGlin4Sr, QC_ALGO_SRA),
                      std::make_tuple(kGexp4Sr, QC_ALGO_NATIVE)),
    [](const ::testing::TestParamInfo<std::tuple<CodecCase, qc_algorithm_t>>& i) {
      return std::string(std::get<0>(i.param).name) + "_" + algo_name(std::get<1>(i.param));
    });

// ===========================================================================
// minmax 8-bit within the per-hop bound of docs/fidelity.md: an encode of a
// bucket spanning rho errs by at most rho / (2L), L = 2^q - 1; a partial sum
// of k inputs spans at most k R (+ twice the error so far), R the largest
// per-rank range; W = sum over inputs of the encodes each passes through.
// ===========================================================================
double input_encodes(qc_algorithm_t algo, int n, int group_size) {
  switch (algo) {
    case QC_ALGO_RING: return n * (n + 1) / 2.0;
    case QC_ALGO_SRA: return 2.0 * n - 1;
    case QC_ALGO_TREE: {
      double w = 0;
      for (int r = 0; r < n; ++r) w += __builtin_popcount(static_cast<unsigned>(r)) + 1;
      return w;
    }
    default: {
      const int G = std::min(group_size, n);
      int P = 1, levels = 0;
      while (G * P * 2 <= n) P *= 2, ++levels;
      return n * (3.0 + levels);
    }
  }
}

class MinMaxBound : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(MinMaxBound, EightBitErrorWithinPerHopBound) {
  const qc_algorithm_t algo = GetParam();
  const double L = 255.0;
  for (int n : {2, 3, 5, 8, 13}) {
    const size_t count = 4099;
    const Matrix x = random_inputs(n, count, 31 + n);
    const auto emu = allreduce_emulate(n, encode_all(x, QC_DTYPE_FLOAT32), count,
                                       QC_DTYPE_FLOAT32, QC_OP_SUM,
                                       policy_for(kMinMax8, algo, false));
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    double R = 0.0;
    for (const auto& v : x) {
      const auto mm = std::minmax_element(v.begin(), v.end());
      R = std::max(R, static_cast<double>(*mm.second - *mm.first));
    }
    const double W = input_encodes(algo, n, 8);
    // Longest chain of encodes on one element's path is < n + 2, each
    // widening the next range by twice the error so far.
    const double bound = W * R / (2 * L) / (1.0 - 2.0 * (n + 2) / (2 * L)) + 64 * FLT_EPSILON * n;
    const auto out = as_floats(emu.out[0]);
    const auto exact = exact_sum(x);
    double worst = 0.0;
    for (size_t i = 0; i < count; ++i) worst = std::max(worst, std::fabs(out[i] - exact[i]));
    EXPECT_LE(worst, bound) << "n " << n;
    EXPECT_GT(worst, 0.0) << "n " << n << ": an 8-bit codec cannot be exact here";
  }
}

INSTANTIATE_TEST_SUITE_P(Local, MinMaxBound,
                         ::testing::Values(QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                                           QC_ALGO_TREE),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

// ===========================================================================
// native: integer codes summed exactly. With only rank 0 holding data the
// agreed norm is rank 0's own and the others contribute zero codes, so the
// result is exactly one encode + decode of rank 0's data (any re-encoding
// would show). Bits 8 of global_exp needs 8 fixed-point limbs.
// ===========================================================================
class NativeExact : public ::testing::TestWithParam<CodecCase> {};

TEST_P(NativeExact, EqualsOneEncodeDecodeOfTheOnlyContribution) {
  const CodecCase cc = GetParam();
  const qc_policy_t pol = policy_for(cc, QC_ALGO_NATIVE, false);
  for (int n : {1, 2, 5, 13}) {
    const size_t count = 1001;
    Matrix x(static_cast<size_t>(n), std::vector<float>(count, 0.0f));
    x[0] = random_inputs(1, count, 8)[0];
    const auto emu = allreduce_emulate(n, encode_all(x, QC_DTYPE_FLOAT32), count,
                                       QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    ASSERT_TRUE(replicas_identical(emu.out));
    size_t cap = 0, written = 0;
    ASSERT_EQ(qc_codec_encoded_size(&pol, count, &cap), QC_SUCCESS);
    Bytes msg(cap);
    ASSERT_EQ(qc_codec_encode(&pol, x[0].data(), count, QC_DTYPE_FLOAT32, msg.data(), cap, &written),
              QC_SUCCESS)
        << qc_last_error();
    std::vector<float> one(count);
    ASSERT_EQ(qc_codec_decode(msg.data(), written, one.data(), count, QC_DTYPE_FLOAT32), QC_SUCCESS);
    if (cc.rounding == QC_ROUND_NEAREST_EVEN) {
      EXPECT_EQ(as_floats(emu.out[0]), one) << "n " << n;
    }
  }
}

TEST(NativeExact, LinearErrorWithinOneStepPerRank) {
  // Nearest rounding on the shared grid: each rank's codes err by at most
  // half a step (scale / (2M); the default scale is the largest |x| of all
  // ranks), and the integer sum adds no error.
  const int n = 7;
  const size_t count = 2000;
  const Matrix x = random_inputs(n, count, 12);
  const auto emu = allreduce_emulate(n, encode_all(x, QC_DTYPE_FLOAT32), count, QC_DTYPE_FLOAT32,
                                     QC_OP_SUM, policy_for(kGlin4, QC_ALGO_NATIVE, false));
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  float max_abs = 0.0f;
  for (const auto& v : x)
    for (float f : v) max_abs = std::max(max_abs, std::fabs(f));
  const double step = static_cast<double>(max_abs / 7.0f);  // M = 2^(4-1) - 1, as the codec
  const auto out = as_floats(emu.out[0]);
  const auto exact = exact_sum(x);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_LE(std::fabs(out[i] - exact[i]), n * step / 2 * (1 + 1e-5)) << "element " << i;
    // The result is a whole number of steps.
    const double levels = out[i] / (step * (1 + 0.0));
    ASSERT_NEAR(levels, std::nearbyint(levels), 1e-3) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Local, NativeExact,
                         ::testing::Values(kGlin4, kGlin4Sr, CodecCase{QC_CODEC_GLOBAL_EXP, 4,
                                                                       QC_ROUND_NEAREST_EVEN,
                                                                       "GlobalExp4"},
                                           kGexp8,
                                           CodecCase{QC_CODEC_GLOBAL_LINEAR, 8,
                                                     QC_ROUND_NEAREST_EVEN, "GlobalLinear8"}),
                         [](const ::testing::TestParamInfo<CodecCase>& i) {
                           return std::string(i.param.name);
                         });

// ===========================================================================
// QC_OP_AVG divides once, at the end, in float32: AVG = SUM * (1/n), bit
// for bit, whatever the codec.
// ===========================================================================
TEST(Average, DividesOnceAtTheEnd) {
  const int n = 6;
  const size_t count = 1234;
  const auto bytes = encode_all(random_inputs(n, count, 3), QC_DTYPE_FLOAT32);
  for (const CodecCase& cc : {kMinMax2, kQsgd4Sr, kGlin4, kOneBit}) {
    SCOPED_TRACE(cc.name);
    const qc_policy_t pol = policy_for(cc, QC_ALGO_AUTO, false);
    const auto sum = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
    const auto avg = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_AVG, pol);
    ASSERT_EQ(sum.status, QC_SUCCESS) << sum.error;
    ASSERT_EQ(avg.status, QC_SUCCESS) << avg.error;
    auto expect = as_floats(sum.out[0]);
    for (float& v : expect) v *= 1.0f / n;
    EXPECT_EQ(as_floats(avg.out[0]), expect);
  }
}

// ===========================================================================
// Error-buffer binding: a policy change resets the residuals with a log line;
// a checkpoint restores them; another rank's image is refused.
// ===========================================================================
TEST(ErrorBufferBinding, PolicyChangeResetsResidualsWithALogLine) {
  const int n = 3;
  const size_t count = 300;
  Buffers ebs(n, count);
  const auto bytes = encode_all(random_inputs(n, count, 1), QC_DTYPE_FLOAT32);
  ASSERT_EQ(allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                              policy_for(kMinMax2, QC_ALGO_RING, true), ebs.data())
                .status,
            QC_SUCCESS);
  const auto ring_residual = residuals(ebs[1]);
  ASSERT_GT(std::accumulate(ring_residual.begin(), ring_residual.end(), 0.0,
                            [](double a, float b) { return a + std::fabs(b); }),
            0.0);

  // Same policy again: the residuals carry over (no reset, no log line).
  ::testing::internal::CaptureStderr();
  const auto zeros = encode_all(Matrix(n, std::vector<float>(count, 0.0f)), QC_DTYPE_FLOAT32);
  auto same = allreduce_emulate(n, zeros, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                policy_for(kMinMax2, QC_ALGO_RING, true), ebs.data());
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(same.status, QC_SUCCESS) << same.error;
  EXPECT_EQ(log.find("reset"), std::string::npos) << log;
  // Zero input: the output is what the residuals carried (the EC re-sends them).
  double carried = 0.0;
  for (float v : as_floats(same.out[0])) carried += std::fabs(v);
  EXPECT_GT(carried, 0.0);

  // Another algorithm: the residuals belong to the old slots and are reset.
  ::testing::internal::CaptureStderr();
  auto other = allreduce_emulate(n, zeros, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                 policy_for(kMinMax2, QC_ALGO_SRA, true), ebs.data());
  log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(other.status, QC_SUCCESS) << other.error;
  EXPECT_NE(log.find("reset"), std::string::npos) << "expected a log line, got: " << log;
  EXPECT_NE(log.find("ring"), std::string::npos) << log;
  for (float v : as_floats(other.out[0])) ASSERT_EQ(v, 0.0f) << "stale residuals were sent";
  // Another codec width: reset again.
  ::testing::internal::CaptureStderr();
  other = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                            policy_for(kMinMax8, QC_ALGO_SRA, true), ebs.data());
  log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(other.status, QC_SUCCESS);
  EXPECT_NE(log.find("bits 2"), std::string::npos) << log;
}

TEST(ErrorBufferBinding, ImageRecordsRankAndRestoresExactly) {
  const int n = 3;
  const size_t count = 100;
  Buffers ebs(n, count);
  const auto bytes = encode_all(random_inputs(n, count, 2), QC_DTYPE_FLOAT32);
  const qc_policy_t pol = policy_for(kOneBit, QC_ALGO_SRA, true);
  ASSERT_EQ(allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, ebs.data()).status,
            QC_SUCCESS);
  size_t size = 0;
  ASSERT_EQ(qc_error_buffer_save(ebs[1], nullptr, 0, &size), QC_SUCCESS);
  Bytes image(size);
  ASSERT_EQ(qc_error_buffer_save(ebs[1], image.data(), size, &size), QC_SUCCESS);

  // Rank 0's buffer refuses rank 1's image and keeps its own residuals.
  const auto before = residuals(ebs[0]);
  EXPECT_EQ(qc_error_buffer_load(ebs[0], image.data(), size), QC_ERROR_MISMATCH);
  EXPECT_NE(std::string(qc_last_error()).find("rank 1"), std::string::npos) << qc_last_error();
  EXPECT_EQ(residuals(ebs[0]), before);

  // A fresh buffer takes it, becomes rank 1's, and continues bit-identically.
  Buffers fresh(n, count);
  ASSERT_EQ(qc_error_buffer_load(fresh[1], image.data(), size), QC_SUCCESS) << qc_last_error();
  EXPECT_EQ(residuals(fresh[1]), residuals(ebs[1]));
  for (int r : {0, 2}) {
    Bytes img(size);
    ASSERT_EQ(qc_error_buffer_save(ebs[r], img.data(), size, &size), QC_SUCCESS);
    ASSERT_EQ(qc_error_buffer_load(fresh[r], img.data(), size), QC_SUCCESS) << qc_last_error();
  }
  const auto next = encode_all(random_inputs(n, count, 3), QC_DTYPE_FLOAT32);
  const auto a = allreduce_emulate(n, next, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, ebs.data());
  ::testing::internal::CaptureStderr();
  const auto b = allreduce_emulate(n, next, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, fresh.data());
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(a.status, QC_SUCCESS);
  ASSERT_EQ(b.status, QC_SUCCESS) << b.error;
  EXPECT_EQ(a.out, b.out);
  EXPECT_TRUE(log.empty()) << "a restored buffer is bound to the same grid: " << log;
  // Swapped into rank 0's slot, the restored rank-1 buffer is refused.
  std::vector<qc_error_buffer_t> swapped = {fresh[1], fresh[0], fresh[2]};
  EXPECT_EQ(allreduce_emulate(n, next, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, swapped.data())
                .status,
            QC_ERROR_MISMATCH);
}

// ===========================================================================
// Ranks that disagree on codec parameters: QC_ERROR_MISMATCH everywhere, no
// hang, for every algorithm.
// ===========================================================================
TEST(CodecMismatch, DifferentBitsOnOneRankFailsEveryRank) {
  for (qc_algorithm_t algo : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE}) {
    SCOPED_TRACE(algo_name(algo));
    const int n = 5;
    Group g(n, 10.0);
    ASSERT_TRUE(g.ok());
    for (int r = 0; r < n; ++r) {
      qc_policy_t p = policy_for(kMinMax2, algo, false);
      if (r == 3) p.bits = 4;
      ASSERT_EQ(qc_comm_set_layer_policy(g[r], "*", &p), QC_SUCCESS);
    }
    const size_t count = 640;
    const auto res = allreduce_on(g, encode_all(random_inputs(n, count, 9), QC_DTYPE_FLOAT32),
                                  count, QC_DTYPE_FLOAT32, QC_OP_SUM);
    for (int r = 0; r < n; ++r) EXPECT_EQ(res.status[r], QC_ERROR_MISMATCH) << res.describe();
  }
}

// A gradient that stays zero after one step (dead ReLU units): the residuals
// decay call by call into subnormal floats, and minmax's 1 / scale of such a
// bucket used to overflow to Inf and make NaN (found by the DDP digits run).
// Every output must stay finite and the residual must keep shrinking to 0.
TEST(ResidualDecay, SubnormalResidualsStayFinite) {
  const int n = 2;
  const size_t count = 256;
  for (qc_algorithm_t algo : {QC_ALGO_SRA, QC_ALGO_RING}) {
    for (int bits : {2, 4, 8}) {
      SCOPED_TRACE(std::string(algo_name(algo)) + " bits " + std::to_string(bits));
      Group g(n);
      ASSERT_TRUE(g.ok());
      qc_policy_t p = make_policy(algo);
      p.codec = QC_CODEC_MINMAX;
      p.bits = bits;
      p.error_feedback = 1;
      ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
      const auto first = random_inputs(n, count, 77);
      std::vector<int> first_bad(n, -1);
      std::vector<double> last_norm(n, -1);
      run_ranks(n, [&](int r) {
        qc_error_buffer_t eb = nullptr;
        ASSERT_EQ(qc_error_buffer_create(g[r], count, &eb), QC_SUCCESS);
        for (int call = 0; call < 200 && first_bad[r] < 0; ++call) {
          std::vector<float> x(count, 0.0f);
          if (call == 0)
            for (size_t i = 0; i < count; ++i) x[i] = first[r][i] * 1e-2f;
          ASSERT_EQ(qc_allreduce(g[r], x.data(), x.data(), count, QC_DTYPE_FLOAT32, QC_OP_AVG,
                                 "w", eb, nullptr),
                    QC_SUCCESS)
              << qc_last_error();
          for (float v : x)
            if (!std::isfinite(v)) first_bad[r] = call;
        }
        qc_error_buffer_norm(eb, &last_norm[r]);
        qc_error_buffer_destroy(eb);
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(first_bad[r], -1) << "rank " << r << ": first non-finite output at that call";
        EXPECT_TRUE(std::isfinite(last_norm[r]) && last_norm[r] < 1e-30) << last_norm[r];
      }
    }
  }
}


// ===========================================================================
// Residual hygiene (issue 28 item 6; docs/errors.md "Non-finite data"):
// one call with a poisoned input must not poison the calls after it.
// Poisons: NaN, Inf, and a finite value the codec cannot carry (fp16 1e6,
// bf16 FLT_MAX, a minmax bucket spanning -3e38..3e38, 3e38 for qsgd, onebit,
// topk and the global codecs), on one rank at element kPoisonAt.
// Local groups of 3 and 4 ranks, bucket 32, 768 elements (every block of
// every algorithm starts on a multiple of 32, so the poisoned bucket is
// elements [kPoisonAt - kPoisonAt % 32, +32) in every encode).
//
// What is asserted, per codec x algorithm x ranks x poison:
//  A. call 1 = zeros everywhere but the poison, calls 2-3 ordinary inputs:
//     after call 1 every rank's residuals are finite and zero (a fresh
//     buffer), and the outputs of calls 2-3 are bit-identical to a run whose
//     call 1 is all zeros (its residuals are exactly zero: zeros encode
//     exactly), so they are what a reset buffer gives; call 1's non-finite
//     outputs lie in the poisoned bucket (the whole tensor for the global
//     codecs), and with a NaN/Inf poison include kPoisonAt (promise 5).
//  B. call 1 = ordinary inputs plus the poison: call 1 non-finite only in the
//     poisoned bucket (as above); every residual finite afterwards; calls
//     2-3 all finite; outside the poisoned bucket, calls 1-3 and the
//     residuals are bit-identical to a run without the poison (element
//     kPoisonAt = 0 instead). topk selects over the whole block, so for it
//     the "bucket" is the whole tensor.
// ===========================================================================
enum class Poison { kNaN, kInf, kTooLarge };

struct HygieneCase {
  CodecCase codec;
  qc_algorithm_t algo;
  int ranks;
  Poison poison;
};

constexpr size_t kHygieneCount = 768;
constexpr size_t kHygieneBucket = 32;
constexpr size_t kPoisonAt = 200;  // bucket [192, 224)
constexpr int kPoisonRank = 1;

const char* poison_name(Poison p) {
  switch (p) {
    case Poison::kNaN: return "NaN";
    case Poison::kInf: return "Inf";
    case Poison::kTooLarge: return "TooLarge";
  }
  return "?";
}

// Elements [lo, hi) that the poison may make non-finite or change.
void poisoned_window(const HygieneCase& c, size_t* lo, size_t* hi) {
  if (is_global(c.codec.codec) || c.codec.codec == QC_CODEC_TOPK) {
    *lo = 0;
    *hi = kHygieneCount;
    return;
  }
  *lo = kPoisonAt - kPoisonAt % kHygieneBucket;
  *hi = *lo + kHygieneBucket;
}

// Puts the poison into rank kPoisonRank's input.
void add_poison(const HygieneCase& c, Matrix* in) {
  std::vector<float>& x = (*in)[kPoisonRank];
  switch (c.poison) {
    case Poison::kNaN: x[kPoisonAt] = std::numeric_limits<float>::quiet_NaN(); return;
    case Poison::kInf: x[kPoisonAt] = -std::numeric_limits<float>::infinity(); return;
    case Poison::kTooLarge:
      switch (c.codec.codec) {
        case QC_CODEC_FP16: x[kPoisonAt] = 1e6f; return;  // > 65504
        case QC_CODEC_BF16: x[kPoisonAt] = FLT_MAX; return;  // rounds to bf16 Inf
        case QC_CODEC_MINMAX:  // the bucket's range max - min overflows float
          x[kPoisonAt] = 3e38f;
          x[kPoisonAt + 1] = -3e38f;
          return;
        default: x[kPoisonAt] = 3e38f; return;  // qsgd's sum of squares overflows
      }
  }
}

std::vector<HygieneCase> hygiene_cases() {
  const CodecCase kMinMax4{QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN, "MinMax4"};
  const CodecCase kQsgd4{QC_CODEC_QSGD, 4, QC_ROUND_NEAREST_EVEN, "Qsgd4"};
  const CodecCase codecs[] = {kFp16,  kBf16,   kMinMax4, kMinMax2Sr, kQsgd4, kQsgd4Sr,
                              kOneBit, kTopK, kGlin4Sr, kGexp4Sr};
  std::vector<HygieneCase> cases;
  for (const CodecCase& cc : codecs)
    for (qc_algorithm_t a : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE,
                             QC_ALGO_AUTO, QC_ALGO_NATIVE}) {
      if (a == QC_ALGO_NATIVE && !is_global(cc.codec)) continue;
      for (int ranks : {3, 4})
        for (Poison p : {Poison::kNaN, Poison::kInf, Poison::kTooLarge})
          cases.push_back({cc, a, ranks, p});
    }
  return cases;
}

class ResidualHygiene : public ::testing::TestWithParam<HygieneCase> {
 protected:
  qc_policy_t policy() const {
    qc_policy_t p = policy_for(GetParam().codec, GetParam().algo, true);
    p.bucket_size = static_cast<int>(kHygieneBucket);
    return p;
  }
  // Runs `in` (calls x ranks) on fresh error buffers; outputs and, after
  // the first call, every rank's residuals.
  void run(const std::vector<Matrix>& in, std::vector<Matrix>* out, Matrix* after_first) {
    const int n = GetParam().ranks;
    Buffers ebs(n, kHygieneCount);
    std::string failure;
    *out = allreduce_calls(n, policy(), {in[0]}, kHygieneCount, ebs.data(), &failure);
    ASSERT_TRUE(failure.empty()) << failure;
    after_first->clear();
    for (int r = 0; r < n; ++r) after_first->push_back(residuals(ebs[r]));
    // The later calls on the same buffers, in a second group (the
    // reference run does the same, so stochastic rounding's call numbers,
    // which restart with every group, match).
    const std::vector<Matrix> rest(in.begin() + 1, in.end());
    const auto more = allreduce_calls(n, policy(), rest, kHygieneCount, ebs.data(), &failure);
    ASSERT_TRUE(failure.empty()) << failure;
    out->insert(out->end(), more.begin(), more.end());
  }
  // Call 1's outputs: non-finite only in the window, and (NaN/Inf) at the poison.
  void expect_poisoned_call(const Matrix& first) {
    const HygieneCase& c = GetParam();
    size_t lo, hi;
    poisoned_window(c, &lo, &hi);
    for (int r = 0; r < c.ranks; ++r) {
      for (size_t i = 0; i < kHygieneCount; ++i) {
        if (i < lo || i >= hi) {
          ASSERT_TRUE(std::isfinite(first[r][i])) << "call 1, rank " << r << ", element " << i;
        }
      }
      if (c.poison != Poison::kTooLarge) {
        EXPECT_FALSE(std::isfinite(first[r][kPoisonAt])) << "call 1, rank " << r << " hides the poison";
      }
    }
  }
};

std::vector<Matrix> ordinary_calls(int n, uint64_t seed) {
  return {random_inputs(n, kHygieneCount, seed), random_inputs(n, kHygieneCount, seed + 1)};
}

TEST_P(ResidualHygiene, PoisonedCallLeavesAFreshBuffer) {
  const HygieneCase& c = GetParam();
  const int n = c.ranks;
  Matrix zeros(static_cast<size_t>(n), std::vector<float>(kHygieneCount, 0.0f));
  Matrix poisoned = zeros;
  add_poison(c, &poisoned);
  std::vector<Matrix> in = {poisoned};
  std::vector<Matrix> ref_in = {zeros};
  for (const Matrix& m : ordinary_calls(n, 31)) {
    in.push_back(m);
    ref_in.push_back(m);
  }
  std::vector<Matrix> out, ref_out;
  Matrix e1, ref_e1;
  run(in, &out, &e1);
  if (HasFatalFailure()) return;
  run(ref_in, &ref_out, &ref_e1);
  if (HasFatalFailure()) return;
  expect_poisoned_call(out[0]);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < kHygieneCount; ++i) {
      ASSERT_EQ(e1[r][i], 0.0f) << "residual of rank " << r << ", element " << i
                                << " after the poisoned call";
      ASSERT_EQ(ref_e1[r][i], 0.0f) << "zeros must encode exactly";
    }
  }
  for (size_t t = 1; t < in.size(); ++t) {
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < kHygieneCount; ++i) {
        ASSERT_TRUE(std::isfinite(out[t][r][i]))
            << "call " << t + 1 << ", rank " << r << ", element " << i << " is " << out[t][r][i];
        ASSERT_EQ(out[t][r][i], ref_out[t][r][i])
            << "call " << t + 1 << ", rank " << r << ", element " << i;
      }
    }
  }
}

TEST_P(ResidualHygiene, OnlyThePoisonedBucketIsTouched) {
  const HygieneCase& c = GetParam();
  const int n = c.ranks;
  std::vector<Matrix> in = {random_inputs(n, kHygieneCount, 57)};
  for (const Matrix& m : ordinary_calls(n, 58)) in.push_back(m);
  std::vector<Matrix> ref_in = in;
  in[0][kPoisonRank][kPoisonAt + 1] = 0.0f;  // minmax's second poison element
  ref_in[0][kPoisonRank][kPoisonAt + 1] = 0.0f;
  ref_in[0][kPoisonRank][kPoisonAt] = 0.0f;
  add_poison(c, &in[0]);
  std::vector<Matrix> out, ref_out;
  Matrix e1, ref_e1;
  run(in, &out, &e1);
  if (HasFatalFailure()) return;
  run(ref_in, &ref_out, &ref_e1);
  if (HasFatalFailure()) return;
  expect_poisoned_call(out[0]);
  size_t lo, hi;
  poisoned_window(c, &lo, &hi);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < kHygieneCount; ++i) {
      ASSERT_TRUE(std::isfinite(e1[r][i])) << "residual of rank " << r << ", element " << i;
      if (i < lo || i >= hi) {
        ASSERT_EQ(e1[r][i], ref_e1[r][i]) << "rank " << r << ", element " << i;
      }
    }
  }
  for (size_t t = 0; t < in.size(); ++t) {
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < kHygieneCount; ++i) {
        if (t > 0) {
          ASSERT_TRUE(std::isfinite(out[t][r][i]))
              << "call " << t + 1 << ", rank " << r << ", element " << i << " is " << out[t][r][i];
        }
        if (i < lo || i >= hi) {
          ASSERT_EQ(out[t][r][i], ref_out[t][r][i])
              << "call " << t + 1 << ", rank " << r << ", element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Local, ResidualHygiene, ::testing::ValuesIn(hygiene_cases()),
    [](const ::testing::TestParamInfo<HygieneCase>& i) {
      return std::string(i.param.codec.name) + "_" + algo_name(i.param.algo) + "_" +
             std::to_string(i.param.ranks) + "ranks_" + poison_name(i.param.poison);
    });

// topk with more non-finite values than it sends: the ones left behind must
// not stay in the residuals (they would be sent, one call late, into an
// ordinary call's output).
TEST(ResidualHygieneTopk, UnsentNonFiniteValuesAreDropped) {
  const int n = 3;
  const size_t count = 300;
  for (qc_algorithm_t algo : {QC_ALGO_RING, QC_ALGO_SRA, QC_ALGO_TREE, QC_ALGO_RECURSIVE_DOUBLING}) {
    SCOPED_TRACE(algo_name(algo));
    std::vector<Matrix> in = {random_inputs(n, count, 3)};
    for (size_t i = 0; i < count; i += 2) in[0][1][i] = std::numeric_limits<float>::quiet_NaN();
    in.push_back(random_inputs(n, count, 4));
    Buffers ebs(n, count);
    std::string failure;
    const auto out = allreduce_calls(n, policy_for(kTopK, algo, true), in, count, ebs.data(),
                                     &failure);
    ASSERT_TRUE(failure.empty()) << failure;
    for (int r = 0; r < n; ++r) {
      for (float v : residuals(ebs[r])) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
      for (size_t i = 0; i < count; ++i)
        ASSERT_TRUE(std::isfinite(out[1][r][i])) << "call 2, rank " << r << ", element " << i;
    }
  }
}

// An image saved by an older qc (whose encodes could leave NaN or Inf
// residuals) or edited: its non-finite residuals load as 0, so the next call
// is not poisoned; finite ones load exactly.
TEST(ResidualHygieneImage, NonFiniteResidualsLoadAsZero) {
  const int n = 3;
  const size_t count = 100;
  const qc_policy_t pol = policy_for(kMinMax8, QC_ALGO_SRA, true);
  Buffers ebs(n, count);
  const auto first = encode_all(random_inputs(n, count, 2), QC_DTYPE_FLOAT32);
  ASSERT_EQ(allreduce_emulate(n, first, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, ebs.data()).status,
            QC_SUCCESS);
  size_t size = 0;
  ASSERT_EQ(qc_error_buffer_save(ebs[1], nullptr, 0, &size), QC_SUCCESS);
  Bytes image(size);
  ASSERT_EQ(qc_error_buffer_save(ebs[1], image.data(), size, &size), QC_SUCCESS);
  const std::vector<float> saved = residuals(ebs[1]);
  const float bad[2] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::infinity()};
  std::memcpy(image.data() + 56 + 4 * 10, &bad[0], 4);
  std::memcpy(image.data() + 56 + 4 * 70, &bad[1], 4);
  // The image's checksum (error_buffer.h): FNV-1a 64 of bytes [0, 48) and
  // the payload, little-endian at offset 48.
  uint64_t h = 0xcbf29ce484222325ull;
  auto fnv = [&h](const uint8_t* p, size_t len) {
    for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  };
  fnv(image.data(), 48);
  fnv(image.data() + 56, size - 56);
  for (int k = 0; k < 8; ++k) image[48 + k] = static_cast<uint8_t>(h >> (8 * k));
  ASSERT_EQ(qc_error_buffer_load(ebs[1], image.data(), size), QC_SUCCESS) << qc_last_error();
  const std::vector<float> loaded = residuals(ebs[1]);
  for (size_t i = 0; i < count; ++i) {
    if (i == 10 || i == 70) {
      EXPECT_EQ(loaded[i], 0.0f) << i;
    } else {
      EXPECT_EQ(loaded[i], saved[i]) << i;
    }
  }
  const auto next = encode_all(random_inputs(n, count, 3), QC_DTYPE_FLOAT32);
  const auto res = allreduce_emulate(n, next, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, ebs.data());
  ASSERT_EQ(res.status, QC_SUCCESS) << res.error;
  for (float v : as_floats(res.out[0])) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
