// qc_comm_apply_preset: the "cgx" preset (paper 003 §3: biases and norms in full
// precision, small layers uncompressed, the rest compressed) is exactly the
// list of qc_comm_set_layer_policy calls qc.h documents, and collectives follow it.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"

using namespace qct;

namespace {

qc_policy_t minmax4() {
  qc_policy_t p = make_policy();  // min_compress_bytes 0: the preset raises it
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.bucket_size = 128;
  return p;
}

qc_policy_t resolve(qc_comm_t c, const char* layer) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_TOPK;  // overwritten on success
  p.bits = 7;
  EXPECT_EQ(qc_comm_get_layer_policy(c, layer, &p), QC_SUCCESS)
      << (layer ? layer : "(null)") << ": " << qc_last_error();
  return p;
}

::testing::AssertionResult same_policy(const qc_policy_t& a, const qc_policy_t& b) {
  if (a.codec == b.codec && a.bits == b.bits && a.bucket_size == b.bucket_size &&
      a.rounding == b.rounding && a.algorithm == b.algorithm &&
      a.error_feedback == b.error_feedback && a.group_size == b.group_size &&
      a.topk_ratio == b.topk_ratio && a.scale_update_period == b.scale_update_period &&
      a.seed == b.seed && a.min_compress_bytes == b.min_compress_bytes)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "codec " << a.codec << "/" << b.codec << ", bits " << a.bits << "/" << b.bits
         << ", bucket " << a.bucket_size << "/" << b.bucket_size << ", ef " << a.error_feedback
         << "/" << b.error_feedback << ", min_compress_bytes " << a.min_compress_bytes << "/"
         << b.min_compress_bytes;
}

// Names from real models (PyTorch named_parameters) that must stay exact.
const std::vector<const char*>& full_precision_names() {
  static const std::vector<const char*> kNames = {
      "encoder.0.attn.bias",                                // any bias
      "layer3.bn1.weight",                                  // ResNet batch norm
      "bn1.weight",                                         // ResNet stem batch norm
      "encoder.layer.0.attention.output.LayerNorm.weight",  // BERT
      "blocks.0.norm1.weight",                              // ViT (timm)
      "model.layers.0.input_layernorm.weight",              // Llama
      "model.norm.weight",                                  // Llama final norm
      "transformer.h.0.ln_1.weight",                        // GPT-2
      "transformer.ln_f.bias",                              // GPT-2 final norm
      "ln_f.weight",                                        // top-level norm
      "attn.in_proj_bias",                                  // nn.MultiheadAttention
  };
  return kNames;
}

// Names the preset must leave compressed (no pattern may catch them).
const std::vector<const char*>& compressed_names() {
  static const std::vector<const char*> kNames = {
      "encoder.0.attn.weight", "encoder.0.linear.weight", "embedding.weight",
      "fc.weight",             "layer3.conv1.weight",     "lm_head.weight",
  };
  return kNames;
}

// The patterns qc.h lists for "cgx": every `qc_comm_set_layer_policy(comm, "P", &f)`
// line of the preset's comment.
std::vector<std::string> header_patterns(const std::string& path, const std::string& var) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::regex re("qc_comm_set_layer_policy\\(comm, \"([^\"]+)\", &" + var + "\\)");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(PolicyPreset, CgxKeepsBiasesAndNormsExactAndCompressesTheRest) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  const qc_policy_t base = minmax4();
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", &base), QC_SUCCESS) << qc_last_error();
  const qc_policy_t init = QC_POLICY_INIT;
  for (const char* name : full_precision_names()) {
    const qc_policy_t p = resolve(g[0], name);
    EXPECT_EQ(p.codec, QC_CODEC_NONE) << name;
    EXPECT_TRUE(same_policy(p, init)) << name << ": the full-precision policy is QC_POLICY_INIT";
  }
  qc_policy_t want = base;
  want.min_compress_bytes = 16384;
  for (const char* name : compressed_names()) {
    const qc_policy_t p = resolve(g[0], name);
    EXPECT_EQ(p.codec, QC_CODEC_MINMAX) << name;
    EXPECT_EQ(p.bits, 4) << name;
    EXPECT_TRUE(same_policy(p, want)) << name;
  }
  EXPECT_TRUE(same_policy(resolve(g[0], nullptr), want)) << "\"*\" is base";
}

