// qc_allreduce_segments: one collective over a flat buffer of several
// layers, each with its own policy (paper 004 §4.2 fused buffers).
#include "test_util.h"

using namespace qct;

namespace {

struct FusedRun {
  std::vector<qc_status_t> status;
  std::vector<std::vector<float>> out;
  bool all_ok() const {
    return std::all_of(status.begin(), status.end(), [](qc_status_t s) { return s == QC_SUCCESS; });
  }
};

// Every rank passes in[r] (the concatenated segments) with these counts/layers.
FusedRun fused_on(Group& g, const std::vector<std::vector<float>>& in,
                  const std::vector<size_t>& counts, const std::vector<const char*>& layers,
                  std::vector<qc_error_buffer_t>* ebs = nullptr,
                  const std::vector<std::vector<size_t>>* per_rank_counts = nullptr) {
  const int n = g.size();
  FusedRun res;
  res.status.assign(n, QC_ERROR_INTERNAL);
  res.out.assign(n, {});
  run_ranks(n, [&](int r) {
    const std::vector<size_t>& c = per_rank_counts ? (*per_rank_counts)[r] : counts;
    res.out[r].assign(in[r].size(), -7.0f);
    res.status[r] = qc_allreduce_segments(g[r], in[r].data(), res.out[r].data(), c.size(),
                                          c.data(), layers.data(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                                          ebs ? (*ebs)[r] : nullptr, nullptr);
  });
  return res;
}

std::vector<float> exact_sum(const std::vector<std::vector<float>>& in) {
  std::vector<float> s(in[0].size(), 0.0f);
  for (const auto& v : in)
    for (size_t i = 0; i < v.size(); ++i) s[i] += v[i];
  return s;
}

// Small integers: every sum is exact in float32 whatever the order.
std::vector<std::vector<float>> integer_inputs(int n, size_t count, int salt) {
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) in[r][i] = float(int((i * 7 + r * 13 + salt) % 29) - 14);
  return in;
}

qc_policy_t policy(qc_codec_t codec, int bits, qc_algorithm_t algo = QC_ALGO_AUTO) {
  qc_policy_t p = make_policy(algo);
  p.codec = codec;
  p.bits = bits;
  return p;
}

class Segments : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(Segments, EachSegmentKeepsItsPolicy) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy(QC_CODEC_NONE, 4, GetParam())), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("fc*", policy(QC_CODEC_MINMAX, 2, GetParam())), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("half*", policy(QC_CODEC_FP16, 4, GetParam())), QC_SUCCESS);
  const std::vector<size_t> counts = {300, 77, 500, 1};
  const std::vector<const char*> layers = {"fc1", "bias1", "half1", nullptr};
  const auto in = random_inputs(n, 878, 11);
  const auto res = fused_on(g, in, counts, layers);
  ASSERT_TRUE(res.all_ok()) << qc_last_error();
  const auto want = exact_sum(in);
  for (int r = 1; r < n; ++r) EXPECT_EQ(res.out[r], res.out[0]) << "replicas differ";
  const auto& out = res.out[0];
  double fc_err = 0, half_err = 0, fc_scale = 0;
  for (size_t i = 0; i < 300; ++i) {
    fc_err = std::max(fc_err, double(std::fabs(out[i] - want[i])));
    fc_scale = std::max(fc_scale, double(std::fabs(want[i])));
  }
  for (size_t i = 300; i < 377; ++i) EXPECT_NEAR(out[i], want[i], 1e-5f) << "codec none " << i;
  // fp16 rounds each encoded value (partial sums included) by 2^-11
  // relative: the error stays within a few units of the magnitudes summed.
  for (size_t i = 377; i < 877; ++i) {
    double mag = 0;
    for (int r = 0; r < n; ++r) mag += std::fabs(in[r][i]);
    half_err = std::max(half_err, double(std::fabs(out[i] - want[i])) / mag);
  }
  EXPECT_NEAR(out[877], want[877], 1e-5f) << "one-element '*' segment";
  EXPECT_GT(fc_err, 0.01 * fc_scale) << "2-bit minmax must lose something";
  EXPECT_LT(fc_err, fc_scale) << "but stay within its range";
  EXPECT_GT(half_err, 0.0);
  EXPECT_LT(half_err, (n + 1) * std::ldexp(1.0, -11)) << "fp16 keeps 11 significant bits";
}

