// Every call is accounted: qc_comm_get_stats after a known series of calls.
#include "test_util.h"

using namespace qct;

namespace {

qc_stats_t stats_of(qc_comm_t c) {
  qc_stats_t s;
  std::memset(&s, 0xFF, sizeof s);
  s.struct_size = sizeof s;
  EXPECT_EQ(qc_comm_get_stats(c, &s), QC_SUCCESS) << qc_last_error();
  return s;
}

struct StatsCase {
  qc_algorithm_t algo;
  int n;
};

class Stats : public ::testing::TestWithParam<StatsCase> {};

TEST_P(Stats, AllreduceCountsCallsAndBytes) {
  const StatsCase c = GetParam();
  const int k = 4;
  const size_t count = 1234;
  Group g(c.n);
  ASSERT_TRUE(g.ok());
  for (int r = 0; r < c.n; ++r) {
    const qc_stats_t s = stats_of(g[r]);
    EXPECT_EQ(s.calls, 0u);
    EXPECT_EQ(s.logical_bytes, 0u);
    EXPECT_EQ(s.wire_bytes, 0u);
  }
  ASSERT_EQ(g.set_policy("*", make_policy(c.algo)), QC_SUCCESS);
  const auto bytes = encode_all(random_inputs(c.n, count, 8), QC_DTYPE_FLOAT32);
  uint64_t wire_after_first = 0;
  for (int i = 0; i < k; ++i) {
    const auto res = allreduce_on(g, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM);
    ASSERT_TRUE(res.all_ok()) << res.describe();
    if (i == 0) wire_after_first = stats_of(g[0]).wire_bytes;
  }
  uint64_t total_wire = 0;
  for (int r = 0; r < c.n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const qc_stats_t s = stats_of(g[r]);
    EXPECT_EQ(s.struct_size, sizeof(qc_stats_t));
    EXPECT_EQ(s.calls, static_cast<uint64_t>(k));
    EXPECT_EQ(s.logical_bytes, static_cast<uint64_t>(k) * count * 4);
    if (c.n == 1) {
      EXPECT_EQ(s.wire_bytes, 0u) << "a single rank sends nothing";
    }
    EXPECT_GE(s.codec_seconds, 0.0);
    EXPECT_GE(s.transport_seconds, 0.0);
    EXPECT_TRUE(std::isfinite(s.codec_seconds));
    EXPECT_TRUE(std::isfinite(s.transport_seconds));
    total_wire += s.wire_bytes;
  }
  if (c.n > 1) {
    EXPECT_GT(total_wire, 0u);
    // Some data must cross: at least (n-1)/n of the payload leaves the ranks
    // in total, and at most a generous multiple of it.
    EXPECT_GE(total_wire, static_cast<uint64_t>(k) * count * 4 * (c.n - 1) / c.n);
    // Identical calls cost the same on the wire.
    EXPECT_EQ(stats_of(g[0]).wire_bytes, static_cast<uint64_t>(k) * wire_after_first);
  }
}

std::vector<StatsCase> stats_cases() {
  std::vector<StatsCase> v;
  for (auto algo : all_algorithms())
    for (int n : {1, 2, 3, 8}) v.push_back({algo, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Local, Stats, ::testing::ValuesIn(stats_cases()),
                         [](const ::testing::TestParamInfo<StatsCase>& i) {
                           return std::string(algo_name(i.param.algo)) + "_n" +
                                  std::to_string(i.param.n);
                         });

TEST(StatsMisc, WireBytesPositiveOnEveryRankForRing) {
  // Ring: every rank sends in every step.
  const int n = 4;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", make_policy(QC_ALGO_RING)), QC_SUCCESS);
  const auto bytes = encode_all(random_inputs(n, 4000, 1), QC_DTYPE_FLOAT32);
  ASSERT_TRUE(allreduce_on(g, bytes, 4000, QC_DTYPE_FLOAT32, QC_OP_AVG).all_ok());
  for (int r = 0; r < n; ++r) EXPECT_GT(stats_of(g[r]).wire_bytes, 0u) << "rank " << r;
}

TEST(StatsMisc, HalfPrecisionLogicalBytesAndAlltoallCalls) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  const size_t count = 500;
  const auto bytes = encode_all(random_inputs(n, count, 2, QC_DTYPE_FLOAT16), QC_DTYPE_FLOAT16);
  ASSERT_TRUE(allreduce_on(g, bytes, count, QC_DTYPE_FLOAT16, QC_OP_SUM).all_ok());
  for (int r = 0; r < n; ++r) {
    const qc_stats_t s = stats_of(g[r]);
    EXPECT_EQ(s.calls, 1u);
    EXPECT_EQ(s.logical_bytes, count * 2);
  }
  // An alltoall is a call too; a zero-count allreduce is a call with 0 bytes.
  const auto a2a = encode_all(random_inputs(n, n * 10, 3), QC_DTYPE_FLOAT32);
  ASSERT_TRUE(alltoall_on(g, a2a, 10, QC_DTYPE_FLOAT32).all_ok());
  ASSERT_TRUE(allreduce_on(g, std::vector<Bytes>(n), 0, QC_DTYPE_FLOAT32, QC_OP_SUM).all_ok());
  for (int r = 0; r < n; ++r) {
    const qc_stats_t s = stats_of(g[r]);
    EXPECT_EQ(s.calls, 3u) << "rank " << r;
    EXPECT_GE(s.logical_bytes, count * 2) << "rank " << r;
  }
}

TEST(StatsMisc, BadArguments) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_stats_t s;
  s.struct_size = 0;
  EXPECT_NE(qc_comm_get_stats(g[0], nullptr), QC_SUCCESS);
  EXPECT_NE(qc_comm_get_stats(nullptr, &s), QC_SUCCESS);
  s.struct_size = 3;
  EXPECT_EQ(qc_comm_get_stats(g[0], &s), QC_ERROR_INVALID_ARGUMENT);
  s.struct_size = sizeof(qc_stats_t) + 64;
  EXPECT_EQ(qc_comm_get_stats(g[0], &s), QC_ERROR_VERSION);
}

}  // namespace