TEST(PolicyPreset, EveryDocumentedPatternIsSetAndNothingElse) {
  const std::string root = QC_SOURCE_DIR;
  const auto header = header_patterns(root + "/include/qc.h", "f");
  const auto doc = header_patterns(root + "/docs/policies.md", "f");
  ASSERT_EQ(header.size(), 7u) << "the preset's list in qc.h";
  EXPECT_EQ(doc, header) << "docs/policies.md lists the same patterns as qc.h";
  EXPECT_EQ(header_patterns(root + "/include/qc.h", "b"), std::vector<std::string>{"*"});
  Group g(1);
  ASSERT_TRUE(g.ok());
  const qc_policy_t base = minmax4();
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", &base), QC_SUCCESS) << qc_last_error();
  for (const std::string& pat : header) {
    // The pattern itself, and a name made from it ('*' -> "x"), both match it.
    std::string name = pat;
    for (char& ch : name)
      if (ch == '*') ch = 'x';
    EXPECT_EQ(resolve(g[0], pat.c_str()).codec, QC_CODEC_NONE) << pat;
    EXPECT_EQ(resolve(g[0], name.c_str()).codec, QC_CODEC_NONE) << pat << " -> " << name;
  }
  // A name no documented pattern matches resolves to "*" (no hidden pattern).
  for (const char* name : {"x", "weight", "b", "l", "n", "xbixasx", "xbx", "xlx", "orm"}) {
    EXPECT_EQ(resolve(g[0], name).codec, QC_CODEC_MINMAX) << name;
  }
}

TEST(PolicyPreset, ThresholdIsRaisedNeverLowered) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_policy_t base = minmax4();
  base.min_compress_bytes = 1;
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", &base), QC_SUCCESS) << qc_last_error();
  EXPECT_EQ(resolve(g[0], "fc.weight").min_compress_bytes, 16384u);
  base.min_compress_bytes = 1u << 20;
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", &base), QC_SUCCESS) << qc_last_error();
  EXPECT_EQ(resolve(g[0], "fc.weight").min_compress_bytes, size_t{1} << 20);
  // The caller's struct is not modified.
  EXPECT_EQ(base.min_compress_bytes, size_t{1} << 20);
}

TEST(PolicyPreset, NullBaseUsesTheCurrentStarPolicy) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_policy_t star = make_policy(QC_ALGO_SRA);
  star.codec = QC_CODEC_QSGD;
  star.bits = 3;
  star.error_feedback = 1;
  star.seed = 42;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "*", &star), QC_SUCCESS);
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", nullptr), QC_SUCCESS) << qc_last_error();
  qc_policy_t want = star;
  want.min_compress_bytes = 16384;
  EXPECT_TRUE(same_policy(resolve(g[0], "fc.weight"), want));
  EXPECT_EQ(resolve(g[0], "fc.bias").codec, QC_CODEC_NONE);
}

// The base is the policy set for the pattern "*", not whatever the name "*"
// resolves to: globs set later that also match the name "*" ("?" has as few
// literal characters as "*" and wins the tie by order) are not the base.
TEST(PolicyPreset, NullBaseIsThePatternStarNotTheNameStar) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_policy_t star = minmax4();
  star.seed = 7;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "*", &star), QC_SUCCESS);
  qc_policy_t one_char = minmax4();
  one_char.bits = 2;
  one_char.seed = 99;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "?", &one_char), QC_SUCCESS);
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "**", &one_char), QC_SUCCESS);
  ASSERT_EQ(resolve(g[0], "*").seed, 99u) << "the name \"*\" resolves to a later glob";
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", nullptr), QC_SUCCESS) << qc_last_error();
  qc_policy_t want = star;
  want.min_compress_bytes = 16384;
  EXPECT_TRUE(same_policy(resolve(g[0], nullptr), want));
  EXPECT_TRUE(same_policy(resolve(g[0], "fc.weight"), want));
}

