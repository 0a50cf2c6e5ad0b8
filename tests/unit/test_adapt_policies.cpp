// qc_comm_adapt_policies through a local group: statistics collected by real
// calls, one assignment on every rank, fewer bytes within alpha * E4.
#define QC_EXPERIMENTAL_API  // tests qc_comm_adapt_policies
#include <chrono>

#include "test_util.h"

using namespace qct;

namespace {

struct Layer {
  std::string name;
  size_t count;
  float scale;
};

// Transformer-like: embeddings, attention and MLP weights, biases and norms,
// sizes 64..32K, gradient scales 1e-3..10.
std::vector<Layer> model() {
  std::vector<Layer> layers = {{"emb.weight", 32768, 0.01f}};
  for (int b = 0; b < 4; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    layers.push_back({p + "attn.qkv", 12288, 0.5f * float(b + 1)});
    layers.push_back({p + "attn.bias", 192, 0.001f});
    layers.push_back({p + "mlp.fc1", 16384, 2.0f});
    layers.push_back({p + "mlp.fc2", 16384, 0.05f});
    layers.push_back({p + "ln.weight", 64, 10.0f});
  }
  return layers;
}

std::vector<std::vector<float>> layer_inputs(int n, const Layer& l, uint64_t seed) {
  auto in = random_inputs(n, l.count, seed);
  for (auto& v : in)
    for (float& x : v) x *= l.scale;
  return in;
}

// Runs every layer once; returns the summed squared error against the
// exact sums (rank 0's output).
double run_model(Group& g, const std::vector<Layer>& layers, uint64_t seed) {
  double err = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto in = layer_inputs(g.size(), layers[i], seed + i);
    const auto res = allreduce_on(g, encode_all(in, QC_DTYPE_FLOAT32), layers[i].count,
                                  QC_DTYPE_FLOAT32, QC_OP_SUM, layers[i].name.c_str());
    EXPECT_TRUE(res.all_ok()) << res.describe();
    const float* out = reinterpret_cast<const float*>(res.out[0].data());
    for (size_t k = 0; k < layers[i].count; ++k) {
      double want = 0;
      for (int r = 0; r < g.size(); ++r) want += in[r][k];
      err += (out[k] - want) * (out[k] - want);
    }
  }
  return err;
}

class Adapt : public ::testing::TestWithParam<qc_adapt_method_t> {};

