// Adaptive per-layer bit widths (src/core/adapt/adaptive_bits.h, paper 003
// §5): the byte and error models against the real codecs (through the public
// qc_codec_encode / qc_codec_decode), both assignment methods on a synthetic
// transformer-like model, determinism and order independence, edge cases and
// argument checks.
//
// The algorithm is internal (not exported from libqc), so its source is
// compiled into this executable; the codecs it is checked against come from
// the public library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/adapt/adaptive_bits.h"
#include "qc.h"

namespace {

using qc::AdaptConfig;
using qc::AdaptMethod;
using qc::AdaptResult;
using qc::LayerStats;

// Portable random numbers: mt19937_64 is specified bit for bit; the
// conversions are ours (std distributions differ between standard libraries).
struct Rng {
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return static_cast<double>(g() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::mt19937_64 g;
};

struct SynthLayer {
  std::string name;
  uint64_t count;
  double sigma;  // per-element standard deviation of the gradient
};

// A transformer-like model: embeddings, `blocks` blocks of attention / MLP /
// norm parameters, final norm and head. Sizes are divided by `shrink` (and
// kept >= 64) for the small version; scales are log-uniform in 1e-4..1e1.
std::vector<SynthLayer> synthetic_model(int blocks, uint64_t shrink, uint64_t seed) {
  Rng rng(seed);
  std::vector<SynthLayer> m;
  auto add = [&](const std::string& name, uint64_t count) {
    const double scale = std::pow(10.0, -4.0 + 5.0 * rng.uniform());
    m.push_back({name, std::max<uint64_t>(64, count / shrink), scale});
  };
  add("embed.tokens.weight", 4194304);
  add("embed.positions.weight", 65536);
  for (int b = 0; b < blocks; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    add(p + "attn.qkv.weight", 786432);
    add(p + "attn.qkv.bias", 1536);
    add(p + "attn.out.weight", 262144);
    add(p + "mlp.fc1.weight", 1048576);
    add(p + "mlp.fc2.weight", 1048576);
    add(p + "norm.weight", 512);
  }
  add("norm_f.weight", 512);
  add("norm_f.bias", 512);
  add("head.weight", 32768);
  add("head.bias", 64);
  return m;
}

// Statistics from the norm alone (sq_range_sum = 0: the Gaussian estimate).
std::vector<LayerStats> norm_only_stats(const std::vector<SynthLayer>& m) {
  std::vector<LayerStats> s;
  for (const auto& l : m) {
    LayerStats x;
    x.name = l.name;
    x.count = l.count;
    x.sq_norm = static_cast<double>(l.count) * l.sigma * l.sigma;
    s.push_back(x);
  }
  return s;
}

std::vector<float> gaussian(uint64_t count, double sigma, Rng& rng) {
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(sigma * rng.normal());
  return v;
}

// Squared error and message size of one round trip through the public API.
struct Trip {
  double sq_err = 0.0;
  uint64_t bytes = 0;
};
Trip round_trip(const std::vector<float>& x, int bits, qc_codec_t codec = QC_CODEC_MINMAX,
                int bucket = 128) {
  qc_policy_t pol = QC_POLICY_INIT;
  pol.codec = codec;
  pol.bits = bits;
  pol.bucket_size = bucket;
  pol.min_compress_bytes = 0;
  size_t cap = 0;
  EXPECT_EQ(qc_codec_encoded_size(&pol, x.size(), &cap), QC_SUCCESS) << qc_last_error();
  std::vector<uint8_t> buf(cap);
  size_t written = 0;
  EXPECT_EQ(qc_codec_encode(&pol, x.data(), x.size(), QC_DTYPE_FLOAT32, buf.data(), cap, &written),
            QC_SUCCESS)
      << qc_last_error();
  std::vector<float> y(x.size());
  EXPECT_EQ(qc_codec_decode(buf.data(), written, y.data(), y.size(), QC_DTYPE_FLOAT32), QC_SUCCESS)
      << qc_last_error();
  Trip t;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    t.sq_err += d * d;
  }
  t.bytes = written;
  return t;
}

AdaptConfig config(AdaptMethod method, double alpha = 2.0) {
  AdaptConfig c;
  c.method = method;
  c.alpha = alpha;
  return c;
}

AdaptResult run(const std::vector<LayerStats>& layers, const AdaptConfig& c) {
  AdaptResult r;
  const qc::Status s = qc::adapt_bit_widths(layers, c, &r);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return r;
}

const char* method_name(AdaptMethod m) { return m == AdaptMethod::kKmeans ? "kmeans" : "linear"; }

class BothMethods : public ::testing::TestWithParam<AdaptMethod> {};

// ---------------------------------------------------------------------------
// Models against the real codec
// ---------------------------------------------------------------------------

TEST(AdaptiveBitsModel, BytesMatchEncoderExactly) {
  Rng rng(7);
  for (qc_codec_t codec : {QC_CODEC_MINMAX, QC_CODEC_QSGD}) {
    for (uint64_t n : {1ull, 127ull, 128ull, 129ull, 1000ull, 65536ull}) {
      for (int bits : {2, 3, 4, 8}) {
        for (int bucket : {64, 128, 512}) {
          AdaptConfig c;
          c.codec = codec;
          c.bucket_size = bucket;
          const std::vector<float> x = gaussian(n, 1.0, rng);
          EXPECT_EQ(qc::predict_layer_bytes(n, bits, c), round_trip(x, bits, codec, bucket).bytes)
              << "codec " << codec << " n " << n << " bits " << bits << " bucket " << bucket;
        }
      }
    }
  }
}

TEST(AdaptiveBitsModel, MinmaxErrorWithinFactorTwoOfMeasured) {
  Rng rng(11);
  AdaptConfig c;  // minmax, bucket 128, nearest
  for (uint64_t n : {1000ull, 4096ull, 65536ull}) {
    for (double sigma : {1e-3, 1.0, 30.0}) {
      const std::vector<float> x = gaussian(n, sigma, rng);
      const LayerStats measured = qc::layer_stats_from_data("l", x.data(), n, c.bucket_size);
      LayerStats norm_only = measured;
      norm_only.sq_range_sum = 0.0;  // Gaussian range estimate from the norm
      for (int bits : {2, 3, 4, 8}) {
        const double real = round_trip(x, bits).sq_err;
        const double p1 = qc::predict_layer_error(measured, bits, c);
        const double p2 = qc::predict_layer_error(norm_only, bits, c);
        std::printf("n=%llu sigma=%g bits=%d measured/pred(range)=%.3f measured/pred(norm)=%.3f\n",
                    static_cast<unsigned long long>(n), sigma, bits, real / p1, real / p2);
        EXPECT_GT(real, 0.5 * p1) << n << " " << bits;
        EXPECT_LT(real, 2.0 * p1) << n << " " << bits;
        EXPECT_GT(real, 0.5 * p2) << n << " " << bits;
        EXPECT_LT(real, 2.0 * p2) << n << " " << bits;
      }
    }
  }
}

// Widths fall with the error: the model must be strictly decreasing in bits,
// or the search would prefer wide codes for nothing.
TEST(AdaptiveBitsModel, ErrorDecreasesWithBits) {
  for (qc_codec_t codec : {QC_CODEC_MINMAX, QC_CODEC_QSGD}) {
    AdaptConfig c;
    c.codec = codec;
    LayerStats l{"x", 100000, 100000.0, 0.0};
    for (int b = codec == QC_CODEC_QSGD ? 3 : 2; b <= 8; ++b) {
      EXPECT_LT(qc::predict_layer_error(l, b, c), qc::predict_layer_error(l, b - 1, c)) << b;
    }
  }
}

// ---------------------------------------------------------------------------
// The synthetic 60-layer model
// ---------------------------------------------------------------------------

TEST_P(BothMethods, SyntheticModelSavesBytesWithinBudget) {
  const auto model = synthetic_model(9, 1, 2024);
  ASSERT_EQ(model.size(), 60u);
  const auto stats = norm_only_stats(model);
  const AdaptResult r = run(stats, config(GetParam()));
  ASSERT_EQ(r.bits.size(), stats.size());
  const double saving = 1.0 - static_cast<double>(r.predicted_bytes) / r.bytes_at_4;
  std::printf("%s: bytes %llu vs %llu at 4 bits (%.1f%% less), error %.4g vs budget %.4g "
              "(E4 %.4g, ratio %.3f)\n",
              method_name(GetParam()), static_cast<unsigned long long>(r.predicted_bytes),
              static_cast<unsigned long long>(r.bytes_at_4), 100.0 * saving, r.predicted_error,
              r.error_budget, r.e4, r.predicted_error / r.e4);
  std::map<int, int> hist;
  for (int b : r.bits) ++hist[b];
  for (const auto& kv : hist) std::printf("  %d bits: %d layers\n", kv.first, kv.second);
  EXPECT_GE(saving, 0.20);
  EXPECT_LE(r.predicted_error, r.error_budget);
  EXPECT_DOUBLE_EQ(r.error_budget, 2.0 * r.e4);
  EXPECT_GT(hist.size(), 1u) << "a heterogeneous model should get more than one width";
  EXPECT_TRUE(r.note.empty()) << r.note;
  // Recompute the totals from the per-layer models.
  AdaptConfig c = config(GetParam());
  uint64_t bytes = 0;
  double err = 0.0;
  for (size_t i = 0; i < stats.size(); ++i) {
    bytes += qc::predict_layer_bytes(stats[i].count, r.bits[i], c);
    err += qc::predict_layer_error(stats[i], r.bits[i], c);
  }
  EXPECT_EQ(bytes, r.predicted_bytes);
  EXPECT_NEAR(err, r.predicted_error, 1e-9 * r.predicted_error);
}

// The small model (sizes <= 64K) with real data: statistics measured from the
// data, widths chosen, then every layer sent through qc_codec_encode / qc_codec_decode at
// its width and at 4 bits. The measured error must stay within the budget
// measured the same way, and the measured bytes must be the predicted ones.
TEST_P(BothMethods, SmallModelMeasuredErrorWithinBudget) {
  const auto model = synthetic_model(9, 64, 99);
  ASSERT_EQ(model.size(), 60u);
  Rng rng(5);
  std::vector<std::vector<float>> data;
  std::vector<LayerStats> stats;
  for (const auto& l : model) {
    ASSERT_LE(l.count, 65536u);
    data.push_back(gaussian(l.count, l.sigma, rng));
    stats.push_back(qc::layer_stats_from_data(l.name, data.back().data(), l.count, 128));
  }
  const AdaptConfig c = config(GetParam());
  const AdaptResult r = run(stats, c);
  double err = 0.0, err4 = 0.0;
  uint64_t bytes = 0, bytes4 = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    const Trip t = round_trip(data[i], r.bits[i]);
    const Trip t4 = round_trip(data[i], 4);
    err += t.sq_err;
    err4 += t4.sq_err;
    bytes += t.bytes;
    bytes4 += t4.bytes;
  }
  std::printf("%s small: measured bytes %llu vs %llu (%.1f%% less), measured error / measured E4 "
              "= %.3f (alpha 2), predicted ratio %.3f, measured E4 / predicted E4 = %.3f\n",
              method_name(GetParam()), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(bytes4),
              100.0 * (1.0 - static_cast<double>(bytes) / bytes4), err / err4,
              r.predicted_error / r.e4, err4 / r.e4);
  EXPECT_EQ(bytes, r.predicted_bytes);
  EXPECT_EQ(bytes4, r.bytes_at_4);
  EXPECT_LE(err, c.alpha * err4);
  EXPECT_LT(bytes, bytes4);
}

