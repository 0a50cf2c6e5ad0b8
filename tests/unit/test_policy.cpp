// Per-layer policies: pattern resolution as documented in qc.h and layers
// with different algorithms used alternately on one group.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

using namespace qct;

namespace {

qc_policy_t seeded(uint64_t seed, qc_algorithm_t algo = QC_ALGO_AUTO) {
  qc_policy_t p = make_policy(algo);
  p.seed = seed;
  return p;
}

uint64_t resolved_seed(qc_comm_t c, const char* layer) {
  qc_policy_t p = QC_POLICY_INIT;
  p.seed = 0xDEADBEEF;
  const qc_status_t s = qc_comm_get_layer_policy(c, layer, &p);
  EXPECT_EQ(s, QC_SUCCESS) << "layer " << (layer ? layer : "(null)") << ": " << qc_last_error();
  return p.seed;
}

TEST(LayerPolicy, DefaultIsPolicyInit) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  const qc_policy_t init = QC_POLICY_INIT;
  for (const char* layer : {static_cast<const char*>(nullptr), "*", "anything", ""}) {
    qc_policy_t p;
    std::memset(&p, 0xFF, sizeof p);
    p.struct_size = sizeof p;
    ASSERT_EQ(qc_comm_get_layer_policy(g[0], layer, &p), QC_SUCCESS) << qc_last_error();
    EXPECT_EQ(p.codec, init.codec);
    EXPECT_EQ(p.bits, init.bits);
    EXPECT_EQ(p.bucket_size, init.bucket_size);
    EXPECT_EQ(p.rounding, init.rounding);
    EXPECT_EQ(p.algorithm, init.algorithm);
    EXPECT_EQ(p.error_feedback, init.error_feedback);
    EXPECT_EQ(p.group_size, init.group_size);
    EXPECT_EQ(p.topk_ratio, init.topk_ratio);
    EXPECT_EQ(p.scale_update_period, init.scale_update_period);
    EXPECT_EQ(p.seed, init.seed);
  }
}

TEST(LayerPolicy, ResolutionOrder) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_comm_t c = g[0];
  auto set = [&](const char* pat, uint64_t seed) {
    const qc_policy_t p = seeded(seed);
    ASSERT_EQ(qc_comm_set_layer_policy(c, pat, &p), QC_SUCCESS) << pat << ": " << qc_last_error();
  };
  set("*", 1);
  set("emb_*", 2);       // 4 literal chars
  set("emb_user", 3);    // exact
  set("emb_u*", 4);      // 5 literal chars
  set("?mb_*", 5);       // 3 literal chars
  set("*_bias", 6);      // 5 literal chars
  set("layer?.w", 7);    // 7 literal chars

  EXPECT_EQ(resolved_seed(c, nullptr), 1u);
  EXPECT_EQ(resolved_seed(c, "mlp.0.weight"), 1u);
  EXPECT_EQ(resolved_seed(c, "emb_user"), 3u);      // exact beats every glob
  EXPECT_EQ(resolved_seed(c, "emb_users"), 4u);     // emb_u* more literal than emb_*
  EXPECT_EQ(resolved_seed(c, "emb_item"), 2u);      // emb_* beats ?mb_* and *
  EXPECT_EQ(resolved_seed(c, "xmb_item"), 5u);      // only ?mb_* and *
  EXPECT_EQ(resolved_seed(c, "emb_"), 2u);          // '*' matches the empty run
  EXPECT_EQ(resolved_seed(c, "mb_x"), 1u);          // '?' needs one character
  EXPECT_EQ(resolved_seed(c, "fc_bias"), 6u);
  EXPECT_EQ(resolved_seed(c, "layer3.w"), 7u);
  EXPECT_EQ(resolved_seed(c, "layer33.w"), 1u);     // '?' is exactly one character
  EXPECT_EQ(resolved_seed(c, "layer3.wx"), 1u);     // globs match the whole name
  // emb_u* (5 literal) vs *_bias (5 literal) for "emb_u_bias": equally specific,
  // the one set last wins.
  EXPECT_EQ(resolved_seed(c, "emb_u_bias"), 6u);

  // Setting a pattern again replaces its policy.
  set("emb_*", 22);
  EXPECT_EQ(resolved_seed(c, "emb_item"), 22u);
  set("*", 11);
  EXPECT_EQ(resolved_seed(c, "other"), 11u);
  EXPECT_EQ(resolved_seed(c, nullptr), 11u);
}

