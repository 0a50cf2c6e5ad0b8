// Every call is accounted: qc_comm_get_stats after a known series of calls.
#include <cstdlib>
#include <cstring>

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

// ---- per-layer counters ---------------------------------------------------

qc_layer_stats_t layer_stats_of(qc_comm_t c, const char* layer) {
  qc_layer_stats_t s;
  std::memset(&s, 0xFF, sizeof s);
  s.struct_size = sizeof s;
  EXPECT_EQ(qc_comm_get_layer_stats(c, layer, &s), QC_SUCCESS) << qc_last_error();
  return s;
}

std::vector<std::string> layer_names(qc_comm_t c) {
  size_t n = 0;
  EXPECT_EQ(qc_comm_layer_count(c, &n), QC_SUCCESS);
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    size_t len = 0;
    EXPECT_EQ(qc_comm_layer_name(c, i, nullptr, 0, &len), QC_SUCCESS);
    std::string name(len + 1, '\0');
    EXPECT_EQ(qc_comm_layer_name(c, i, &name[0], name.size(), &len), QC_SUCCESS);
    name.resize(len);
    names.push_back(name);
  }
  return names;
}

TEST(LayerStats, CountsEachLayerOnItsOwn) {
  const int n = 3;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t lossy = make_policy(QC_ALGO_SRA);
  lossy.codec = QC_CODEC_MINMAX;
  lossy.bits = 2;
  ASSERT_EQ(g.set_policy("fc.*", lossy), QC_SUCCESS);
  const auto big = encode_all(random_inputs(n, 3000, 1), QC_DTYPE_FLOAT32);
  const auto small = encode_all(random_inputs(n, 100, 2), QC_DTYPE_FLOAT32);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(allreduce_on(g, big, 3000, QC_DTYPE_FLOAT32, QC_OP_SUM, "fc.weight").all_ok());
  ASSERT_TRUE(allreduce_on(g, small, 100, QC_DTYPE_FLOAT32, QC_OP_SUM, "bias").all_ok());
  ASSERT_TRUE(allreduce_on(g, small, 100, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr).all_ok());
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(layer_names(g[r]), (std::vector<std::string>{"*", "bias", "fc.weight"}));
    const qc_layer_stats_t fc = layer_stats_of(g[r], "fc.weight");
    const qc_layer_stats_t bias = layer_stats_of(g[r], "bias");
    const qc_layer_stats_t star = layer_stats_of(g[r], nullptr);
    EXPECT_EQ(fc.calls, 3u);
    EXPECT_EQ(fc.count, 3000u);
    EXPECT_EQ(fc.logical_bytes, 3u * 3000 * 4);
    EXPECT_EQ(bias.calls, 1u);
    EXPECT_EQ(star.calls, 1u);
    // 2-bit minmax: a real error, and a sixth or less of the bytes of the
    // uncompressed layers per element.
    EXPECT_GT(fc.last_rel_error, 0.01);
    EXPECT_LT(fc.last_rel_error, 1.0);
    EXPECT_EQ(bias.last_rel_error, 0.0) << "codec none is lossless";
    EXPECT_LT(double(fc.wire_bytes) / fc.logical_bytes,
              double(bias.wire_bytes) / bias.logical_bytes / 6);
    // Mean squared norm of this rank's input: the inputs do not change.
    double sq = 0;
    const float* x = reinterpret_cast<const float*>(big[r].data());
    for (size_t i = 0; i < 3000; ++i) sq += double(x[i]) * x[i];
    EXPECT_NEAR(fc.mean_sq_norm, sq, 1e-9 * sq);
    // The per-layer counters add up to the communicator's.
    const qc_stats_t all = stats_of(g[r]);
    EXPECT_EQ(fc.calls + bias.calls + star.calls, all.calls);
    EXPECT_EQ(fc.logical_bytes + bias.logical_bytes + star.logical_bytes, all.logical_bytes);
    EXPECT_EQ(fc.wire_bytes + bias.wire_bytes + star.wire_bytes, all.wire_bytes);
  }
  // A layer no call used: zeros.
  const qc_layer_stats_t none = layer_stats_of(g[0], "never");
  EXPECT_EQ(none.calls, 0u);
  EXPECT_EQ(none.wire_bytes, 0u);
}

TEST(LayerStats, ErrorEstimateTracksTheWidth) {
  const int n = 2;
  Group g(n);
  ASSERT_TRUE(g.ok());
  const auto in = encode_all(random_inputs(n, 4096, 3), QC_DTYPE_FLOAT32);
  double previous = 1e9;
  for (int bits : {2, 4, 8}) {
    qc_policy_t p = make_policy(QC_ALGO_RING);
    p.codec = QC_CODEC_MINMAX;
    p.bits = bits;
    const std::string layer = "w" + std::to_string(bits);
    ASSERT_EQ(g.set_policy(layer.c_str(), p), QC_SUCCESS);
    ASSERT_TRUE(allreduce_on(g, in, 4096, QC_DTYPE_FLOAT32, QC_OP_SUM, layer.c_str()).all_ok());
    const double e = layer_stats_of(g[0], layer.c_str()).last_rel_error;
    EXPECT_GT(e, 0.0) << bits;
    EXPECT_LT(e, previous / 2) << bits << " bits should at least halve the error";
    previous = e;
  }
}

