// Alltoall on the local transport: with codec none every block arrives
// exactly, and the emulation entry point gives the same bytes.
#include "test_util.h"

using namespace qct;

namespace {

struct A2aCase {
  int n;
  size_t cpr;  // count per rank
  qc_dtype_t dtype;
};

std::vector<A2aCase> a2a_cases() {
  std::vector<A2aCase> v;
  for (int n : {1, 2, 3, 5, 8, 13})
    for (size_t cpr : {0, 1, 3, 1000})
      for (auto d : {QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16})
        v.push_back({n, cpr, d});
  return v;
}

class Alltoall : public ::testing::TestWithParam<A2aCase> {};

::testing::AssertionResult blocks_transposed(const std::vector<Bytes>& send,
                                             const std::vector<Bytes>& recv, int n,
                                             size_t block_bytes) {
  for (int j = 0; j < n; ++j) {
    if (recv[j].size() != static_cast<size_t>(n) * block_bytes)
      return ::testing::AssertionFailure() << "rank " << j << " recv size " << recv[j].size();
    for (int i = 0; i < n; ++i) {
      if (block_bytes && std::memcmp(recv[j].data() + i * block_bytes,
                                     send[i].data() + j * block_bytes, block_bytes) != 0)
        return ::testing::AssertionFailure()
               << "rank " << j << ": block " << i << " is not rank " << i << "'s block " << j;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(Alltoall, BlocksArriveExactlyAndEmulationMatches) {
  const A2aCase c = GetParam();
  const auto in = encode_all(
      random_inputs(c.n, c.n * c.cpr, 100 * c.n + c.cpr + 7 * c.dtype, c.dtype), c.dtype);
  Group g(c.n);
  ASSERT_TRUE(g.ok()) << st(g.status());
  const auto res = alltoall_on(g, in, c.cpr, c.dtype);
  ASSERT_TRUE(res.all_ok()) << res.describe();
  EXPECT_TRUE(blocks_transposed(in, res.out, c.n, c.cpr * dtype_size(c.dtype)));

  // Emulation.
  std::vector<Bytes> emu(c.n, Bytes(c.n * c.cpr * dtype_size(c.dtype), 0x5A));
  std::vector<const void*> sp(c.n);
  std::vector<void*> rp(c.n);
  for (int r = 0; r < c.n; ++r) {
    sp[r] = in[r].data();
    rp[r] = emu[r].data();
  }
  const qc_policy_t pol = make_policy();
  ASSERT_EQ(qc_emulate_alltoall(c.n, sp.data(), rp.data(), c.cpr, c.dtype, nullptr, 0, &pol),
            QC_SUCCESS)
      << qc_last_error();
  for (int r = 0; r < c.n; ++r)
    EXPECT_TRUE(bytes_equal(emu[r], res.out[r], "emulated vs threads")) << "rank " << r;

  // A second alltoall on the same group (reversed roles of the data) works too.
  std::vector<Bytes> in2 = res.out;
  const auto res2 = alltoall_on(g, in2, c.cpr, c.dtype);
  ASSERT_TRUE(res2.all_ok()) << res2.describe();
  for (int r = 0; r < c.n; ++r)
    EXPECT_TRUE(bytes_equal(res2.out[r], in[r], "alltoall twice is the identity"))
        << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Local, Alltoall, ::testing::ValuesIn(a2a_cases()),
                         [](const ::testing::TestParamInfo<A2aCase>& i) {
                           return "n" + std::to_string(i.param.n) + "_cpr" +
                                  std::to_string(i.param.cpr) + "_" +
                                  dtype_name(i.param.dtype);
                         });

// Non-finite values and signed zeros pass through codec none untouched.
TEST(AlltoallSpecialValues, PassThroughUnchanged) {
  const int n = 3;
  const size_t cpr = 4;
  std::vector<std::vector<float>> v(n, std::vector<float>(n * cpr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < n * cpr; ++i) v[r][i] = static_cast<float>(r * 100 + i);
  v[0][1] = INFINITY;
  v[1][5] = -INFINITY;
  v[2][2] = -0.0f;
  v[2][3] = std::ldexp(1.0f, -140);  // float32 subnormal
  for (auto d : {QC_DTYPE_FLOAT32, QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(dtype_name(d));
    auto in = encode_all(v, d);
    Group g(n);
    ASSERT_TRUE(g.ok());
    const auto res = alltoall_on(g, in, cpr, d);
    ASSERT_TRUE(res.all_ok()) << res.describe();
    EXPECT_TRUE(blocks_transposed(in, res.out, n, cpr * dtype_size(d)));
  }
}

// Lossy codecs, where this build has them: alltoall via the emulation entry
// point equals the threads-driven run, and every receiver decodes the same
// block the same way (skipped while the codec is missing).
TEST(AlltoallLossy, EmulationMatchesThreads) {
  const int n = 5;
  const size_t cpr = 300;
  const auto in = encode_all(random_inputs(n, n * cpr, 99), QC_DTYPE_FLOAT32);
  for (auto codec : {QC_CODEC_FP16, QC_CODEC_BF16, QC_CODEC_MINMAX, QC_CODEC_QSGD}) {
    SCOPED_TRACE("codec " + std::to_string(codec));
    qc_policy_t pol = make_policy();
    pol.codec = codec;
    pol.bits = 4;
    std::vector<Bytes> emu(n, Bytes(n * cpr * 4));
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    for (int r = 0; r < n; ++r) {
      sp[r] = in[r].data();
      rp[r] = emu[r].data();
    }
    const qc_status_t s =
        qc_emulate_alltoall(n, sp.data(), rp.data(), cpr, QC_DTYPE_FLOAT32, nullptr, 0, &pol);
    if (s == QC_ERROR_UNSUPPORTED) continue;
    ASSERT_EQ(s, QC_SUCCESS) << qc_last_error();
    Group g(n);
    ASSERT_TRUE(g.ok());
    ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    const auto res = alltoall_on(g, in, cpr, QC_DTYPE_FLOAT32);
    ASSERT_TRUE(res.all_ok()) << res.describe();
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(bytes_equal(emu[r], res.out[r], "emulated vs threads")) << "rank " << r;
  }
}

// Stochastic rounding draws its bits from the policy's seed (DESIGN promise
// 4): the same seed gives the same bytes, another seed other bytes, in the
// emulation and on threads alike. (Alltoall used to key its bits with seed
// 0 whatever the policy said.)
TEST(AlltoallLossy, StochasticRoundingFollowsThePolicySeed) {
  const int n = 3;
  const size_t cpr = 400;
  const auto in = encode_all(random_inputs(n, n * cpr, 5), QC_DTYPE_FLOAT32);
  auto run = [&](uint64_t seed) {
    qc_policy_t pol = make_policy();
    pol.codec = QC_CODEC_MINMAX;
    pol.bits = 2;
    pol.rounding = QC_ROUND_STOCHASTIC;
    pol.seed = seed;
    Group g(n);
    EXPECT_TRUE(g.ok());
    EXPECT_EQ(g.set_policy("*", pol), QC_SUCCESS);
    const auto res = alltoall_on(g, in, cpr, QC_DTYPE_FLOAT32);
    EXPECT_TRUE(res.all_ok()) << res.describe();
    std::vector<Bytes> emu(n, Bytes(n * cpr * 4));
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    for (int r = 0; r < n; ++r) {
      sp[r] = in[r].data();
      rp[r] = emu[r].data();
    }
    EXPECT_EQ(qc_emulate_alltoall(n, sp.data(), rp.data(), cpr, QC_DTYPE_FLOAT32, nullptr, 0, &pol),
              QC_SUCCESS);
    for (int r = 0; r < n; ++r) EXPECT_EQ(emu[r], res.out[r]) << "seed " << seed << " rank " << r;
    return res.out;
  };
  const auto a = run(1), again = run(1), b = run(2);
  EXPECT_EQ(a, again) << "the same seed, the same bytes";
  EXPECT_NE(a, b) << "another seed, other random bits";
}

// ===========================================================================
// Alltoall with codecs (paper 000 3.3): the layer name picks the policy, so
// the forward and backward exchanges of an embedding can use different
// widths. Each block is encoded once by its sender and decoded once by its
// receiver: with nearest rounding it equals qc_codec_encode + qc_codec_decode of the
// block alone, and the 2-bit layer sends about half the 4-bit layer's bytes.
// ===========================================================================
TEST(AlltoallCodecs, LayerPicksWidthAndEachBlockIsEncodedOnce) {
  const int n = 5;
  const size_t cpr = 1024;
  const auto values = random_inputs(n, n * cpr, 4711);
  const auto in = encode_all(values, QC_DTYPE_FLOAT32);
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t fwd = make_policy();
  fwd.codec = QC_CODEC_MINMAX;
  fwd.bits = 4;
  qc_policy_t bwd = fwd;
  bwd.bits = 2;
  ASSERT_EQ(g.set_policy("emb_fwd", fwd), QC_SUCCESS);
  ASSERT_EQ(g.set_policy("emb_bwd", bwd), QC_SUCCESS);

  uint64_t wire[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const qc_policy_t& pol = pass == 0 ? fwd : bwd;
    const uint64_t before = [&] {
      qc_stats_t st{};
      st.struct_size = sizeof st;
      qc_comm_get_stats(g[0], &st);
      return st.wire_bytes;
    }();
    const auto res = alltoall_on(g, in, cpr, QC_DTYPE_FLOAT32, pass == 0 ? "emb_fwd" : "emb_bwd");
    ASSERT_TRUE(res.all_ok()) << res.describe();
    qc_stats_t st{};
    st.struct_size = sizeof st;
    ASSERT_EQ(qc_comm_get_stats(g[0], &st), QC_SUCCESS);
    wire[pass] = st.wire_bytes - before;
    for (int dst = 0; dst < n; ++dst) {
      const auto got = decode(res.out[dst], QC_DTYPE_FLOAT32);
      for (int src = 0; src < n; ++src) {
        const float* block = values[src].data() + static_cast<size_t>(dst) * cpr;
        size_t cap = 0, written = 0;
        ASSERT_EQ(qc_codec_encoded_size(&pol, cpr, &cap), QC_SUCCESS);
        Bytes msg(cap);
        ASSERT_EQ(qc_codec_encode(&pol, block, cpr, QC_DTYPE_FLOAT32, msg.data(), cap, &written),
                  QC_SUCCESS);
        std::vector<float> once(cpr);
        ASSERT_EQ(qc_codec_decode(msg.data(), written, once.data(), cpr, QC_DTYPE_FLOAT32), QC_SUCCESS);
        ASSERT_EQ(std::vector<float>(got.begin() + src * cpr, got.begin() + (src + 1) * cpr),
                  once)
            << "pass " << pass << ", block from rank " << src << " to rank " << dst;
      }
    }
  }
  // 4 vs 2 bits per value plus the same per-bucket metadata and headers.
  EXPECT_GT(wire[0], wire[1] * 3 / 2) << wire[0] << " vs " << wire[1];
  EXPECT_LT(wire[1], wire[0]);
}

}  // namespace

// qc.h: sendbuf and recvbuf may be the same pointer (in place).
TEST(AlltoallInPlace, SameBufferGivesTheTransposedBlocks) {
  const int n = 3;
  const size_t cpr = 5;
  const auto in = encode_all(random_inputs(n, n * cpr, 77, QC_DTYPE_FLOAT32), QC_DTYPE_FLOAT32);
  std::vector<Bytes> buf = in;
  Group g(n);
  ASSERT_TRUE(g.ok()) << st(g.status());
  std::vector<qc_status_t> status(n, QC_ERROR_INTERNAL);
  run_ranks(n, [&](int r) {
    status[r] = qc_alltoall(g[r], buf[r].data(), buf[r].data(), cpr, QC_DTYPE_FLOAT32, nullptr,
                            nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(status[r], QC_SUCCESS) << "rank " << r;
  EXPECT_TRUE(blocks_transposed(in, buf, n, cpr * 4));
}