TEST(LayerPolicy, TiesGoToTheLastSet) {
  // Two equally specific globs that both match "emb_user": 7 literal chars each.
  for (int order = 0; order < 2; ++order) {
    Group g(1);
    ASSERT_TRUE(g.ok());
    const qc_policy_t a = seeded(100), b = seeded(200);
    const char* pa = "emb_?ser";
    const char* pb = "emb_use*";
    if (order == 0) {
      ASSERT_EQ(qc_comm_set_layer_policy(g[0], pa, &a), QC_SUCCESS);
      ASSERT_EQ(qc_comm_set_layer_policy(g[0], pb, &b), QC_SUCCESS);
      EXPECT_EQ(resolved_seed(g[0], "emb_user"), 200u);
    } else {
      ASSERT_EQ(qc_comm_set_layer_policy(g[0], pb, &b), QC_SUCCESS);
      ASSERT_EQ(qc_comm_set_layer_policy(g[0], pa, &a), QC_SUCCESS);
      EXPECT_EQ(resolved_seed(g[0], "emb_user"), 100u);
    }
  }
}

TEST(LayerPolicy, InvalidPoliciesAreRejected) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  struct Bad {
    const char* what;
    void (*mutate)(qc_policy_t&);
  };
  const Bad bad[] = {
      {"bits 0", [](qc_policy_t& p) { p.bits = 0; }},
      {"bits 9", [](qc_policy_t& p) { p.bits = 9; }},
      {"bucket 0", [](qc_policy_t& p) { p.bucket_size = 0; }},
      {"group_size 0", [](qc_policy_t& p) { p.group_size = 0; }},
      {"error_feedback 2", [](qc_policy_t& p) { p.error_feedback = 2; }},
      {"topk_ratio 0", [](qc_policy_t& p) { p.topk_ratio = 0.0f; }},
      {"topk_ratio 1.5", [](qc_policy_t& p) { p.topk_ratio = 1.5f; }},
      {"topk_ratio NaN", [](qc_policy_t& p) { p.topk_ratio = NAN; }},
      {"scale_update_period 0", [](qc_policy_t& p) { p.scale_update_period = 0; }},
      {"codec 99", [](qc_policy_t& p) { p.codec = static_cast<qc_codec_t>(99); }},
      {"algorithm 99", [](qc_policy_t& p) { p.algorithm = static_cast<qc_algorithm_t>(99); }},
      {"rounding 7", [](qc_policy_t& p) { p.rounding = static_cast<qc_rounding_t>(7); }},
  };
  for (const auto& b : bad) {
    qc_policy_t p = seeded(9);
    b.mutate(p);
    EXPECT_EQ(qc_comm_set_layer_policy(g[0], "x*", &p), QC_ERROR_INVALID_ARGUMENT) << b.what;
    EXPECT_STRNE(qc_last_error(), "") << b.what;
  }
  // Nothing was stored.
  EXPECT_EQ(resolved_seed(g[0], "xyz"), 0u);
  qc_policy_t p = QC_POLICY_INIT;
  EXPECT_EQ(qc_comm_set_layer_policy(g[0], nullptr, &p), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_set_layer_policy(g[0], "*", nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_set_layer_policy(nullptr, "*", &p), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_get_layer_policy(g[0], "*", nullptr), QC_ERROR_INVALID_ARGUMENT);
}