TEST(PolicyPreset, OtherPatternsAreKeptAndLaterOnesWin) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_policy_t emb = minmax4();
  emb.bits = 2;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "emb*", &emb), QC_SUCCESS);
  qc_policy_t exact_bias = minmax4();
  exact_bias.bits = 8;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "head.bias", &exact_bias), QC_SUCCESS);
  const qc_policy_t base = minmax4();
  ASSERT_EQ(qc_comm_apply_preset(g[0], "cgx", &base), QC_SUCCESS) << qc_last_error();
  EXPECT_EQ(resolve(g[0], "emb.weight").bits, 2) << "a pattern the preset does not set stays";
  EXPECT_EQ(resolve(g[0], "head.bias").codec, QC_CODEC_MINMAX) << "exact names beat the globs";
  EXPECT_EQ(resolve(g[0], "head.bias").bits, 8);
  // A more specific glob set after the preset wins over "*bias*".
  qc_policy_t enc = minmax4();
  enc.bits = 3;
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "encoder.*", &enc), QC_SUCCESS);
  EXPECT_EQ(resolve(g[0], "encoder.0.attn.bias").bits, 3);
  EXPECT_EQ(resolve(g[0], "decoder.0.attn.bias").codec, QC_CODEC_NONE);
}

TEST(PolicyPreset, ErrorsChangeNothing) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  const qc_policy_t base = minmax4();
  const qc_policy_t before_star = resolve(g[0], nullptr);
  for (const char* bad : {"foo", "CGX", "", "cgx "}) {
    EXPECT_EQ(qc_comm_apply_preset(g[0], bad, &base), QC_ERROR_INVALID_ARGUMENT) << bad;
    const std::string msg = qc_last_error();
    EXPECT_NE(msg.find("qc_comm_apply_preset"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("\"") + bad + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("known presets: cgx"), std::string::npos) << msg;
  }
  EXPECT_EQ(qc_comm_apply_preset(nullptr, "cgx", &base), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("'comm'"), std::string::npos) << qc_last_error();
  EXPECT_EQ(qc_comm_apply_preset(g[0], nullptr, &base), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("'name'"), std::string::npos) << qc_last_error();
  qc_policy_t bad_base = minmax4();
  bad_base.bits = 9;
  EXPECT_EQ(qc_comm_apply_preset(g[0], "cgx", &bad_base), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qc_last_error()).find("'base'"), std::string::npos) << qc_last_error();
  bad_base = minmax4();
  bad_base.struct_size = sizeof(qc_policy_t) + 8;
  EXPECT_EQ(qc_comm_apply_preset(g[0], "cgx", &bad_base), QC_ERROR_VERSION);
  // Nothing was set: "*" as before, and biases still resolve to "*".
  EXPECT_TRUE(same_policy(resolve(g[0], nullptr), before_star));
  EXPECT_TRUE(same_policy(resolve(g[0], "fc.bias"), before_star));
  // With a star policy that compresses, a failed preset leaves biases compressed.
  ASSERT_EQ(qc_comm_set_layer_policy(g[0], "*", &base), QC_SUCCESS);
  EXPECT_EQ(qc_comm_apply_preset(g[0], "nope", &base), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(resolve(g[0], "fc.bias").codec, QC_CODEC_MINMAX);
}