// ---------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------

TEST_P(BothMethods, SameInputSameResult) {
  const auto stats = norm_only_stats(synthetic_model(9, 1, 31));
  const AdaptResult a = run(stats, config(GetParam()));
  const AdaptResult b = run(stats, config(GetParam()));
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.predicted_bytes, b.predicted_bytes);
  EXPECT_EQ(a.predicted_error, b.predicted_error);  // bit for bit
  EXPECT_EQ(a.e4, b.e4);
}

TEST_P(BothMethods, InputOrderDoesNotMatter) {
  const auto stats = norm_only_stats(synthetic_model(9, 1, 31));
  const AdaptResult a = run(stats, config(GetParam()));
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < stats.size(); ++i) by_name[stats[i].name] = a.bits[i];

  Rng rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<LayerStats> p = stats;
    if (trial == 0) {
      std::reverse(p.begin(), p.end());
    } else {
      for (size_t i = p.size() - 1; i > 0; --i) std::swap(p[i], p[rng.g() % (i + 1)]);
    }
    const AdaptResult b = run(p, config(GetParam()));
    for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(b.bits[i], by_name[p[i].name]) << p[i].name;
    EXPECT_EQ(a.predicted_error, b.predicted_error);
    EXPECT_EQ(a.predicted_bytes, b.predicted_bytes);
    EXPECT_EQ(a.e4, b.e4);
  }
}