// "emb_*" -> ring, "*" -> tree, used alternately on one group: every result is
// bit-identical to an emulated run with that layer's algorithm.
TEST(LayerPolicy, TwoLayersAlternateOnOneGroup) {
  const int n = 5;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(QC_ALGO_TREE)), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("emb_*", make_policy(QC_ALGO_RING)), QC_SUCCESS);
  {
    qc_policy_t p = QC_POLICY_INIT;
    ASSERT_EQ(qc_comm_get_layer_policy(g[3], "emb_table", &p), QC_SUCCESS);
    EXPECT_EQ(p.algorithm, QC_ALGO_RING);
    ASSERT_EQ(qc_comm_get_layer_policy(g[3], "mlp.1", &p), QC_SUCCESS);
    EXPECT_EQ(p.algorithm, QC_ALGO_TREE);
  }
  const int kCalls = 8;
  std::vector<std::vector<std::vector<float>>> in(kCalls);
  std::vector<std::vector<Bytes>> bytes(kCalls);
  std::vector<size_t> counts(kCalls);
  for (int k = 0; k < kCalls; ++k) {
    counts[k] = 1000 + 37 * k;
    in[k] = random_inputs(n, counts[k], 900 + k);
    bytes[k] = encode_all(in[k], QC_DTYPE_FLOAT32);
  }
  std::vector<std::vector<Bytes>> out(kCalls, std::vector<Bytes>(n));
  std::vector<std::vector<qc_status_t>> status(kCalls, std::vector<qc_status_t>(n, QC_SUCCESS));
  run_ranks(n, [&](int r) {
    for (int k = 0; k < kCalls; ++k) {
      const char* layer = k % 2 == 0 ? "emb_user" : "mlp.0.weight";
      out[k][r].assign(counts[k] * 4, 0);
      status[k][r] = qc_allreduce(g[r], bytes[k][r].data(), out[k][r].data(), counts[k],
                                  QC_DTYPE_FLOAT32, QC_OP_SUM, layer, nullptr, nullptr);
      if (status[k][r] != QC_SUCCESS) return;
    }
  });
  for (int k = 0; k < kCalls; ++k) {
    SCOPED_TRACE("call " + std::to_string(k));
    for (int r = 0; r < n; ++r) ASSERT_EQ(status[k][r], QC_SUCCESS) << "rank " << r;
    EXPECT_TRUE(replicas_identical(out[k]));
    EXPECT_TRUE(within_sum_bound(in[k], decode(out[k][0], QC_DTYPE_FLOAT32), QC_OP_SUM,
                                 unit_roundoff(QC_DTYPE_FLOAT32)));
    const qc_algorithm_t algo = k % 2 == 0 ? QC_ALGO_RING : QC_ALGO_TREE;
    const auto emu =
        allreduce_emulate(n, bytes[k], counts[k], QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy(algo));
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    EXPECT_TRUE(bytes_equal(emu.out[0], out[k][0], "layer result vs emulated algorithm"))
        << "expected " << algo_name(algo);
  }
}

// A policy changed between calls applies from the next collective on.
TEST(LayerPolicy, ChangeAppliesToNextCollective) {
  const int n = 8;
  const size_t count = 4097;
  const auto in = random_inputs(n, count, 4711);
  const auto bytes = encode_all(in, QC_DTYPE_FLOAT32);
  Group g(n);
  ASSERT_TRUE(g.ok());
  std::vector<Bytes> first(n, Bytes(count * 4)), second(n, Bytes(count * 4));
  std::vector<qc_status_t> s1(n), s2(n);
  run_ranks(n, [&](int r) {
    const qc_policy_t ring = make_policy(QC_ALGO_RING), sra = make_policy(QC_ALGO_SRA);
    qc_comm_set_layer_policy(g[r], "w", &ring);
    s1[r] = qc_allreduce(g[r], bytes[r].data(), first[r].data(), count, QC_DTYPE_FLOAT32,
                         QC_OP_SUM, "w", nullptr, nullptr);
    qc_comm_set_layer_policy(g[r], "w", &sra);
    s2[r] = qc_allreduce(g[r], bytes[r].data(), second[r].data(), count, QC_DTYPE_FLOAT32,
                         QC_OP_SUM, "w", nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(s1[r], QC_SUCCESS);
    ASSERT_EQ(s2[r], QC_SUCCESS);
  }
  const auto ring = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                      make_policy(QC_ALGO_RING));
  const auto sra = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                     make_policy(QC_ALGO_SRA));
  ASSERT_EQ(ring.status, QC_SUCCESS);
  ASSERT_EQ(sra.status, QC_SUCCESS);
  EXPECT_TRUE(bytes_equal(ring.out[0], first[0], "first call vs ring"));
  EXPECT_TRUE(bytes_equal(sra.out[0], second[0], "second call vs SRA"));
}