// Three ranks (odd, so the algorithms' uneven splits are exercised): the bias
// and norm layers come out exact although they are above the threshold, the
// large weight is quantized exactly as the emulation of the base policy says,
// and a weight below 16 KiB goes uncompressed.
TEST(PolicyPreset, AllreduceFollowsThePreset) {
  const int n = 3;
  const size_t big = 5000;  // 20000 bytes: above the 16 KiB threshold
  Group g(n);
  ASSERT_TRUE(g.ok());
  const qc_policy_t base = minmax4();
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(qc_comm_apply_preset(g[r], "cgx", &base), QC_SUCCESS) << qc_last_error();

  // Integers: every sum is exact in float32 whatever the order.
  const auto ints = integer_inputs(n, big, 7, -100, 100);
  std::vector<float> exact(big, 0.0f);
  for (const auto& v : ints)
    for (size_t i = 0; i < big; ++i) exact[i] += v[i];
  for (const char* layer : {"encoder.0.attn.bias", "layer3.bn1.weight", "blocks.0.norm1.weight"}) {
    const auto res = allreduce_on(g, encode_all(ints, QC_DTYPE_FLOAT32), big, QC_DTYPE_FLOAT32,
                                  QC_OP_SUM, layer);
    ASSERT_TRUE(res.all_ok()) << layer << ": " << res.describe();
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(decode(res.out[r], QC_DTYPE_FLOAT32), exact) << layer << " rank " << r;
    qc_layer_stats_t ls;
    ls.struct_size = sizeof ls;
    ASSERT_EQ(qc_comm_get_layer_stats(g[0], layer, &ls), QC_SUCCESS);
    EXPECT_EQ(ls.last_rel_error, 0.0) << layer << ": sent losslessly";
  }

  // The weight: quantized with base (the same bytes as the emulation of
  // base), so it differs from the exact sum, within the 4-bit grid's error.
  const auto w = integer_inputs(n, big, 7, -100, 100);
  const auto res = allreduce_on(g, encode_all(w, QC_DTYPE_FLOAT32), big, QC_DTYPE_FLOAT32,
                                QC_OP_SUM, "encoder.0.attn.weight");
  ASSERT_TRUE(res.all_ok()) << res.describe();
  qc_policy_t emu_policy = base;
  emu_policy.min_compress_bytes = 16384;
  const auto emu =
      allreduce_emulate(n, encode_all(w, QC_DTYPE_FLOAT32), big, QC_DTYPE_FLOAT32, QC_OP_SUM,
                        emu_policy);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  const auto out = decode(res.out[0], QC_DTYPE_FLOAT32);
  for (int r = 1; r < n; ++r) EXPECT_EQ(res.out[r], res.out[0]) << "replicas differ";
  EXPECT_EQ(res.out[0], emu.out[0]) << "quantized with the base policy";
  double max_err = 0;
  for (size_t i = 0; i < big; ++i) max_err = std::max(max_err, double(std::fabs(out[i] - exact[i])));
  // Inputs in [-100, 100]: a 4-bit bucket step is at most 200/15 per
  // rank's encode and 600/15 for a partial sum; each value goes through at
  // most n encodes on its way, half a step each.
  EXPECT_GT(max_err, 0.5) << "4-bit minmax must lose something";
  EXPECT_LT(max_err, n * 0.5 * 600.0 / 15.0);
  qc_layer_stats_t ls;
  ls.struct_size = sizeof ls;
  ASSERT_EQ(qc_comm_get_layer_stats(g[0], "encoder.0.attn.weight", &ls), QC_SUCCESS);
  EXPECT_GT(ls.last_rel_error, 0.0);

  // A weight below 16 KiB (1000 floats = 4000 bytes) goes uncompressed.
  const size_t small = 1000;
  const auto s = integer_inputs(n, small, 9, -100, 100);
  std::vector<float> s_exact(small, 0.0f);
  for (const auto& v : s)
    for (size_t i = 0; i < small; ++i) s_exact[i] += v[i];
  const auto res_small = allreduce_on(g, encode_all(s, QC_DTYPE_FLOAT32), small,
                                      QC_DTYPE_FLOAT32, QC_OP_SUM, "head.weight");
  ASSERT_TRUE(res_small.all_ok()) << res_small.describe();
  EXPECT_EQ(decode(res_small.out[0], QC_DTYPE_FLOAT32), s_exact);
}

// The same in one fused call (a DDP bucket): per segment, as documented.
TEST(PolicyPreset, FusedBucketFollowsThePreset) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  const qc_policy_t base = minmax4();
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_comm_apply_preset(g[r], "cgx", &base), QC_SUCCESS);
  const std::vector<size_t> counts = {5000, 5000, 64, 5000};
  const std::vector<const char*> layers = {"fc1.weight", "fc1.bias", "ln_f.weight",
                                           "h.0.ln_2.weight"};
  const size_t total = 15064;
  const auto in = integer_inputs(n, total, 3, -100, 100);
  std::vector<float> exact(total, 0.0f);
  for (const auto& v : in)
    for (size_t i = 0; i < total; ++i) exact[i] += v[i];
  std::vector<std::vector<float>> out(n, std::vector<float>(total, -7.0f));
  std::vector<qc_status_t> st(n, QC_ERROR_INTERNAL);
  run_ranks(n, [&](int r) {
    st[r] = qc_allreduce_segments(g[r], in[r].data(), out[r].data(), counts.size(),
                                  counts.data(), layers.data(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                                  nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(st[r], QC_SUCCESS) << "rank " << r;
  double weight_err = 0;
  for (size_t i = 0; i < 5000; ++i)
    weight_err = std::max(weight_err, double(std::fabs(out[0][i] - exact[i])));
  EXPECT_GT(weight_err, 0.5) << "fc1.weight is quantized";
  for (size_t i = 5000; i < total; ++i) ASSERT_EQ(out[0][i], exact[i]) << "element " << i;
  for (int r = 1; r < n; ++r) EXPECT_EQ(out[r], out[0]);
}

}  // namespace