// ---------------------------------------------------------------------------
// Edge cases
// ---------------------------------------------------------------------------

TEST_P(BothMethods, ZeroLayers) {
  const AdaptResult r = run({}, config(GetParam()));
  EXPECT_TRUE(r.bits.empty());
  EXPECT_EQ(r.predicted_bytes, 0u);
  EXPECT_EQ(r.bytes_at_4, 0u);
  EXPECT_EQ(r.predicted_error, 0.0);
}

TEST_P(BothMethods, OneLayerStaysAtFourBits) {
  // Alone, 3 bits costs (15/7)^2 = 4.6x the 4-bit error > alpha = 2.
  const AdaptResult r = run({{"w", 1 << 20, 1e3, 0.0}}, config(GetParam()));
  ASSERT_EQ(r.bits.size(), 1u);
  EXPECT_EQ(r.bits[0], 4);
  EXPECT_EQ(r.predicted_bytes, r.bytes_at_4);
  // With a budget of 5x E4, 3 bits fits and is smaller.
  const AdaptResult r5 = run({{"w", 1 << 20, 1e3, 0.0}}, config(GetParam(), 5.0));
  EXPECT_EQ(r5.bits[0], 3);
  EXPECT_LE(r5.predicted_error, r5.error_budget);
}

TEST_P(BothMethods, ZeroSizeAndZeroNormLayersGetNarrowestWidth) {
  std::vector<LayerStats> s = {{"big", 1 << 20, 1e3, 0.0},
                               {"empty", 0, 0.0, 0.0},
                               {"zero", 4096, 0.0, 0.0}};
  const AdaptResult r = run(s, config(GetParam()));
  EXPECT_EQ(r.bits[0], 4);
  EXPECT_EQ(r.bits[1], 2);
  EXPECT_EQ(r.bits[2], 2);
  EXPECT_EQ(qc::predict_layer_bytes(0, 2, config(GetParam())), 32u);  // a header alone
  EXPECT_LE(r.predicted_error, r.error_budget);
  // Only an empty layer: nothing to lose.
  const AdaptResult e = run({{"empty", 0, 0.0, 0.0}}, config(GetParam()));
  EXPECT_EQ(e.bits, std::vector<int>{2});
  EXPECT_EQ(e.e4, 0.0);
  EXPECT_EQ(e.predicted_error, 0.0);
}