// ===========================================================================
// min_compress_bytes: a message below it goes with codec none (exact), one
// at or above it with the layer's codec; for alltoall a block counts.
// ===========================================================================
// For each count: `policy` on 3 ranks gives exactly what `exact` gives when
// the message is below policy.min_compress_bytes, and something else (its
// own codec) at or above it.
void expect_uncompressed_below_threshold(const qc_policy_t& policy, const qc_policy_t& exact,
                                         std::initializer_list<size_t> counts, uint64_t seed,
                                         const char* below, const char* at) {
  const int n = 3;
  for (size_t count : counts) {
    SCOPED_TRACE("count " + std::to_string(count));
    const auto bytes = encode_all(random_inputs(n, count, seed), QC_DTYPE_FLOAT32);
    const auto a = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, policy);
    const auto b = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, exact);
    ASSERT_EQ(a.status, QC_SUCCESS) << a.error;
    ASSERT_EQ(b.status, QC_SUCCESS) << b.error;
    if (count * 4 < policy.min_compress_bytes) {
      EXPECT_EQ(a.out[0], b.out[0]) << below;
    } else {
      EXPECT_NE(a.out[0], b.out[0]) << at;
    }
  }
}

// Error feedback on a codec that is not contractive (docs/policies.md) is
// legal but diverges: setting such a policy prints one warning line, any
// other policy none. QC_DEBUG is unset in tests, so warnings go to stderr.
std::string stderr_of_setting(qc_comm_t c, const char* pattern, const qc_policy_t& p,
                              qc_status_t* status) {
  ::testing::internal::CaptureStderr();
  *status = qc_comm_set_layer_policy(c, pattern, &p);
  return ::testing::internal::GetCapturedStderr();
}

TEST(LayerPolicy, DivergingErrorFeedbackIsWarnedAbout) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  struct Case {
    qc_codec_t codec;
    int bits, bucket, ef;
    bool warned;
  };
  // qsgd is contractive for buckets under M^2 = (2^(bits-1) - 1)^2 elements:
  // 49 at 4 bits, 9 at 3 bits, never at 2 bits (M = 1).
  const Case cases[] = {
      {QC_CODEC_QSGD, 4, 128, 1, true},          {QC_CODEC_QSGD, 4, 49, 1, true},
      {QC_CODEC_QSGD, 4, 48, 1, false},          {QC_CODEC_QSGD, 3, 9, 1, true},
      {QC_CODEC_QSGD, 3, 8, 1, false},           {QC_CODEC_QSGD, 2, 1, 1, true},
      {QC_CODEC_QSGD, 8, 128, 1, false},         {QC_CODEC_QSGD, 4, 128, 0, false},
      {QC_CODEC_GLOBAL_LINEAR, 5, 128, 1, true}, {QC_CODEC_GLOBAL_EXP, 8, 1, 1, true},
      {QC_CODEC_GLOBAL_LINEAR, 5, 128, 0, false}, {QC_CODEC_MINMAX, 2, 128, 1, false},
      {QC_CODEC_ONEBIT, 1, 128, 1, false},       {QC_CODEC_TOPK, 4, 128, 1, false},
      {QC_CODEC_NONE, 4, 128, 1, false}};
  for (const Case& c : cases) {
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.bits = c.bits;
    p.bucket_size = c.bucket;
    p.error_feedback = c.ef;
    qc_status_t s;
    const std::string log = stderr_of_setting(g[0], "enc.*", p, &s);
    SCOPED_TRACE("codec " + std::to_string(c.codec) + " bits " + std::to_string(c.bits) +
                 " bucket " + std::to_string(c.bucket) + " ef " + std::to_string(c.ef) +
                 "; stderr: " + log);
    ASSERT_EQ(s, QC_SUCCESS) << qc_last_error();
    if (c.warned) {
      EXPECT_NE(log.find("] warning: layer pattern \"enc.*\": error feedback with"),
                std::string::npos);
      EXPECT_NE(log.find("docs/policies.md"), std::string::npos);
    } else {
      EXPECT_EQ(log, "");
    }
    qc_policy_t got = QC_POLICY_INIT;
    ASSERT_EQ(qc_comm_get_layer_policy(g[0], "enc.0", &got), QC_SUCCESS);
    EXPECT_EQ(got.error_feedback, c.ef) << "the policy is set all the same";
  }
}