TEST_P(Segments, LosslessFusedEqualsPerLayerSums) {
  const int n = 4;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy(QC_CODEC_NONE, 4, GetParam())), QC_SUCCESS);
  const std::vector<size_t> counts = {0, 1, 0, 129, 1000, 0, 3};
  const std::vector<const char*> layers = {"a", "b", "c", "d", "e", "f", "g"};
  const auto in = integer_inputs(n, 1133, 5);
  const auto res = fused_on(g, in, counts, layers);
  ASSERT_TRUE(res.all_ok()) << qc_last_error();
  for (int r = 0; r < n; ++r) EXPECT_EQ(res.out[r], exact_sum(in)) << "rank " << r;
}

TEST_P(Segments, BucketsDoNotStraddleSegments) {
  // A 100-element layer of ~1e-3 next to one of ~1e3, 4-bit minmax with
  // 128-element buckets: if a bucket spanned both, the small layer's error
  // would be on the large layer's scale.
  const int n = 2;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = policy(QC_CODEC_MINMAX, 4, GetParam());
  p.bucket_size = 128;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  std::vector<std::vector<float>> in(n, std::vector<float>(100 + 300));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < in[r].size(); ++i)
      in[r][i] = (i < 100 ? 1e-3f : 1e3f) * float(1 + (i * 3 + r) % 7);
  const auto res = fused_on(g, in, {100, 300}, {"small", "large"});
  ASSERT_TRUE(res.all_ok()) << qc_last_error();
  const auto want = exact_sum(in);
  for (size_t i = 0; i < 100; ++i)
    EXPECT_NEAR(res.out[0][i], want[i], 2 * 14e-3 / 15) << "element " << i;
}

TEST_P(Segments, OnebitScalePerSegment) {
  // Paper 004 §4.3: 1-bit compression of a fused buffer with one scale makes
  // small layers take the large layers' magnitude, so 1-bit LAMB rescales
  // each layer first. Here each segment has its own codec and scale, even
  // with a bucket larger than the whole buffer, so no rescaling is needed:
  // the small layer decodes at its own magnitude (its L1 mean, summed).
  const int n = 2;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = policy(QC_CODEC_ONEBIT, 1, GetParam());
  p.bucket_size = 1 << 20;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  std::vector<std::vector<float>> in(n, std::vector<float>(64 + 256));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = i < 64 ? 1e-3f : 1e3f;
  const auto res = fused_on(g, in, {64, 256}, {"small", "large"});
  ASSERT_TRUE(res.all_ok()) << qc_last_error();
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(res.out[0][i], 2e-3f, 1e-6f) << "element " << i;
  for (size_t i = 64; i < 320; ++i) EXPECT_NEAR(res.out[0][i], 2e3f, 1e-1f) << "element " << i;
}

TEST_P(Segments, ErrorFeedbackPerSegment) {
  const int n = 2;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t ef = policy(QC_CODEC_MINMAX, 2, GetParam());
  ef.error_feedback = 1;
  qc_policy_t plain = policy(QC_CODEC_MINMAX, 2, GetParam());
  ASSERT_EQ(g.set_policy("mlp", ef), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("emb", plain), QC_SUCCESS);
  std::vector<qc_error_buffer_t> ebs(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], 600, &ebs[r]), QC_SUCCESS);
  const auto in = random_inputs(n, 600, 3);
  const auto res = fused_on(g, in, {400, 200}, {"mlp", "emb"}, &ebs);
  ASSERT_TRUE(res.all_ok()) << qc_last_error();
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> image(56 + 600 * 4);
    size_t size = 0;
    ASSERT_EQ(qc_error_buffer_save(ebs[r], image.data(), image.size(), &size), QC_SUCCESS);
    std::vector<float> e(600);
    std::memcpy(e.data(), image.data() + 56, 600 * 4);
    double mlp = 0, emb = 0;
    for (size_t i = 0; i < 400; ++i) mlp += e[i] * e[i];
    for (size_t i = 400; i < 600; ++i) emb += e[i] * e[i];
    EXPECT_GT(mlp, 0.0) << "rank " << r << ": the EC segment keeps residuals";
    EXPECT_EQ(emb, 0.0) << "rank " << r << ": the segment without EC leaves its slots alone";
  }
  // Another layout on the same buffers: reset (with a warning), not an error.
  const auto res2 = fused_on(g, in, {200, 400}, {"emb", "mlp"}, &ebs);
  ASSERT_TRUE(res2.all_ok()) << qc_last_error();
  for (auto eb : ebs) qc_error_buffer_destroy(eb);
}