TEST_P(BothMethods, IdenticalLayers) {
  std::vector<LayerStats> s;
  for (int i = 0; i < 10; ++i) s.push_back({"l" + std::to_string(i), 65536, 65536.0, 0.0});
  const AdaptResult r = run(s, config(GetParam()));
  EXPECT_LE(r.predicted_error, r.error_budget);
  EXPECT_LE(r.predicted_bytes, r.bytes_at_4);
  if (GetParam() == AdaptMethod::kKmeans) {
    // One cluster, one width; uniform 3 bits would be 4.6x E4.
    for (int b : r.bits) EXPECT_EQ(b, 4);
  } else {
    // Budget E4 extra: (4.59 - 1) = 3.59 E_l per layer moved to 3 bits, so two
    // layers fit (in name order), a third would not.
    EXPECT_EQ(std::count(r.bits.begin(), r.bits.end(), 3), 2);
    EXPECT_EQ(std::count(r.bits.begin(), r.bits.end(), 4), 8);
  }
}

TEST_P(BothMethods, OnlyFourAllowed) {
  AdaptConfig c = config(GetParam());
  c.allowed_bits = {4};
  const auto stats = norm_only_stats(synthetic_model(9, 1, 1));
  const AdaptResult r = run(stats, c);
  for (int b : r.bits) EXPECT_EQ(b, 4);
  EXPECT_EQ(r.predicted_bytes, r.bytes_at_4);
  EXPECT_EQ(r.predicted_error, r.e4);
}