TEST(LayerPolicy, DivergingErrorFeedbackFromTheEnvironmentIsWarnedAbout) {
  ::setenv("QC_CODEC", "qsgd", 1);
  ::setenv("QC_BITS", "4", 1);
  ::setenv("QC_BUCKET", "512", 1);
  ::setenv("QC_EF", "1", 1);
  ::testing::internal::CaptureStderr();
  {
    Group g(1);
    EXPECT_TRUE(g.ok());
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (const char* v : {"QC_CODEC", "QC_BITS", "QC_BUCKET", "QC_EF"}) ::unsetenv(v);
  EXPECT_NE(log.find("] warning: the QC_* environment's default policy: error feedback with "
                     "qsgd with 4 bits and buckets of 512 elements is not contractive"),
            std::string::npos)
      << log;
}

TEST(MinCompressBytes, SmallMessagesGoUncompressed) {
  const int n = 3;
  qc_policy_t lossy = make_policy(QC_ALGO_RING);
  lossy.codec = QC_CODEC_MINMAX;
  lossy.bits = 2;
  lossy.min_compress_bytes = 4096;
  expect_uncompressed_below_threshold(lossy, make_policy(QC_ALGO_RING), {1023, 1024}, 5,
                                      "below the threshold the sum is exact",
                                      "at the threshold the 2-bit codec applies");
  // Alltoall: 1023-float blocks go uncompressed.
  std::vector<Bytes> in = encode_all(random_inputs(n, n * 1023, 6), QC_DTYPE_FLOAT32);
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("emb", lossy), QC_SUCCESS);
  const auto res = alltoall_on(g, in, 1023, QC_DTYPE_FLOAT32, "emb");
  ASSERT_TRUE(res.all_ok()) << res.describe();
  for (int dst = 0; dst < n; ++dst)
    for (int src = 0; src < n; ++src)
      EXPECT_EQ(0, std::memcmp(res.out[dst].data() + src * 1023 * 4,
                               in[src].data() + dst * 1023 * 4, 1023 * 4));
}

// A global codec with algorithm native: a message below the threshold has no
// shared grid, so it goes uncompressed with AUTO's algorithm (found by
// tests/soak: it used to fail as UNSUPPORTED on the local transport, which
// has no float sum), and exactly like codec none; at the threshold the
// native integer sum applies again.
TEST(MinCompressBytes, NativeGlobalCodecBelowTheThresholdFallsBackToAuto) {
  const int n = 3;
  qc_policy_t native = make_policy(QC_ALGO_NATIVE);
  native.codec = QC_CODEC_GLOBAL_LINEAR;
  native.bits = 4;
  native.min_compress_bytes = 4096;
  expect_uncompressed_below_threshold(native, make_policy(QC_ALGO_AUTO), {1000, 1024}, 9,
                                      "below the threshold: codec none, AUTO's algorithm",
                                      "at the threshold the 4-bit global grid applies");
  // codec none with native, asked for explicitly, stays unsupported here.
  qc_policy_t none_native = make_policy(QC_ALGO_NATIVE);
  const auto bytes = encode_all(random_inputs(n, 100, 10), QC_DTYPE_FLOAT32);
  const auto c = allreduce_emulate(n, bytes, 100, QC_DTYPE_FLOAT32, QC_OP_SUM, none_native);
  EXPECT_EQ(c.status, QC_ERROR_UNSUPPORTED) << c.error;
}

