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