// SRA sums its float32 input's norm a slice at a time while it waits for
// transfers (core/executors/input_norm.h); ring measures it before it
// starts. Same input, same number, to the bit: the slices are summed in
// one order whenever they run. A tensor of several slices, in pieces.
TEST(LayerStats, NormMeasuredWhileWaitingIsTheSameNumber) {
  const int n = 3;
  const size_t count = 3 * 2 * 65536 + 1001;
  Group g(n);
  ASSERT_TRUE(g.ok());
  for (qc_algorithm_t algo : {QC_ALGO_SRA, QC_ALGO_RING}) {
    qc_policy_t p = make_policy(algo);
    p.codec = QC_CODEC_MINMAX;
    ASSERT_EQ(g.set_policy(algo == QC_ALGO_SRA ? "sra" : "ring", p), QC_SUCCESS);
  }
  const auto in = encode_all(random_inputs(n, count, 11), QC_DTYPE_FLOAT32);
  ASSERT_TRUE(allreduce_on(g, in, count, QC_DTYPE_FLOAT32, QC_OP_SUM, "sra").all_ok());
  ASSERT_TRUE(allreduce_on(g, in, count, QC_DTYPE_FLOAT32, QC_OP_SUM, "ring").all_ok());
  for (int r = 0; r < n; ++r) {
    const double sra = layer_stats_of(g[r], "sra").mean_sq_norm;
    const double ring = layer_stats_of(g[r], "ring").mean_sq_norm;
    EXPECT_GT(sra, 0.0) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(&sra, &ring, sizeof sra))
        << "rank " << r << ": SRA " << sra << ", ring " << ring;
  }
}

// codec_seconds_in_flight: the codec time spent with transfers posted. A
// pipelined SRA encodes piece c+1 while piece c is on the wire, so some of
// its codec time overlaps; one rank posts no transfer at all.
TEST(StatsMisc, CodecTimeInFlightIsPartOfTheCodecTime) {
  for (int n : {1, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    ASSERT_EQ(setenv("QC_PIPELINE_CHUNK", "4K", 1), 0);
    Group g(n);
    unsetenv("QC_PIPELINE_CHUNK");
    ASSERT_TRUE(g.ok());
    qc_policy_t p = make_policy(QC_ALGO_SRA);
    p.codec = QC_CODEC_MINMAX;
    ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
    const size_t count = 3 * 8192 + 5;
    const auto in = encode_all(random_inputs(n, count, 21), QC_DTYPE_FLOAT32);
    ASSERT_TRUE(allreduce_on(g, in, count, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr).all_ok());
    for (int r = 0; r < n; ++r) {
      const qc_stats_t s = stats_of(g[r]);
      EXPECT_GE(s.codec_seconds_in_flight, 0.0) << "rank " << r;
      EXPECT_LE(s.codec_seconds_in_flight, s.codec_seconds) << "rank " << r;
      if (n == 1) {
        EXPECT_EQ(s.codec_seconds_in_flight, 0.0) << "one rank sends nothing";
      } else {
        EXPECT_GT(s.codec_seconds_in_flight, 0.0) << "rank " << r << ": no overlap counted";
      }
    }
  }
}

TEST(LayerStats, BadArguments) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  qc_layer_stats_t s;
  s.struct_size = sizeof s;
  size_t len = 0;
  char name[2];
  EXPECT_EQ(qc_comm_get_layer_stats(nullptr, "x", &s), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_get_layer_stats(g[0], "x", nullptr), QC_ERROR_INVALID_ARGUMENT);
  s.struct_size = sizeof s + 8;
  EXPECT_EQ(qc_comm_get_layer_stats(g[0], "x", &s), QC_ERROR_VERSION);
  EXPECT_EQ(qc_comm_layer_count(g[0], nullptr), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_layer_name(g[0], 0, name, sizeof name, &len), QC_ERROR_INVALID_ARGUMENT)
      << "no layer yet";
  EXPECT_NE(std::string(qc_last_error()).find("0 layers"), std::string::npos) << qc_last_error();
  const auto in = encode_all(random_inputs(1, 8, 3), QC_DTYPE_FLOAT32);
  ASSERT_TRUE(allreduce_on(g, in, 8, QC_DTYPE_FLOAT32, QC_OP_SUM, "long_name").all_ok());
  EXPECT_EQ(qc_comm_layer_name(g[0], 0, name, sizeof name, &len), QC_ERROR_INVALID_ARGUMENT)
      << "capacity 2 for a 9-character name";
  EXPECT_EQ(qc_comm_layer_name(g[0], 0, nullptr, 0, &len), QC_SUCCESS);
  EXPECT_EQ(len, 9u);
  EXPECT_EQ(qc_comm_layer_name(g[0], 0, nullptr, 10, &len), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(qc_comm_layer_name(g[0], 0, name, 2, nullptr), QC_ERROR_INVALID_ARGUMENT);
}

}  // namespace