// One rank's residuals, read from a checkpoint image (56-byte header).
std::vector<float> residuals(qc_error_buffer_t eb, size_t count) {
  std::vector<uint8_t> image(56 + count * 4);
  size_t size = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, image.data(), image.size(), &size), QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(size, image.size());
  std::vector<float> e(count);
  std::memcpy(e.data(), image.data() + 56, count * 4);
  return e;
}

// Error feedback's books over several fused calls on a buffer of several of
// the units its residuals are loaded in (collective_context.h): the sum of
// the outputs plus every rank's final residuals is the sum of the inputs.
TEST_P(Segments, ErrorFeedbackBooksBalanceOverCalls) {
  const int n = 3;
  const std::vector<size_t> counts = {5000, 3000, 4321};
  const size_t total = 5000 + 3000 + 4321;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t ef = policy(QC_CODEC_ONEBIT, 1, GetParam());
  ef.error_feedback = 1;
  ASSERT_EQ(g.set_policy("*", ef), QC_SUCCESS);
  std::vector<qc_error_buffer_t> ebs(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], total, &ebs[r]), QC_SUCCESS);
  std::vector<double> lhs(total, 0.0), rhs(total, 0.0);
  double scale = 0.0;
  const int calls = 4;
  for (int t = 0; t < calls; ++t) {
    const auto in = random_inputs(n, total, 50 + static_cast<uint64_t>(t));
    const auto res = fused_on(g, in, counts, {"a", "b", "c"}, &ebs);
    ASSERT_TRUE(res.all_ok()) << qc_last_error();
    for (size_t i = 0; i < total; ++i) {
      lhs[i] += res.out[0][i];
      scale = std::max(scale, std::fabs(static_cast<double>(res.out[0][i])));
      for (int r = 0; r < n; ++r) rhs[i] += in[static_cast<size_t>(r)][i];
    }
  }
  for (int r = 0; r < n; ++r) {
    const std::vector<float> e = residuals(ebs[r], total);
    for (size_t i = 0; i < total; ++i) {
      lhs[i] += e[i];
      scale = std::max(scale, std::fabs(static_cast<double>(e[i])));
    }
  }
  double worst = 0.0;
  for (size_t i = 0; i < total; ++i) worst = std::max(worst, std::fabs(lhs[i] - rhs[i]));
  EXPECT_LE(worst, 8.0 * FLT_EPSILON * scale * n * calls) << "bookkeeping broken";
  for (auto eb : ebs) qc_error_buffer_destroy(eb);
}