TEST_P(BothMethods, AlphaOneNeverWorseThanUniformFour) {
  const auto stats = norm_only_stats(synthetic_model(9, 1, 77));
  const AdaptResult r = run(stats, config(GetParam(), 1.0));
  EXPECT_LE(r.predicted_bytes, r.bytes_at_4);
  EXPECT_LE(r.predicted_error, r.e4);
  EXPECT_EQ(r.error_budget, r.e4);
}

TEST_P(BothMethods, WithoutFourFallsBackToFeasibleUniform) {
  const auto stats = norm_only_stats(synthetic_model(9, 1, 5));
  AdaptConfig c = config(GetParam());
  c.allowed_bits = {8, 2};
  const AdaptResult r = run(stats, c);
  EXPECT_FALSE(r.note.empty());
  EXPECT_LE(r.predicted_error, r.error_budget);
  for (int b : r.bits) EXPECT_TRUE(b == 2 || b == 8) << b;

  // {1, 2}: even uniform 2 bits is 25x E4 > 2 E4; the widest is used and the
  // note says the budget is not met.
  c.allowed_bits = {1, 2};
  const AdaptResult w = run(stats, c);
  for (int b : w.bits) EXPECT_EQ(b, 2);
  EXPECT_GT(w.predicted_error, w.error_budget);
  EXPECT_NE(w.note.find("no allowed width"), std::string::npos) << w.note;
}

TEST_P(BothMethods, QsgdCodec) {
  const auto stats = norm_only_stats(synthetic_model(9, 1, 2024));
  AdaptConfig c = config(GetParam());
  c.codec = QC_CODEC_QSGD;
  const AdaptResult r = run(stats, c);
  EXPECT_LE(r.predicted_error, r.error_budget);
  EXPECT_LT(r.predicted_bytes, r.bytes_at_4);
}

INSTANTIATE_TEST_SUITE_P(Methods, BothMethods,
                         ::testing::Values(AdaptMethod::kKmeans, AdaptMethod::kLinear),
                         [](const ::testing::TestParamInfo<AdaptMethod>& i) {
                           return std::string(method_name(i.param));
                         });

// ---------------------------------------------------------------------------
// Argument checks
// ---------------------------------------------------------------------------

void expect_invalid(const std::vector<LayerStats>& layers, const AdaptConfig& c,
                    const std::string& needle) {
  AdaptResult r;
  const qc::Status s = qc::adapt_bit_widths(layers, c, &r);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(AdaptiveBitsArgs, InvalidConfigs) {
  const std::vector<LayerStats> one = {{"w", 1000, 1.0, 0.0}};
  AdaptConfig c;
  c.allowed_bits = {};
  expect_invalid(one, c, "allowed_bits is empty");
  c.allowed_bits = {2, 0};
  expect_invalid(one, c, "allowed_bits holds 0");
  c.allowed_bits = {9};
  expect_invalid(one, c, "allowed_bits holds 9");
  c = AdaptConfig();
  c.codec = QC_CODEC_QSGD;
  c.allowed_bits = {1, 4};
  expect_invalid(one, c, "allowed_bits holds 1");
  c = AdaptConfig();
  c.alpha = 0.5;
  expect_invalid(one, c, "alpha");
  c.alpha = std::nan("");
  expect_invalid(one, c, "alpha");
  c = AdaptConfig();
  c.bucket_size = 0;
  expect_invalid(one, c, "bucket_size");
  c = AdaptConfig();
  c.codec = QC_CODEC_TOPK;
  expect_invalid(one, c, "codec");
  c = AdaptConfig();
  c.headroom = 1.0;
  expect_invalid(one, c, "headroom");
  c.headroom = -0.1;
  expect_invalid(one, c, "headroom");
  c = AdaptConfig();
  c.kmeans_iterations = 0;
  expect_invalid(one, c, "kmeans_iterations");
  expect_invalid({{"w", 10, -1.0, 0.0}}, AdaptConfig(), "layers[0] ('w').sq_norm");
  expect_invalid({{"a", 10, 1.0, 0.0}, {"b", 10, 1.0, std::nan("")}}, AdaptConfig(),
                 "layers[1] ('b').sq_range_sum");
  // Zero layers with a bad config is still an error.
  c = AdaptConfig();
  c.allowed_bits = {};
  expect_invalid({}, c, "allowed_bits");
  EXPECT_EQ(qc::adapt_bit_widths(one, AdaptConfig(), nullptr).code(), QC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
