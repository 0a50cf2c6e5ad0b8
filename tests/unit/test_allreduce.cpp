// Allreduce on the local transport: correctness against the float64 sum,
// replica consistency, emulation = threads-driven run, dtypes, in place,
// non-finite propagation, many collectives in a row and large counts.
#include <set>
#include <tuple>

#include "test_util.h"

using namespace qct;

namespace {

const int kRankCounts[] = {1, 2, 3, 5, 8, 13};

// Awkward counts for n ranks: 0, 1, n-1, n+1, 10007 (deduplicated, sorted).
std::vector<size_t> awkward_counts(int n) {
  std::set<size_t> s = {0, 1, static_cast<size_t>(n - 1), static_cast<size_t>(n + 1), 10007};
  return {s.begin(), s.end()};
}

uint64_t case_seed(int a, int b, size_t c, int d) {
  return (static_cast<uint64_t>(a) * 131 + static_cast<uint64_t>(b)) * 1000003 + c * 17 +
         static_cast<uint64_t>(d);
}

// ===========================================================================
// float32, every algorithm x rank count x awkward count x op
// ===========================================================================
struct ArCase {
  qc_algorithm_t algo;
  int n;
  size_t count;
  qc_reduce_op_t op;
};

std::vector<ArCase> allreduce_cases() {
  std::vector<ArCase> v;
  for (auto algo : all_algorithms())
    for (int n : kRankCounts)
      for (size_t c : awkward_counts(n))
        for (auto op : {QC_OP_SUM, QC_OP_AVG}) v.push_back({algo, n, c, op});
  return v;
}

class AllreduceF32 : public ::testing::TestWithParam<ArCase> {};

TEST_P(AllreduceF32, ReplicasIdenticalAndWithinFp32Rounding) {
  const ArCase c = GetParam();
  const auto in = random_inputs(c.n, c.count, case_seed(c.algo, c.n, c.count, c.op));
  const auto res = allreduce_threads(c.n, encode_all(in, QC_DTYPE_FLOAT32), c.count,
                                     QC_DTYPE_FLOAT32, c.op, make_policy(c.algo));
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(replicas_identical(res.out));
  for (int r = 0; r < c.n; ++r)
    EXPECT_TRUE(within_sum_bound(in, decode(res.out[r], QC_DTYPE_FLOAT32), c.op,
                                 unit_roundoff(QC_DTYPE_FLOAT32)))
        << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Local, AllreduceF32, ::testing::ValuesIn(allreduce_cases()),
    [](const ::testing::TestParamInfo<ArCase>& i) {
      return std::string(algo_name(i.param.algo)) + "_n" + std::to_string(i.param.n) + "_c" +
             std::to_string(i.param.count) + "_" + op_name(i.param.op);
    });

// ===========================================================================
// acceptance: uncompressed allreduce equals the float64 sum within fp32
// rounding for ring, recursive doubling, SRA and tree, every n = 1..13
// ===========================================================================
class AllreduceAcceptance
    : public ::testing::TestWithParam<std::tuple<qc_algorithm_t, int>> {};

TEST_P(AllreduceAcceptance, EqualsFloat64SumWithinFp32Rounding) {
  const qc_algorithm_t algo = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  std::set<size_t> counts = {0, 1, static_cast<size_t>(n - 1), static_cast<size_t>(n + 1),
                             static_cast<size_t>(3 * n + 2), 1001};
  for (size_t count : counts) {
    for (auto op : {QC_OP_SUM, QC_OP_AVG}) {
      SCOPED_TRACE("count " + std::to_string(count) + " " + op_name(op));
      const auto in = random_inputs(n, count, case_seed(algo, n, count, op + 50));
      const auto res = allreduce_threads(n, encode_all(in, QC_DTYPE_FLOAT32), count,
                                         QC_DTYPE_FLOAT32, op, make_policy(algo));
      ASSERT_TRUE(res.all_ok()) << res.describe();
      EXPECT_TRUE(replicas_identical(res.out));
      EXPECT_TRUE(within_sum_bound(in, decode(res.out[0], QC_DTYPE_FLOAT32), op,
                                   unit_roundoff(QC_DTYPE_FLOAT32)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Local, AllreduceAcceptance,
    ::testing::Combine(::testing::ValuesIn(explicit_algorithms()), ::testing::Range(1, 14)),
    [](const ::testing::TestParamInfo<std::tuple<qc_algorithm_t, int>>& i) {
      return std::string(algo_name(std::get<0>(i.param))) + "_n" +
             std::to_string(std::get<1>(i.param));
    });

// ===========================================================================
// recursive doubling with different intra-group sizes (folding of
// non-power-of-two rank counts)
// ===========================================================================
struct RdCase {
  int group_size;
  int n;
  size_t count;
};

std::vector<RdCase> rd_cases() {
  std::vector<RdCase> v;
  for (int gs : {1, 2, 3, 8})
    for (int n : {5, 8, 13})
      for (size_t c : awkward_counts(n)) v.push_back({gs, n, c});
  return v;
}

class RecursiveDoublingGroups : public ::testing::TestWithParam<RdCase> {};

TEST_P(RecursiveDoublingGroups, CorrectAndIdenticalAndEqualsEmulation) {
  const RdCase c = GetParam();
  const auto in = random_inputs(c.n, c.count, case_seed(c.group_size, c.n, c.count, 7));
  const auto bytes = encode_all(in, QC_DTYPE_FLOAT32);
  const qc_policy_t pol = make_policy(QC_ALGO_RECURSIVE_DOUBLING, c.group_size);
  const auto res = allreduce_threads(c.n, bytes, c.count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(replicas_identical(res.out));
  EXPECT_TRUE(within_sum_bound(in, decode(res.out[0], QC_DTYPE_FLOAT32), QC_OP_SUM,
                               unit_roundoff(QC_DTYPE_FLOAT32)));
  const auto emu = allreduce_emulate(c.n, bytes, c.count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  for (int r = 0; r < c.n; ++r)
    EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Local, RecursiveDoublingGroups, ::testing::ValuesIn(rd_cases()),
                         [](const ::testing::TestParamInfo<RdCase>& i) {
                           return "g" + std::to_string(i.param.group_size) + "_n" +
                                  std::to_string(i.param.n) + "_c" +
                                  std::to_string(i.param.count);
                         });

// ===========================================================================
// emulation == threads-driven run, bit for bit
// ===========================================================================
struct EmuCase {
  qc_algorithm_t algo;
  int n;
  size_t count;
  qc_dtype_t dtype;
  qc_reduce_op_t op;
};

std::vector<EmuCase> emu_cases() {
  std::vector<EmuCase> v;
  for (auto algo : all_algorithms())
    for (int n : {1, 2, 3, 5, 8, 13}) {
      v.push_back({algo, n, static_cast<size_t>(n + 1), QC_DTYPE_FLOAT32, QC_OP_SUM});
      v.push_back({algo, n, 10007, QC_DTYPE_FLOAT32, QC_OP_AVG});
      v.push_back({algo, n, 3001, QC_DTYPE_FLOAT16, QC_OP_SUM});
      v.push_back({algo, n, 3001, QC_DTYPE_BFLOAT16, QC_OP_AVG});
    }
  return v;
}

class EmulationEqualsThreads : public ::testing::TestWithParam<EmuCase> {};

TEST_P(EmulationEqualsThreads, BitIdentical) {
  const EmuCase c = GetParam();
  const auto in = random_inputs(c.n, c.count, case_seed(c.algo, c.n, c.count, c.dtype), c.dtype);
  const auto bytes = encode_all(in, c.dtype);
  const qc_policy_t pol = make_policy(c.algo);
  const auto res = allreduce_threads(c.n, bytes, c.count, c.dtype, c.op, pol);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  const auto emu = allreduce_emulate(c.n, bytes, c.count, c.dtype, c.op, pol);
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  EXPECT_TRUE(replicas_identical(emu.out));
  for (int r = 0; r < c.n; ++r)
    EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Local, EmulationEqualsThreads, ::testing::ValuesIn(emu_cases()),
    [](const ::testing::TestParamInfo<EmuCase>& i) {
      return std::string(algo_name(i.param.algo)) + "_n" + std::to_string(i.param.n) + "_c" +
             std::to_string(i.param.count) + "_" + dtype_name(i.param.dtype) + "_" +
             op_name(i.param.op);
    });

// ===========================================================================
// float16 / bfloat16
// ===========================================================================
TEST(HalfConverters, RoundToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);             // tie -> even (2)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);      // tie -> even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);       // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);       // tie -> even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (int i = -300; i <= 300; ++i) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(static_cast<float>(i))), static_cast<float>(i));
    if (std::abs(i) <= 256) {
      EXPECT_EQ(bf16_to_f32(f32_to_bf16(static_cast<float>(i))), static_cast<float>(i));
    }
  }
}

struct HalfCase {
  qc_algorithm_t algo;
  int n;
  qc_dtype_t dtype;
};

std::vector<HalfCase> half_cases() {
  std::vector<HalfCase> v;
  for (auto algo : all_algorithms())
    for (int n : kRankCounts)
      for (auto d : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) v.push_back({algo, n, d});
  return v;
}

class AllreduceHalf : public ::testing::TestWithParam<HalfCase> {};

// Small integers: every input, partial sum and total is exact in fp16/bf16.
TEST_P(AllreduceHalf, IntegerDataSumsExactly) {
  const HalfCase c = GetParam();
  for (size_t count : {static_cast<size_t>(c.n + 1), static_cast<size_t>(1001)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const auto in = integer_inputs(c.n, count, case_seed(c.algo, c.n, count, c.dtype));
    const auto res = allreduce_threads(c.n, encode_all(in, c.dtype), count, c.dtype,
                                       QC_OP_SUM, make_policy(c.algo));
    ASSERT_TRUE(res.all_ok()) << res.describe();
    EXPECT_TRUE(replicas_identical(res.out));
    for (int r = 0; r < c.n; ++r) {
      const auto out = decode(res.out[r], c.dtype);
      for (size_t i = 0; i < count; ++i) {
        float exact = 0;
        for (int q = 0; q < c.n; ++q) exact += in[q][i];
        ASSERT_EQ(out[i], exact) << "rank " << r << " element " << i;
      }
    }
  }
}

// Random data: replicas bit-identical; error within (dtype rounding per hop).
TEST_P(AllreduceHalf, RandomDataReplicasIdentical) {
  const HalfCase c = GetParam();
  const size_t count = 2049;
  for (auto op : {QC_OP_SUM, QC_OP_AVG}) {
    SCOPED_TRACE(op_name(op));
    const auto in = random_inputs(c.n, count, case_seed(c.n, c.algo, count, op), c.dtype);
    const auto res = allreduce_threads(c.n, encode_all(in, c.dtype), count, c.dtype, op,
                                       make_policy(c.algo));
    ASSERT_TRUE(res.all_ok()) << res.describe();
    EXPECT_TRUE(replicas_identical(res.out));
    // Partial sums may be rounded to the dtype at every hop: allow
    // ~(n+1) roundings of the magnitude, plus a subnormal floor for fp16.
    EXPECT_TRUE(within_sum_bound(in, decode(res.out[0], c.dtype), op, unit_roundoff(c.dtype),
                                 2.0 * (c.n + 1) / c.n, std::ldexp(1.0, -20)));
  }
}

INSTANTIATE_TEST_SUITE_P(Local, AllreduceHalf, ::testing::ValuesIn(half_cases()),
                         [](const ::testing::TestParamInfo<HalfCase>& i) {
                           return std::string(algo_name(i.param.algo)) + "_n" +
                                  std::to_string(i.param.n) + "_" + dtype_name(i.param.dtype);
                         });

// ===========================================================================
// in place
// ===========================================================================
struct InPlaceCase {
  qc_algorithm_t algo;
  int n;
  qc_dtype_t dtype;
};

class AllreduceInPlace : public ::testing::TestWithParam<InPlaceCase> {};

TEST_P(AllreduceInPlace, SameAsOutOfPlace) {
  const InPlaceCase c = GetParam();
  for (size_t count : {static_cast<size_t>(1), static_cast<size_t>(c.n + 1),
                       static_cast<size_t>(10007)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const auto in = random_inputs(c.n, count, case_seed(c.n, c.algo, count, 99), c.dtype);
    const auto bytes = encode_all(in, c.dtype);
    const auto pol = make_policy(c.algo);
    const auto oop = allreduce_threads(c.n, bytes, count, c.dtype, QC_OP_SUM, pol, false);
    const auto ip = allreduce_threads(c.n, bytes, count, c.dtype, QC_OP_SUM, pol, true);
    ASSERT_TRUE(oop.all_ok()) << oop.describe();
    ASSERT_TRUE(ip.all_ok()) << ip.describe();
    for (int r = 0; r < c.n; ++r)
      EXPECT_TRUE(bytes_equal(ip.out[r], oop.out[r], "in place vs out of place"))
          << "rank " << r;
  }
}

std::vector<InPlaceCase> in_place_cases() {
  std::vector<InPlaceCase> v;
  for (auto algo : all_algorithms())
    for (int n : {1, 3, 5, 8}) v.push_back({algo, n, QC_DTYPE_FLOAT32});
  for (auto algo : explicit_algorithms()) v.push_back({algo, 5, QC_DTYPE_FLOAT16});
  for (auto algo : explicit_algorithms()) v.push_back({algo, 5, QC_DTYPE_BFLOAT16});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Local, AllreduceInPlace, ::testing::ValuesIn(in_place_cases()),
                         [](const ::testing::TestParamInfo<InPlaceCase>& i) {
                           return std::string(algo_name(i.param.algo)) + "_n" +
                                  std::to_string(i.param.n) + "_" + dtype_name(i.param.dtype);
                         });

// ===========================================================================
// non-finite values are not hidden
// ===========================================================================
class AllreduceNonFinite : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(AllreduceNonFinite, NaNPropagatesToEveryRank) {
  const int n = 3;
  const size_t count = 16;
  auto in = integer_inputs(n, count, 5);
  in[2][5] = NAN;
  const auto res = allreduce_threads(n, encode_all(in, QC_DTYPE_FLOAT32), count,
                                     QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy(GetParam()));
  ASSERT_TRUE(res.all_ok()) << res.describe();
  for (int r = 0; r < n; ++r) {
    const auto out = decode(res.out[r], QC_DTYPE_FLOAT32);
    EXPECT_TRUE(std::isnan(out[5])) << "rank " << r << " got " << out[5];
    for (size_t i = 0; i < count; ++i) {
      if (i == 5) continue;
      EXPECT_EQ(out[i], in[0][i] + in[1][i] + in[2][i]) << "rank " << r << " element " << i;
    }
  }
}

TEST_P(AllreduceNonFinite, InfPropagatesToEveryRank) {
  const int n = 3;
  const size_t count = 16;
  auto in = integer_inputs(n, count, 6);
  in[1][5] = INFINITY;   // +Inf on one rank, finite elsewhere -> +Inf
  in[0][9] = -INFINITY;  // -Inf likewise
  in[0][12] = INFINITY;  // +Inf and -Inf on different ranks -> NaN
  in[2][12] = -INFINITY;
  const auto res = allreduce_threads(n, encode_all(in, QC_DTYPE_FLOAT32), count,
                                     QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy(GetParam()));
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(replicas_identical(res.out));
  for (int r = 0; r < n; ++r) {
    const auto out = decode(res.out[r], QC_DTYPE_FLOAT32);
    EXPECT_EQ(out[5], INFINITY) << "rank " << r;
    EXPECT_EQ(out[9], -INFINITY) << "rank " << r;
    EXPECT_FALSE(std::isfinite(out[12])) << "rank " << r << " got " << out[12];
    for (size_t i = 0; i < count; ++i) {
      if (i == 5 || i == 9 || i == 12) continue;
      EXPECT_EQ(out[i], in[0][i] + in[1][i] + in[2][i]) << "rank " << r << " element " << i;
    }
  }
}

TEST_P(AllreduceNonFinite, NaNInHalfPrecisionPropagates) {
  const int n = 5;
  const size_t count = 40;
  for (auto d : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(dtype_name(d));
    auto in = integer_inputs(n, count, 8);
    in[4][33] = NAN;
    in[1][7] = INFINITY;
    const auto res = allreduce_threads(n, encode_all(in, d), count, d, QC_OP_AVG,
                                       make_policy(GetParam()));
    ASSERT_TRUE(res.all_ok()) << res.describe();
    EXPECT_TRUE(replicas_identical(res.out));
    const auto out = decode(res.out[0], d);
    EXPECT_TRUE(std::isnan(out[33])) << out[33];
    EXPECT_EQ(out[7], INFINITY);
  }
}

INSTANTIATE_TEST_SUITE_P(Local, AllreduceNonFinite, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

// ===========================================================================
// many collectives in a row on one group (per-call sequence numbers / tags)
// ===========================================================================
TEST(AllreduceSequence, TwentyMixedCollectivesOnOneGroup) {
  const int n = 5;
  Group g(n);
  ASSERT_TRUE(g.ok()) << st(g.status());
  const size_t sizes[] = {1, 7, 1000, 0, 5003, 4, 6, 10007, 2, 333};
  const auto algos = all_algorithms();
  const int kCalls = 20;
  struct Call {
    qc_algorithm_t algo;
    size_t count;
    qc_dtype_t dtype;
    qc_reduce_op_t op;
    std::vector<std::vector<float>> in;
    std::vector<Bytes> bytes;
    bool alltoall_after;  // an alltoall follows this allreduce
    std::vector<Bytes> a2a_in;
  };
  std::vector<Call> calls;
  for (int k = 0; k < kCalls; ++k) {
    Call c;
    c.algo = algos[static_cast<size_t>(k) % algos.size()];
    c.count = sizes[static_cast<size_t>(k) % 10] + static_cast<size_t>(k / 10);
    c.dtype = k % 7 == 3 ? QC_DTYPE_BFLOAT16 : QC_DTYPE_FLOAT32;
    c.op = k % 3 == 1 ? QC_OP_AVG : QC_OP_SUM;
    c.in = random_inputs(n, c.count, 4242 + static_cast<uint64_t>(k), c.dtype);
    c.bytes = encode_all(c.in, c.dtype);
    c.alltoall_after = k % 3 == 0;
    if (c.alltoall_after)
      c.a2a_in = encode_all(random_inputs(n, n * (static_cast<size_t>(k) + 1), 777 + k),
                            QC_DTYPE_FLOAT32);
    calls.push_back(std::move(c));
  }
  std::vector<std::vector<Bytes>> out(kCalls, std::vector<Bytes>(n));
  std::vector<std::vector<Bytes>> a2a_out(kCalls, std::vector<Bytes>(n));
  std::vector<std::vector<qc_status_t>> status(kCalls, std::vector<qc_status_t>(n, QC_SUCCESS));
  std::vector<std::vector<qc_status_t>> a2a_status(kCalls,
                                                   std::vector<qc_status_t>(n, QC_SUCCESS));
  run_ranks(n, [&](int r) {
    for (int k = 0; k < kCalls; ++k) {
      const Call& c = calls[static_cast<size_t>(k)];
      const qc_policy_t p = make_policy(c.algo);
      qc_status_t s = qc_comm_set_layer_policy(g[r], "*", &p);
      if (s != QC_SUCCESS) {
        status[k][r] = s;
        return;
      }
      out[k][r].assign(c.count * dtype_size(c.dtype), 0);
      s = qc_allreduce(g[r], c.bytes[r].data(), out[k][r].data(), c.count, c.dtype, c.op,
                       nullptr, nullptr, nullptr);
      status[k][r] = s;
      if (s != QC_SUCCESS) return;
      if (c.alltoall_after) {
        const size_t cpr = static_cast<size_t>(k) + 1;
        a2a_out[k][r].assign(n * cpr * 4, 0);
        s = qc_alltoall(g[r], c.a2a_in[r].data(), a2a_out[k][r].data(), cpr,
                        QC_DTYPE_FLOAT32, "a2a", nullptr);
        a2a_status[k][r] = s;
        if (s != QC_SUCCESS) return;
      }
    }
  });
  for (int k = 0; k < kCalls; ++k) {
    const Call& c = calls[static_cast<size_t>(k)];
    SCOPED_TRACE("call " + std::to_string(k) + " " + algo_name(c.algo) + " count " +
                 std::to_string(c.count) + " " + dtype_name(c.dtype) + " " + op_name(c.op));
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(status[k][r], QC_SUCCESS) << "rank " << r << ": " << st(status[k][r]);
      ASSERT_EQ(a2a_status[k][r], QC_SUCCESS) << "alltoall rank " << r;
    }
    EXPECT_TRUE(replicas_identical(out[k]));
    const double slack = c.dtype == QC_DTYPE_FLOAT32 ? 2.0 : 2.0 * (n + 1) / n;
    EXPECT_TRUE(within_sum_bound(c.in, decode(out[k][0], c.dtype), c.op,
                                 unit_roundoff(c.dtype), slack, std::ldexp(1.0, -20)));
    const auto emu = allreduce_emulate(n, c.bytes, c.count, c.dtype, c.op, make_policy(c.algo));
    ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
    EXPECT_TRUE(bytes_equal(emu.out[0], out[k][0], "emulated vs threads"));
    if (c.alltoall_after) {
      const size_t blk = (static_cast<size_t>(k) + 1) * 4;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i)
          EXPECT_EQ(0, std::memcmp(a2a_out[k][j].data() + i * blk,
                                   c.a2a_in[i].data() + j * blk, blk))
              << "alltoall: block from rank " << i << " at rank " << j;
    }
  }
}

// Two groups driven at the same time do not see each other's messages.
TEST(AllreduceSequence, ConcurrentGroupsAreIndependent) {
  const int n = 3;
  const size_t count = 4099;
  const auto in_a = integer_inputs(n, count, 1);
  const auto in_b = integer_inputs(n, count, 2, 100, 200);
  RunResult ra, rb;
  std::thread ta([&] {
    Group g(n);
    ASSERT_TRUE(g.ok());
    g.set_policy("*", make_policy(QC_ALGO_RING));
    for (int k = 0; k < 5; ++k)
      ra = allreduce_on(g, encode_all(in_a, QC_DTYPE_FLOAT32), count, QC_DTYPE_FLOAT32,
                        QC_OP_SUM);
  });
  std::thread tb([&] {
    Group g(n);
    ASSERT_TRUE(g.ok());
    g.set_policy("*", make_policy(QC_ALGO_RING));
    for (int k = 0; k < 5; ++k)
      rb = allreduce_on(g, encode_all(in_b, QC_DTYPE_FLOAT32), count, QC_DTYPE_FLOAT32,
                        QC_OP_SUM);
  });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.all_ok()) << ra.describe();
  ASSERT_TRUE(rb.all_ok()) << rb.describe();
  const auto oa = decode(ra.out[2], QC_DTYPE_FLOAT32);
  const auto ob = decode(rb.out[1], QC_DTYPE_FLOAT32);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(oa[i], in_a[0][i] + in_a[1][i] + in_a[2][i]) << i;
    ASSERT_EQ(ob[i], in_b[0][i] + in_b[1][i] + in_b[2][i]) << i;
  }
}

// ===========================================================================
// QC_ALGO_AUTO follows its documented rule (n = 1: nothing; per-rank message
// below 64 KiB: recursive doubling; larger: SRA).
// ===========================================================================
TEST(AllreduceAuto, MatchesDocumentedChoice) {
  const int n = 13;
  for (size_t count : {static_cast<size_t>(1000), static_cast<size_t>(100000)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const auto bytes = encode_all(random_inputs(n, count, 31337 + count), QC_DTYPE_FLOAT32);
    const auto autorun =
        allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy());
    const qc_algorithm_t expect =
        count * 4 < 64 * 1024 ? QC_ALGO_RECURSIVE_DOUBLING : QC_ALGO_SRA;
    const auto ref =
        allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy(expect));
    ASSERT_EQ(autorun.status, QC_SUCCESS) << autorun.error;
    ASSERT_EQ(ref.status, QC_SUCCESS) << ref.error;
    EXPECT_TRUE(bytes_equal(autorun.out[0], ref.out[0], "auto vs expected algorithm"))
        << "expected AUTO to behave as " << algo_name(expect);
  }
}

// ===========================================================================
// large count sanity
// ===========================================================================
class AllreduceLarge : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(AllreduceLarge, OneMebiElementsFourRanks) {
  const int n = 4;
  const size_t count = size_t{1} << 20;
  const auto in = random_inputs(n, count, 2024);
  const auto res = allreduce_threads(n, encode_all(in, QC_DTYPE_FLOAT32), count,
                                     QC_DTYPE_FLOAT32, QC_OP_SUM, make_policy(GetParam()));
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(replicas_identical(res.out));
  EXPECT_TRUE(within_sum_bound(in, decode(res.out[3], QC_DTYPE_FLOAT32), QC_OP_SUM,
                               unit_roundoff(QC_DTYPE_FLOAT32)));
}

INSTANTIATE_TEST_SUITE_P(Local, AllreduceLarge, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

// ===========================================================================
// lossy codecs, where this build has them: replicas stay bit-identical and
// emulation equals the threads-driven run (skipped while a codec is missing)
// ===========================================================================
struct CodecCase {
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  const char* name;
};

class AllreduceLossyCodec
    : public ::testing::TestWithParam<std::tuple<CodecCase, qc_algorithm_t>> {};

TEST_P(AllreduceLossyCodec, ReplicasIdenticalAndEmulationMatches) {
  const CodecCase cc = std::get<0>(GetParam());
  const qc_algorithm_t algo = std::get<1>(GetParam());
  const int n = 5;
  const size_t count = 3001;
  qc_policy_t pol = make_policy(algo);
  pol.codec = cc.codec;
  pol.bits = cc.bits;
  pol.rounding = cc.rounding;
  pol.seed = 12345;
  pol.topk_ratio = 0.25f;
  const auto bytes = encode_all(random_inputs(n, count, 555), QC_DTYPE_FLOAT32);
  const auto emu = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
  if (emu.status == QC_ERROR_UNSUPPORTED) GTEST_SKIP() << cc.name << ": " << emu.error;
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  EXPECT_TRUE(replicas_identical(emu.out));
  const auto res = allreduce_threads(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(replicas_identical(res.out));
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(bytes_equal(emu.out[r], res.out[r], "emulated vs threads")) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Local, AllreduceLossyCodec,
    ::testing::Combine(
        ::testing::Values(CodecCase{QC_CODEC_FP16, 4, QC_ROUND_NEAREST_EVEN, "Fp16"},
                          CodecCase{QC_CODEC_BF16, 4, QC_ROUND_NEAREST_EVEN, "Bf16"},
                          CodecCase{QC_CODEC_MINMAX, 8, QC_ROUND_NEAREST_EVEN, "MinMax8"},
                          CodecCase{QC_CODEC_MINMAX, 2, QC_ROUND_STOCHASTIC, "MinMax2Sr"},
                          CodecCase{QC_CODEC_QSGD, 4, QC_ROUND_STOCHASTIC, "Qsgd4"},
                          CodecCase{QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, "OneBit"},
                          CodecCase{QC_CODEC_TOPK, 4, QC_ROUND_NEAREST_EVEN, "TopK"},
                          CodecCase{QC_CODEC_MXFP8, 4, QC_ROUND_NEAREST_EVEN, "Mxfp8"},
                          CodecCase{QC_CODEC_MXFP8_E5M2, 4, QC_ROUND_STOCHASTIC, "Mxfp8E5M2Sr"},
                          CodecCase{QC_CODEC_MXFP6, 4, QC_ROUND_NEAREST_EVEN, "Mxfp6"},
                          CodecCase{QC_CODEC_MXFP6_E3M2, 4, QC_ROUND_NEAREST_EVEN, "Mxfp6E3M2"},
                          CodecCase{QC_CODEC_MXFP4, 4, QC_ROUND_STOCHASTIC, "Mxfp4Sr"},
                          CodecCase{QC_CODEC_MXINT8, 4, QC_ROUND_NEAREST_EVEN, "Mxint8"},
                          CodecCase{QC_CODEC_NVFP4, 4, QC_ROUND_NEAREST_EVEN, "Nvfp4"}),
        ::testing::Values(QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                          QC_ALGO_TREE)),
    [](const ::testing::TestParamInfo<std::tuple<CodecCase, qc_algorithm_t>>& i) {
      return std::string(std::get<0>(i.param).name) + "_" + algo_name(std::get<1>(i.param));
    });

}  // namespace

// Native with a global codec: nothing travels wider than it needs (issue
// 33): the reduce-scatter sends the b-bit codes as encoded, the allgather
// the sums packed in b + ceil(log2 n) bits; with it, the wire bytes stay
// within (b + ceil(log2 n)) / 32 of a float32 ring's, and below a ring's
// at the final width.
TEST(NativeWire, SumsArePackedAtTheWidthTheyNeed) {
  const int n = 4;
  const size_t count = size_t{1} << 16;
  const int b = 4;
  qc_policy_t p = make_policy(QC_ALGO_NATIVE);
  p.codec = QC_CODEC_GLOBAL_LINEAR;
  p.bits = b;
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("w", p), QC_SUCCESS);
  const RunResult r = allreduce_on(g, encode_all(random_inputs(n, count, 5), QC_DTYPE_FLOAT32),
                                   count, QC_DTYPE_FLOAT32, QC_OP_SUM, "w");
  ASSERT_TRUE(r.all_ok()) << r.describe();
  qc_stats_t s;
  s.struct_size = sizeof s;
  ASSERT_EQ(qc_comm_get_stats(g[0], &s), QC_SUCCESS);
  const double block = static_cast<double>(count) / n;
  // the reduce-scatter sends the codes as encoded (4 bits), the allgather
  // the sums of 4 ranks' codes (6 bits), to each of the n - 1 others
  const double packed = (n - 1) * block * 4 / 8.0 + (n - 1) * block * 6 / 8.0;
  const double fixed = 2.0 * (n - 1) * block * 6 / 8.0;
  const double float32_ring = 2.0 * (n - 1) * block * 4;
  const double overhead = 4096;  // envelopes, the scale shares
  EXPECT_GE(static_cast<double>(s.wire_bytes), packed);
  EXPECT_LE(static_cast<double>(s.wire_bytes), packed + overhead);
  EXPECT_LT(static_cast<double>(s.wire_bytes), fixed);
  EXPECT_LE(static_cast<double>(s.wire_bytes), float32_ring * (b + 2) / 32.0 + overhead);
}