// qc.h: a policy change "applies from the next collective on". A layer
// switched from 4-bit minmax to codec none between two fused calls comes out
// exact in the second, and switched back it is quantized as in the first.
TEST_P(Segments, PolicyChangeAppliesFromTheNextCall) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy(QC_CODEC_NONE, 4, GetParam())), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("b", policy(QC_CODEC_MINMAX, 4, GetParam())), QC_SUCCESS);
  const std::vector<size_t> counts = {200, 300};
  const std::vector<const char*> layers = {"a", "b"};
  const auto in = integer_inputs(n, 500, 17);
  const auto want = exact_sum(in);
  const std::vector<float> want_b(want.begin() + 200, want.end());
  const auto first = fused_on(g, in, counts, layers);
  ASSERT_TRUE(first.all_ok()) << qc_last_error();
  const std::vector<float> first_b(first.out[0].begin() + 200, first.out[0].end());
  EXPECT_NE(first_b, want_b) << "4-bit minmax on values in [-14, 14] must lose something";
  EXPECT_EQ(std::vector<float>(first.out[0].begin(), first.out[0].begin() + 200),
            std::vector<float>(want.begin(), want.begin() + 200));

  ASSERT_EQ(g.set_policy("b", policy(QC_CODEC_NONE, 4, GetParam())), QC_SUCCESS);
  const auto second = fused_on(g, in, counts, layers);
  ASSERT_TRUE(second.all_ok()) << qc_last_error();
  for (int r = 0; r < n; ++r) EXPECT_EQ(second.out[r], want) << "rank " << r << ": b is exact now";

  ASSERT_EQ(g.set_policy("b", policy(QC_CODEC_MINMAX, 4, GetParam())), QC_SUCCESS);
  const auto third = fused_on(g, in, counts, layers);
  ASSERT_TRUE(third.all_ok()) << qc_last_error();
  EXPECT_EQ(third.out[0], first.out[0]) << "the first call's policy again, the same result";
}

// With an error buffer: the buffer binds to the layout, policies included
// (qc.h, qc_allreduce_segments; docs/policies.md), so the change resets it
// (with a warning) before the second call. Then b's slots, which b no longer
// uses (codec none, no error feedback), are zero, and the call behaves as a
// first call of a fresh buffer: the same output and residuals as a new group.
TEST_P(Segments, PolicyChangeResetsTheErrorBuffer) {
  const int n = 3;
  const size_t total = 500;
  const std::vector<size_t> counts = {200, 300};
  const std::vector<const char*> layers = {"a", "b"};
  qc_policy_t ef2 = policy(QC_CODEC_MINMAX, 2, GetParam());
  ef2.error_feedback = 1;
  const qc_policy_t exact = policy(QC_CODEC_NONE, 4, GetParam());

  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("a", ef2), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("b", ef2), QC_SUCCESS);
  std::vector<qc_error_buffer_t> ebs(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], total, &ebs[r]), QC_SUCCESS);
  const auto in1 = integer_inputs(n, total, 21);
  ASSERT_TRUE(fused_on(g, in1, counts, layers, &ebs).all_ok()) << qc_last_error();
  for (int r = 0; r < n; ++r) {
    const auto e = residuals(ebs[r], total);
    double b_norm = 0;
    for (size_t i = 200; i < total; ++i) b_norm += e[i] * e[i];
    ASSERT_GT(b_norm, 0.0) << "rank " << r << ": b kept residuals in the first call";
  }

  ASSERT_EQ(g.set_policy("b", exact), QC_SUCCESS);
  const auto in2 = integer_inputs(n, total, 22);
  const auto second = fused_on(g, in2, counts, layers, &ebs);
  ASSERT_TRUE(second.all_ok()) << qc_last_error();

  // The same call on a new group with new buffers.
  Group fresh(n);
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ(fresh.set_policy("a", ef2), QC_SUCCESS);
  ASSERT_EQ(fresh.set_policy("b", exact), QC_SUCCESS);
  std::vector<qc_error_buffer_t> fresh_ebs(n, nullptr);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(qc_error_buffer_create(fresh[r], total, &fresh_ebs[r]), QC_SUCCESS);
  const auto ref = fused_on(fresh, in2, counts, layers, &fresh_ebs);
  ASSERT_TRUE(ref.all_ok()) << qc_last_error();

  const auto want = exact_sum(in2);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(std::vector<float>(second.out[r].begin() + 200, second.out[r].end()),
              std::vector<float>(want.begin() + 200, want.end()))
        << "rank " << r << ": b is exact from the call after the change";
    EXPECT_EQ(second.out[r], ref.out[r]) << "rank " << r << ": as a fresh buffer's first call";
    const auto e = residuals(ebs[r], total);
    const auto e_ref = residuals(fresh_ebs[r], total);
    for (size_t i = 200; i < total; ++i)
      ASSERT_EQ(e[i], 0.0f) << "rank " << r << " slot " << i << ": reset, then left alone";
    EXPECT_EQ(e, e_ref) << "rank " << r << ": a's residuals start from zero";
  }
  for (auto eb : ebs) qc_error_buffer_destroy(eb);
  for (auto eb : fresh_ebs) qc_error_buffer_destroy(eb);
}

