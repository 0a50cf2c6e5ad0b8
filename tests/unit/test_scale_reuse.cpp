// policy.scale_update_period (paper 001 §3.2): a layer's scales are computed
// on the first call of every period and reused by the next K-1 calls of the
// same shape, with values beyond the kept range saturating. Checked through
// the public API against the emulator (one call = fresh scales) on every
// algorithm and scaled codec, and on the native global-codec path, where a
// reusing call also skips the norm round.
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace qct;

namespace {

constexpr int kRanks = 3;
constexpr size_t kCount = 1000;

std::vector<std::vector<float>> scaled(const std::vector<std::vector<float>>& in, float k) {
  auto out = in;
  for (auto& v : out)
    for (auto& x : v) x *= k;
  return out;
}

// Relative L2 error of rank 0's result against the exact sum of the inputs.
double rel_error(const Bytes& out, const std::vector<std::vector<float>>& in) {
  const std::vector<float> got = decode(out, QC_DTYPE_FLOAT32);
  double err = 0, sig = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double exact = 0;
    for (const auto& v : in) exact += v[i];
    err += (got[i] - exact) * (got[i] - exact);
    sig += exact * exact;
  }
  return std::sqrt(err / sig);
}

struct Case {
  qc_algorithm_t algo;
  qc_codec_t codec;
  int bits;
};

class ScaleReuse : public ::testing::TestWithParam<Case> {};