TEST_P(Adapt, FewerBytesWithinTheBudgetAndTheSameOnEveryRank) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t p = make_policy(QC_ALGO_SRA);
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  const auto layers = model();
  const double e4 = run_model(g, layers, 100);  // also collects the statistics

  qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
  cfg.method = GetParam();
  std::vector<qc_adapt_report_t> reports(n);
  std::vector<qc_status_t> status(n);
  run_ranks(n, [&](int r) {
    reports[r].struct_size = sizeof(qc_adapt_report_t);
    status[r] = qc_comm_adapt_policies(g[r], &cfg, &reports[r]);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(status[r], QC_SUCCESS) << qc_last_error();
  const qc_adapt_report_t& rep = reports[0];
  EXPECT_EQ(rep.layers, layers.size());
  EXPECT_LE(rep.predicted_error, rep.error_budget);
  EXPECT_NEAR(rep.error_budget, 2.0 * rep.e4, 1e-9 * rep.e4);
  EXPECT_LE(double(rep.predicted_bytes), 0.8 * double(rep.bytes_at_4))
      << "at least 20% fewer bytes than uniform 4 bit";
  int changed = 0;
  for (const Layer& l : layers) {
    qc_policy_t first;
    first.struct_size = sizeof first;
    ASSERT_EQ(qc_comm_get_layer_policy(g[0], l.name.c_str(), &first), QC_SUCCESS);
    changed += first.bits != 4;
    for (int r = 1; r < n; ++r) {
      qc_policy_t q;
      q.struct_size = sizeof q;
      ASSERT_EQ(qc_comm_get_layer_policy(g[r], l.name.c_str(), &q), QC_SUCCESS);
      EXPECT_EQ(q.bits, first.bits) << l.name << " differs on rank " << r;
    }
  }
  EXPECT_GT(changed, 0);
  // Measured on new data of the same statistics: the adapted model's error
  // stays within alpha * E4 and its wire bytes fall.
  qc_stats_t before;
  before.struct_size = sizeof before;
  ASSERT_EQ(qc_comm_get_stats(g[0], &before), QC_SUCCESS);
  const double adapted = run_model(g, layers, 100);
  qc_stats_t after;
  after.struct_size = sizeof after;
  ASSERT_EQ(qc_comm_get_stats(g[0], &after), QC_SUCCESS);
  const double wire_adapted = double(after.wire_bytes - before.wire_bytes);
  // Before: the uniform 4-bit pass plus the small statistics sum.
  const double wire_uniform = double(before.wire_bytes);
  EXPECT_LT(wire_adapted, wire_uniform) << "measured wire bytes must fall";
  EXPECT_LE(adapted, 2.0 * e4) << "measured error vs alpha * measured E4";
  EXPECT_GT(adapted, e4) << "fewer bits must cost some error";
  std::printf("method %d: predicted bytes %.3f of uniform 4 bit, measured wire %.3f; measured "
              "error %.3f x E4\n",
              int(GetParam()), double(rep.predicted_bytes) / double(rep.bytes_at_4),
              wire_adapted / wire_uniform, adapted / e4);
}

INSTANTIATE_TEST_SUITE_P(Local, Adapt, ::testing::Values(QC_ADAPT_KMEANS, QC_ADAPT_LINEAR),
                         [](const auto& info) {
                           return std::string(info.param == QC_ADAPT_KMEANS ? "Kmeans" : "Linear");
                         });

TEST(AdaptMisc, BadConfigsAreRefused) {
  Group g(2);
  ASSERT_TRUE(g.ok());
  qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
  cfg.num_allowed = 0;
  EXPECT_EQ(qc_comm_adapt_policies(g[0], &cfg, nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("num_allowed"), std::string::npos);
  cfg = QC_ADAPT_CONFIG_INIT;
  cfg.alpha = 0.5;
  EXPECT_EQ(qc_comm_adapt_policies(g[0], &cfg, nullptr), QC_ERROR_INVALID_ARGUMENT);
  cfg = QC_ADAPT_CONFIG_INIT;
  cfg.allowed_bits[0] = 9;
  EXPECT_EQ(qc_comm_adapt_policies(g[0], &cfg, nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_adapt_policies(nullptr, nullptr, nullptr), QC_ERROR_INVALID_ARGUMENT);
}


// qc_comm_adapt_policies sums the statistics of the layers each rank would adapt.
// Ranks that disagree on that list (here: different policies for a layer,
// which the calls themselves accept because the messages are under
// min_compress_bytes, so every rank sends them with codec none) must not
// compute different assignments or wait for each other until the timeout:
// every rank fails with QC_ERROR_MISMATCH at once, and no policy changes.
struct Disagreement {
  const char* what;
  // policies[r][layer] = codec rank r sets for the layer
  std::vector<std::vector<std::pair<const char*, qc_codec_t>>> policies;
  std::vector<const char*> calls;  // layers every rank calls, in order
};

void expect_mismatch_everywhere(const Disagreement& d) {
  const int n = static_cast<int>(d.policies.size());
  Group g(n, /*timeout_seconds=*/60.0);
  ASSERT_TRUE(g.ok());
  for (int r = 0; r < n; ++r) {
    for (const auto& [layer, codec] : d.policies[r]) {
      qc_policy_t p = QC_POLICY_INIT;  // min_compress_bytes 16384
      p.codec = codec;
      ASSERT_EQ(qc_comm_set_layer_policy(g[r], layer, &p), QC_SUCCESS) << qc_last_error();
    }
  }
  const size_t count = 100;  // 400 bytes: codec none on every rank, so the calls agree
  for (const char* layer : d.calls) {
    const auto in = random_inputs(n, count, 5);
    const auto res = allreduce_on(g, encode_all(in, QC_DTYPE_FLOAT32), count, QC_DTYPE_FLOAT32,
                                  QC_OP_SUM, layer);
    ASSERT_TRUE(res.all_ok()) << d.what << ": " << res.describe();
  }
  std::vector<qc_status_t> st(n, QC_ERROR_INTERNAL);
  std::vector<std::string> err(n);
  const auto t0 = std::chrono::steady_clock::now();
  const qc_adapt_config_t cfg = QC_ADAPT_CONFIG_INIT;
  run_ranks(n, [&](int r) {
    st[r] = qc_comm_adapt_policies(g[r], &cfg, nullptr);
    if (st[r] != QC_SUCCESS) err[r] = qc_last_error();
  });
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(st[r], QC_ERROR_MISMATCH) << d.what << ", rank " << r << ": " << err[r];
  EXPECT_LT(waited, 10.0) << d.what << ": detected, not timed out";
  // No rank applied an assignment: every layer keeps 4 bits.
  for (int r = 0; r < n; ++r) {
    for (const auto& [layer, codec] : d.policies[r]) {
      qc_policy_t p = QC_POLICY_INIT;
      ASSERT_EQ(qc_comm_get_layer_policy(g[r], layer, &p), QC_SUCCESS);
      EXPECT_EQ(p.bits, 4) << d.what << ", rank " << r << ", " << layer;
      EXPECT_EQ(p.codec, codec);
    }
  }
}

TEST(AdaptMisc, RanksThatSawOtherLayersFailWithMismatch) {
  // Rank 0 adapts "x"; the others have nothing to adapt.
  expect_mismatch_everywhere({"one rank has a layer the others lack",
                              {{{"x", QC_CODEC_MINMAX}},
                               {{"x", QC_CODEC_NONE}},
                               {{"x", QC_CODEC_NONE}}},
                              {"x"}});
  // As many layers on every rank, but not the same ones.
  expect_mismatch_everywhere({"same number of layers, other names",
                              {{{"a", QC_CODEC_MINMAX}, {"b", QC_CODEC_NONE}},
                               {{"a", QC_CODEC_NONE}, {"b", QC_CODEC_MINMAX}},
                               {{"a", QC_CODEC_NONE}, {"b", QC_CODEC_MINMAX}}},
                              {"a", "b"}});
  // Two ranks, the same layers, but one adapts "w" as qsgd: the widths are
  // chosen per (codec, bucket, rounding) group, so the groups must agree too.
  expect_mismatch_everywhere({"the same layer in another codec group",
                              {{{"w", QC_CODEC_MINMAX}, {"v", QC_CODEC_MINMAX}},
                               {{"w", QC_CODEC_QSGD}, {"v", QC_CODEC_MINMAX}}},
                              {"w", "v"}});
}

}  // namespace