TEST(MinCompressBytes, OlderStructSizeGetsTheDefault) {
  // A program built before the field existed passes the first layout's size.
  qc_policy_t p = QC_POLICY_INIT;
  p.struct_size = offsetof(qc_policy_t, min_compress_bytes);
  p.codec = QC_CODEC_MINMAX;
  p.min_compress_bytes = 12345;  // beyond its struct_size: must be ignored
  Group g(1);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "x", &p), QC_SUCCESS) << qc_last_error();
  qc_policy_t back = QC_POLICY_INIT;
  ASSERT_EQ(qc_comm_get_layer_policy(g[0], "x", &back), QC_SUCCESS);
  EXPECT_EQ(back.codec, QC_CODEC_MINMAX);
  EXPECT_EQ(back.min_compress_bytes, 16384u);
  p.struct_size = offsetof(qc_policy_t, min_compress_bytes) - 1;
  EXPECT_EQ(qc_comm_set_layer_policy(g[0], "x", &p), QC_ERROR_INVALID_ARGUMENT);
}

}  // namespace

namespace {

// qc_codec_encode of x with policy p: the whole message.
std::vector<uint8_t> encode_message(const qc_policy_t& p, const std::vector<float>& x) {
  std::vector<uint8_t> msg(1 << 16);
  size_t written = 0;
  EXPECT_EQ(qc_codec_encode(&p, x.data(), x.size(), QC_DTYPE_FLOAT32, msg.data(), msg.size(),
                            &written),
            QC_SUCCESS)
      << qc_last_error();
  msg.resize(written);
  return msg;
}

}  // namespace

// QC_ROUND_AUTO, the default: the global codecs dither (paper 002), the
// others round to nearest; an explicit rounding is kept. What a codec did
// is bit 0 of the wire header's flags (offset 12, docs/wire-format.md).
TEST(Rounding, AutoIsStochasticForTheGlobalCodecsOnly) {
  const qc_policy_t init = QC_POLICY_INIT;
  EXPECT_EQ(init.rounding, QC_ROUND_AUTO);
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  auto stochastic_flag = [&](qc_codec_t codec, qc_rounding_t rounding) {
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = codec;
    p.rounding = rounding;
    p.min_compress_bytes = 0;
    return (encode_message(p, x)[12] & 1) != 0;
  };
  for (qc_codec_t codec : {QC_CODEC_MINMAX, QC_CODEC_QSGD, QC_CODEC_ONEBIT, QC_CODEC_GLOBAL_LINEAR,
                           QC_CODEC_GLOBAL_EXP}) {
    SCOPED_TRACE(qc_codec_name(codec));
    const bool global = codec == QC_CODEC_GLOBAL_LINEAR || codec == QC_CODEC_GLOBAL_EXP;
    EXPECT_EQ(stochastic_flag(codec, QC_ROUND_AUTO), global);
    EXPECT_FALSE(stochastic_flag(codec, QC_ROUND_NEAREST_EVEN));
    EXPECT_EQ(stochastic_flag(codec, QC_ROUND_STOCHASTIC), codec != QC_CODEC_ONEBIT);
  }
  qc_rounding_t r = QC_ROUND_NEAREST_EVEN;
  ASSERT_EQ(qc_rounding_from_name("auto", &r), QC_SUCCESS);
  EXPECT_EQ(r, QC_ROUND_AUTO);
  EXPECT_STREQ(qc_rounding_name(QC_ROUND_AUTO), "auto");
}