TEST_P(ScaleReuse, ReusesWithinThePeriodAndRefreshesAfter) {
  const Case c = GetParam();
  qc_policy_t p = make_policy(c.algo);
  p.codec = c.codec;
  p.bits = c.bits;
  p.scale_update_period = 3;
  qc_policy_t fresh = p;
  fresh.scale_update_period = 1;
  const auto a = random_inputs(kRanks, kCount, 17);
  const auto big = scaled(a, 4.0f);  // beyond every kept range
  const auto a_bytes = encode_all(a, QC_DTYPE_FLOAT32);
  const auto big_bytes = encode_all(big, QC_DTYPE_FLOAT32);
  const auto emu_a = allreduce_emulate(kRanks, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  const auto emu_big =
      allreduce_emulate(kRanks, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  ASSERT_EQ(emu_a.status, QC_SUCCESS) << emu_a.error;
  ASSERT_EQ(emu_big.status, QC_SUCCESS) << emu_big.error;

  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("w", p), QC_SUCCESS);
  // Call 1 refreshes: exactly a one-call run. Call 2, same data, reuses
  // scales equal to what it would compute: the same bytes again.
  const RunResult r1 = allreduce_on(g, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  const RunResult r2 = allreduce_on(g, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  // Call 3 reuses call 1's scales on 4x larger values: saturated.
  const RunResult r3 = allreduce_on(g, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  // Call 4 starts the next period: fresh scales again.
  const RunResult r4 = allreduce_on(g, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  for (const RunResult* r : {&r1, &r2, &r3, &r4}) {
    ASSERT_TRUE(r->all_ok()) << r->describe();
    EXPECT_TRUE(replicas_identical(r->out));
  }
  EXPECT_TRUE(bytes_equal(emu_a.out[0], r1.out[0], "refresh call vs one-call emulation"));
  EXPECT_TRUE(bytes_equal(r1.out[0], r2.out[0], "reuse on the same data vs refresh"));
  EXPECT_FALSE(bytes_equal(emu_big.out[0], r3.out[0], "reusing call vs fresh scales"));
  // minmax clips 4x values to the kept range, onebit keeps a 4x too small
  // magnitude: both lose accuracy. (qsgd's kept norm is a bucket norm, far
  // above single values, so its grid just gets finer: no direction to check.)
  if (c.codec != QC_CODEC_QSGD) {
    EXPECT_GT(rel_error(r3.out[0], big), 1.1 * rel_error(emu_big.out[0], big))
        << "reused scales on 4x values cost accuracy";
  }
  EXPECT_TRUE(bytes_equal(emu_big.out[0], r4.out[0], "next period's refresh vs emulation"));

  // The default period (1) never reuses: the same sequence matches fresh runs.
  Group h(kRanks);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h.set_policy("w", fresh), QC_SUCCESS);
  ASSERT_TRUE(allreduce_on(h, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w").all_ok());
  const RunResult f2 = allreduce_on(h, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  ASSERT_TRUE(f2.all_ok()) << f2.describe();
  const auto emu_fresh =
      allreduce_emulate(kRanks, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, fresh);
  EXPECT_TRUE(bytes_equal(emu_fresh.out[0], f2.out[0], "period 1 vs emulation"));
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const char* codec = info.param.codec == QC_CODEC_MINMAX ? "Minmax"
                      : info.param.codec == QC_CODEC_QSGD ? "Qsgd"
                                                          : "Onebit";
  return std::string(algo_name(info.param.algo)) + "_" + codec + std::to_string(info.param.bits);
}

INSTANTIATE_TEST_SUITE_P(
    Local, ScaleReuse,
    ::testing::Values(Case{QC_ALGO_RING, QC_CODEC_MINMAX, 4}, Case{QC_ALGO_SRA, QC_CODEC_MINMAX, 2},
                      Case{QC_ALGO_TREE, QC_CODEC_MINMAX, 8},
                      Case{QC_ALGO_RECURSIVE_DOUBLING, QC_CODEC_MINMAX, 4},
                      Case{QC_ALGO_RING, QC_CODEC_QSGD, 4}, Case{QC_ALGO_SRA, QC_CODEC_QSGD, 3},
                      Case{QC_ALGO_RING, QC_CODEC_ONEBIT, 1}),
    case_name);

qc_policy_t ring_minmax4(int period) {
  qc_policy_t p = make_policy(QC_ALGO_RING);
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.scale_update_period = period;
  return p;
}

// Random inputs and the same times 4 (beyond every range kept from them).
struct Inputs {
  explicit Inputs(uint64_t seed)
      : a(random_inputs(kRanks, kCount, seed)),
        big(scaled(a, 4.0f)),
        a_bytes(encode_all(a, QC_DTYPE_FLOAT32)),
        big_bytes(encode_all(big, QC_DTYPE_FLOAT32)) {}
  std::vector<std::vector<float>> a, big;
  std::vector<Bytes> a_bytes, big_bytes;
};

// A policy change starts a new period at once: the first call under the new
// policy computes its scales, whatever the old period's position.
TEST(ScaleReuseMisc, PolicyChangeRestartsThePeriod) {
  qc_policy_t p = ring_minmax4(10);
  const Inputs in(5);
  const auto& a_bytes = in.a_bytes;
  const auto& big_bytes = in.big_bytes;
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("w", p), QC_SUCCESS);
  ASSERT_TRUE(allreduce_on(g, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w").all_ok());
  p.bits = 3;
  ASSERT_EQ(g.set_policy("w", p), QC_SUCCESS);
  const RunResult r = allreduce_on(g, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  ASSERT_TRUE(r.all_ok()) << r.describe();
  const auto emu = allreduce_emulate(kRanks, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  EXPECT_TRUE(bytes_equal(emu.out[0], r.out[0], "first call under the new policy"));
  // A different count is another shape: fresh scales too.
  const auto small = encode_all(random_inputs(kRanks, kCount / 2, 6), QC_DTYPE_FLOAT32);
  const auto emu_small =
      allreduce_emulate(kRanks, small, kCount / 2, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  const RunResult s = allreduce_on(g, small, kCount / 2, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  ASSERT_TRUE(s.all_ok()) << s.describe();
  EXPECT_TRUE(bytes_equal(emu_small.out[0], s.out[0], "first call of another count"));
}

// Layers keep their own periods: calls to another layer in between do not
// advance or reset this one's.
TEST(ScaleReuseMisc, EachLayerHasItsOwnPeriod) {
  const qc_policy_t p = ring_minmax4(2);
  const Inputs in(8);
  const auto& big = in.big;
  const auto& a_bytes = in.a_bytes;
  const auto& big_bytes = in.big_bytes;
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  ASSERT_TRUE(allreduce_on(g, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "x").all_ok());
  ASSERT_TRUE(allreduce_on(g, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "y").all_ok());
  // x's second call reuses x's first scales (y's call did not refresh x).
  const RunResult x2 = allreduce_on(g, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "x");
  ASSERT_TRUE(x2.all_ok()) << x2.describe();
  const auto emu = allreduce_emulate(kRanks, big_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  EXPECT_FALSE(bytes_equal(emu.out[0], x2.out[0], "x's reusing call"));
  EXPECT_GT(rel_error(x2.out[0], big), 2 * rel_error(emu.out[0], big));
}

// Native (global codecs, paper 001 §B.1): a reusing call skips the norm
// agreement, so it sends fewer bytes, and a value above the kept norm
// saturates at it; the next period's first call computes the norm again.
TEST(ScaleReuseMisc, NativeKeepsTheAgreedNormAndSkipsItsRound) {
  qc_policy_t p = make_policy(QC_ALGO_NATIVE);
  p.codec = QC_CODEC_GLOBAL_LINEAR;
  p.bits = 8;
  p.scale_update_period = 2;
  // Call 3 against a first call's emulation: the same bits only without
  // the per-call random stream of the default (auto: stochastic) rounding.
  p.rounding = QC_ROUND_NEAREST_EVEN;
  auto a = random_inputs(kRanks, kCount, 9);
  double norm_sq = 0;
  for (const auto& v : a)
    for (float x : v) norm_sq += double(x) * x;
  auto spike = a;
  spike[0][0] = static_cast<float>(4 * std::sqrt(norm_sq));  // far above a's norm
  const auto a_bytes = encode_all(a, QC_DTYPE_FLOAT32);
  const auto spike_bytes = encode_all(spike, QC_DTYPE_FLOAT32);
  Group g(kRanks);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("w", p), QC_SUCCESS);
  auto wire = [&]() {
    qc_stats_t s;
    s.struct_size = sizeof s;
    EXPECT_EQ(qc_comm_get_stats(g[0], &s), QC_SUCCESS);
    return s.wire_bytes;
  };
  const uint64_t w0 = wire();
  ASSERT_TRUE(allreduce_on(g, a_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w").all_ok());
  const uint64_t w1 = wire();
  const RunResult r2 = allreduce_on(g, spike_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  const uint64_t w2 = wire();
  const RunResult r3 = allreduce_on(g, spike_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  ASSERT_TRUE(r2.all_ok()) << r2.describe();
  ASSERT_TRUE(r3.all_ok()) << r3.describe();
  EXPECT_TRUE(replicas_identical(r2.out));
  EXPECT_LT(w2 - w1, w1 - w0) << "the reusing call skips the norm round";
  double exact0 = 0;
  for (const auto& v : spike) exact0 += v[0];
  const float got2 = decode(r2.out[0], QC_DTYPE_FLOAT32)[0];
  const float got3 = decode(r3.out[0], QC_DTYPE_FLOAT32)[0];
  EXPECT_LT(got2, 0.5 * exact0) << "the spike saturates at the kept norm";
  EXPECT_NEAR(got3, exact0, 0.05 * exact0) << "a refreshed norm covers the spike";
  const auto emu = allreduce_emulate(kRanks, spike_bytes, kCount, QC_DTYPE_FLOAT32, QC_OP_SUM, p);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  EXPECT_TRUE(bytes_equal(emu.out[0], r3.out[0], "refresh call vs emulation"));
}

// alltoall keeps its own period per layer, like allreduce.
TEST(ScaleReuseMisc, Alltoall) {
  qc_policy_t p = make_policy();
  p.codec = QC_CODEC_MINMAX;
  p.bits = 4;
  p.scale_update_period = 2;
  const size_t per_rank = 300;
  const auto a = random_inputs(kRanks, per_rank * kRanks, 12);
  const auto a_bytes = encode_all(a, QC_DTYPE_FLOAT32);
  const auto big_bytes = encode_all(scaled(a, 4.0f), QC_DTYPE_FLOAT32);
  Group g(kRanks), h(kRanks);
  ASSERT_TRUE(g.ok() && h.ok());
  ASSERT_EQ(g.set_policy("e", p), QC_SUCCESS);
  p.scale_update_period = 1;
  ASSERT_EQ(h.set_policy("e", p), QC_SUCCESS);
  const RunResult g1 = alltoall_on(g, a_bytes, per_rank, QC_DTYPE_FLOAT32, "e");
  const RunResult g2 = alltoall_on(g, big_bytes, per_rank, QC_DTYPE_FLOAT32, "e");
  const RunResult h1 = alltoall_on(h, a_bytes, per_rank, QC_DTYPE_FLOAT32, "e");
  const RunResult h2 = alltoall_on(h, big_bytes, per_rank, QC_DTYPE_FLOAT32, "e");
  for (const RunResult* r : {&g1, &g2, &h1, &h2}) ASSERT_TRUE(r->all_ok()) << r->describe();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(bytes_equal(h1.out[r], g1.out[r], "refresh call vs period 1"));
    EXPECT_FALSE(bytes_equal(h2.out[r], g2.out[r], "reusing call vs period 1"));
  }
}

}  // namespace