// Zero-length and one-element segments under a lossy codec with error
// feedback (the lossless case is LosslessFusedEqualsPerLayerSums): the empty
// ones change nothing, a one-element bucket has min == max and so is exact
// (its residual stays 0), and the rest is still reduced.
TEST_P(Segments, EmptyAndOneElementSegmentsWithALossyCodec) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t ef2 = policy(QC_CODEC_MINMAX, 2, GetParam());
  ef2.error_feedback = 1;
  ASSERT_EQ(g.set_policy("*", ef2), QC_SUCCESS);
  const std::vector<size_t> counts = {0, 1, 0, 130, 1, 0};
  const std::vector<const char*> layers = {"e0", "one", "e1", "big", "one2", "e2"};
  const size_t total = 132;
  std::vector<qc_error_buffer_t> ebs(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(g[r], total, &ebs[r]), QC_SUCCESS);
  for (int call = 0; call < 2; ++call) {
    const auto in = integer_inputs(n, total, 30 + call);
    const auto want = exact_sum(in);
    const auto res = fused_on(g, in, counts, layers, &ebs);
    ASSERT_TRUE(res.all_ok()) << "call " << call << ": " << qc_last_error();
    for (int r = 1; r < n; ++r) EXPECT_EQ(res.out[r], res.out[0]) << "replicas differ";
    EXPECT_EQ(res.out[0][0], want[0]) << "call " << call << ": one-element segment";
    EXPECT_EQ(res.out[0][131], want[131]) << "call " << call << ": last one-element segment";
    double big_err = 0;
    for (size_t i = 1; i < 131; ++i) big_err = std::max(big_err, double(std::fabs(res.out[0][i] - want[i])));
    EXPECT_GT(big_err, 0.0) << "2-bit minmax loses something on the large segment";
    EXPECT_LT(big_err, 3 * 3 * 84.0 / 3) << "but stays within its range";
    for (int r = 0; r < n; ++r) {
      const auto e = residuals(ebs[r], total);
      EXPECT_EQ(e[0], 0.0f) << "rank " << r;
      EXPECT_EQ(e[131], 0.0f) << "rank " << r;
    }
  }
  // Only empty segments: nothing to send, buffers may be NULL, every rank
  // returns.
  std::vector<qc_status_t> st(n, QC_ERROR_INTERNAL);
  const size_t zeros[3] = {0, 0, 0};
  run_ranks(n, [&](int r) {
    st[r] = qc_allreduce_segments(g[r], nullptr, nullptr, 3, zeros, nullptr, QC_DTYPE_FLOAT32,
                                  QC_OP_SUM, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(st[r], QC_SUCCESS) << "rank " << r;
  for (auto eb : ebs) qc_error_buffer_destroy(eb);
}

INSTANTIATE_TEST_SUITE_P(Local, Segments,
                         ::testing::Values(QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING,
                                           QC_ALGO_SRA, QC_ALGO_TREE),
                         [](const auto& info) { return std::string(algo_name(info.param)); });

TEST(SegmentsMisc, FewerWireBytesThanOneCallPerLayer) {
  const int n = 4;
  const size_t layers_n = 40, per = 250;
  Group fused(n), separate(n);
  ASSERT_TRUE(fused.ok() && separate.ok());
  const qc_policy_t p = policy(QC_CODEC_MINMAX, 4, QC_ALGO_SRA);
  ASSERT_EQ(fused.set_policy("*", p), QC_SUCCESS);
  ASSERT_EQ(separate.set_policy("*", p), QC_SUCCESS);
  std::vector<std::string> names;
  for (size_t i = 0; i < layers_n; ++i) names.push_back("layer" + std::to_string(i));
  std::vector<const char*> layers;
  for (const auto& s : names) layers.push_back(s.c_str());
  const auto in = random_inputs(n, layers_n * per, 9);
  ASSERT_TRUE(fused_on(fused, in, std::vector<size_t>(layers_n, per), layers).all_ok());
  for (size_t l = 0; l < layers_n; ++l) {
    std::vector<std::vector<float>> part(n);
    for (int r = 0; r < n; ++r) part[r].assign(in[r].begin() + l * per, in[r].begin() + (l + 1) * per);
    ASSERT_TRUE(allreduce_on(separate, encode_all(part, QC_DTYPE_FLOAT32), per, QC_DTYPE_FLOAT32,
                             QC_OP_SUM, layers[l]).all_ok());
  }
  uint64_t wf = 0, ws = 0;
  for (int r = 0; r < n; ++r) {
    qc_stats_t a, b;
    a.struct_size = b.struct_size = sizeof(qc_stats_t);
    ASSERT_EQ(qc_comm_get_stats(fused[r], &a), QC_SUCCESS);
    ASSERT_EQ(qc_comm_get_stats(separate[r], &b), QC_SUCCESS);
    EXPECT_EQ(a.calls, 1u);
    EXPECT_EQ(b.calls, layers_n);
    wf += a.wire_bytes;
    ws += b.wire_bytes;
    // Per-layer stats: one call per segment, wire bytes split among them.
    qc_layer_stats_t ls;
    ls.struct_size = sizeof ls;
    ASSERT_EQ(qc_comm_get_layer_stats(fused[r], "layer7", &ls), QC_SUCCESS);
    EXPECT_EQ(ls.calls, 1u);
    EXPECT_EQ(ls.count, per);
    EXPECT_GT(ls.wire_bytes, 0u);
    EXPECT_LT(ls.wire_bytes, a.wire_bytes / 10);
  }
  EXPECT_LT(double(wf), 0.9 * double(ws)) << "fused " << wf << " B, per layer " << ws << " B";
  std::printf("wire bytes, 4 ranks, 40 layers x 250 floats, minmax 4-bit SRA: fused %llu, "
              "one call per layer %llu (%.2fx)\n",
              (unsigned long long)wf, (unsigned long long)ws, double(ws) / double(wf));
}

TEST(SegmentsMisc, MismatchedCountsFailEveryRank) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  const auto in = random_inputs(n, 100, 1);
  const std::vector<std::vector<size_t>> counts = {{50, 50}, {50, 50}, {60, 40}};
  const auto res = fused_on(g, in, {}, {"a", "b"}, nullptr, &counts);
  for (int r = 0; r < n; ++r) EXPECT_EQ(res.status[r], QC_ERROR_MISMATCH) << "rank " << r;
}

TEST(SegmentsMisc, BadArguments) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  float x[4] = {1, 2, 3, 4}, y[4];
  const size_t counts[2] = {2, 2};
  EXPECT_EQ(qc_allreduce_segments(g[0], x, y, 2, nullptr, nullptr, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                  nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("counts"), std::string::npos);
  const size_t huge[2] = {SIZE_MAX, 2};
  EXPECT_EQ(qc_allreduce_segments(g[0], x, y, 2, huge, nullptr, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                  nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_allreduce_segments(g[0], nullptr, y, 2, counts, nullptr, QC_DTYPE_FLOAT32,
                                  QC_OP_SUM, nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  // No segments: a valid empty call.
  EXPECT_EQ(qc_allreduce_segments(g[0], nullptr, nullptr, 0, nullptr, nullptr, QC_DTYPE_FLOAT32,
                                  QC_OP_SUM, nullptr, nullptr),
            QC_SUCCESS)
      << qc_last_error();
  // layers NULL: every segment uses "*"; in place.
  EXPECT_EQ(qc_allreduce_segments(g[0], x, x, 2, counts, nullptr, QC_DTYPE_FLOAT32, QC_OP_AVG,
                                  nullptr, nullptr),
            QC_SUCCESS);
  EXPECT_EQ(x[3], 4.0f);
}

}  // namespace