// policy.scale: the global codecs' message carries max |x| (auto, max_abs;
// flags bit 1) or the L2 norm (l2) as its float32 scale (offset 32); the
// other codecs ignore the field.
TEST(Scale, GlobalCodecsCarryTheChosenScale) {
  const qc_policy_t init = QC_POLICY_INIT;
  EXPECT_EQ(init.scale, QC_SCALE_AUTO);
  std::vector<float> x(1000);
  double sq = 0;
  float max_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i)) * (i == 500 ? 9.0f : 1.0f);
    sq += static_cast<double>(x[i]) * x[i];
    max_abs = std::max(max_abs, std::fabs(x[i]));
  }
  for (qc_codec_t codec : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP}) {
    for (qc_scale_t scale : {QC_SCALE_AUTO, QC_SCALE_L2, QC_SCALE_MAX_ABS}) {
      SCOPED_TRACE(std::string(qc_codec_name(codec)) + " " + qc_scale_name(scale));
      qc_policy_t p = QC_POLICY_INIT;
      p.codec = codec;
      p.bits = 8;
      p.scale = scale;
      p.min_compress_bytes = 0;
      const std::vector<uint8_t> msg = encode_message(p, x);
      ASSERT_GT(msg.size(), 36u);
      const size_t written = msg.size();
      float carried;
      std::memcpy(&carried, msg.data() + 32, sizeof carried);
      const bool by_max = scale != QC_SCALE_L2;
      EXPECT_EQ((msg[12] & 2) != 0, by_max);
      if (by_max) {
        EXPECT_EQ(carried, max_abs);
      } else {
        EXPECT_NEAR(carried, std::sqrt(sq), 1e-4 * std::sqrt(sq));
      }
      // Decoding does not depend on the flag: the values are within one
      // level gap of x, and the max-abs grid is the finer one.
      std::vector<float> y(x.size());
      ASSERT_EQ(qc_codec_decode(msg.data(), written, y.data(), y.size(), QC_DTYPE_FLOAT32),
                QC_SUCCESS)
          << qc_last_error();
      if (codec == QC_CODEC_GLOBAL_LINEAR) {
        for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(y[i] - x[i]), carried / 127.0f);
      }
    }
  }
  qc_policy_t bad = QC_POLICY_INIT;
  bad.scale = static_cast<qc_scale_t>(3);
  size_t bytes = 0;
  EXPECT_EQ(qc_codec_encoded_size(&bad, 10, &bytes), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("field 'scale' is 3"), std::string::npos);
}

// The max-abs scale's limits (cpu/codec_kernels.h): below 2^-120 it is sent
// as 0 (everything decodes to 0: global_linear's M / scale would overflow),
// above 2^127 the message is NaN (level M would decode past FLT_MAX).
TEST(Scale, MaxAbsScaleLimits) {
  for (qc_codec_t codec : {QC_CODEC_GLOBAL_LINEAR, QC_CODEC_GLOBAL_EXP}) {
    SCOPED_TRACE(qc_codec_name(codec));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = codec;
    p.min_compress_bytes = 0;
    for (float magnitude : {1e-39f, 3e38f, 1e38f}) {
      const std::vector<float> x = {magnitude, -magnitude / 2, 0.0f, magnitude / 3};
      const std::vector<uint8_t> msg = encode_message(p, x);
      ASSERT_GT(msg.size(), 36u);
      std::vector<float> y(x.size(), 7.0f);
      ASSERT_EQ(qc_codec_decode(msg.data(), msg.size(), y.data(), y.size(), QC_DTYPE_FLOAT32),
                QC_SUCCESS)
          << qc_last_error();
      for (size_t i = 0; i < y.size(); ++i) {
        if (magnitude < 1e-37f) {
          EXPECT_EQ(y[i], 0.0f) << i;
        } else if (magnitude > 0x1p127f) {
          EXPECT_TRUE(std::isnan(y[i])) << i;
        } else {
          EXPECT_TRUE(std::isfinite(y[i])) << i;
          EXPECT_LE(std::fabs(y[i]), magnitude) << i;
        }
      }
    }
  }
}
