// Error buffers: error feedback with codec none is exact bookkeeping (the
// residual is folded into the input and stays 0), and save/load round trips.
#include "test_util.h"

using namespace qct;

namespace {

Bytes save(qc_error_buffer_t eb) {
  size_t size = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
  Bytes b(size);
  size_t written = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, b.data(), b.size(), &written), QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(written, size);
  b.resize(written);
  return b;
}

double norm(qc_error_buffer_t eb) {
  double v = -1;
  EXPECT_EQ(qc_error_buffer_norm(eb, &v), QC_SUCCESS) << qc_last_error();
  return v;
}

class ErrorFeedbackNone : public ::testing::TestWithParam<qc_algorithm_t> {};

TEST_P(ErrorFeedbackNone, ResultIsPlainSumAndResidualStaysZero) {
  const int n = 3;
  const size_t count = 2500;
  Group g(n);
  ASSERT_TRUE(g.ok());
  qc_policy_t pol = make_policy(GetParam());
  pol.error_feedback = 1;
  ASSERT_EQ(g.set_policy("*", pol), QC_SUCCESS) << qc_last_error();
  std::vector<qc_error_buffer_t> eb(n, nullptr);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(qc_error_buffer_create(g[r], count, &eb[r]), QC_SUCCESS) << qc_last_error();
    EXPECT_EQ(norm(eb[r]), 0.0);
  }
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const auto in = random_inputs(n, count, 60 + call);
    const auto bytes = encode_all(in, QC_DTYPE_FLOAT32);
    std::vector<Bytes> out(n, Bytes(count * 4));
    std::vector<qc_status_t> s(n);
    run_ranks(n, [&](int r) {
      s[r] = qc_allreduce(g[r], bytes[r].data(), out[r].data(), count, QC_DTYPE_FLOAT32,
                          QC_OP_SUM, nullptr, eb[r], nullptr);
    });
    for (int r = 0; r < n; ++r) ASSERT_EQ(s[r], QC_SUCCESS) << "rank " << r;
    EXPECT_TRUE(replicas_identical(out));
    EXPECT_TRUE(within_sum_bound(in, decode(out[0], QC_DTYPE_FLOAT32), QC_OP_SUM,
                                 unit_roundoff(QC_DTYPE_FLOAT32)));
    // Same bits as the run without error feedback.
    const auto plain = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                         make_policy(GetParam()));
    ASSERT_EQ(plain.status, QC_SUCCESS) << plain.error;
    EXPECT_TRUE(bytes_equal(plain.out[0], out[0], "with EF (codec none) vs without"));
    for (int r = 0; r < n; ++r) EXPECT_EQ(norm(eb[r]), 0.0) << "rank " << r;
  }
  for (auto b : eb) qc_error_buffer_destroy(b);
}

INSTANTIATE_TEST_SUITE_P(Local, ErrorFeedbackNone, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<qc_algorithm_t>& i) {
                           return std::string(algo_name(i.param));
                         });

TEST(ErrorFeedbackEmulation, CodecNoneResidualStaysZero) {
  const int n = 4;
  const size_t count = 777;
  qc_policy_t pol = make_policy(QC_ALGO_RING);
  pol.error_feedback = 1;
  std::vector<qc_error_buffer_t> eb(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(nullptr, count, &eb[r]), QC_SUCCESS);
  const auto in = random_inputs(n, count, 3);
  const auto bytes = encode_all(in, QC_DTYPE_FLOAT32);
  const auto emu = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, eb.data());
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  EXPECT_TRUE(replicas_identical(emu.out));
  EXPECT_TRUE(within_sum_bound(in, decode(emu.out[1], QC_DTYPE_FLOAT32), QC_OP_SUM,
                               unit_roundoff(QC_DTYPE_FLOAT32)));
  for (int r = 0; r < n; ++r) EXPECT_EQ(norm(eb[r]), 0.0);
  // Entries may be NULL.
  std::vector<qc_error_buffer_t> some = eb;
  some[1] = nullptr;
  const auto emu2 = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, some.data());
  ASSERT_EQ(emu2.status, QC_SUCCESS) << emu2.error;
  EXPECT_TRUE(bytes_equal(emu2.out[0], emu.out[0], "NULL entry vs buffers"));
  for (auto b : eb) qc_error_buffer_destroy(b);
}

TEST(ErrorBufferIo, SaveResetLoadRoundTrip) {
  Group g(1);
  ASSERT_TRUE(g.ok());
  for (size_t count : {static_cast<size_t>(0), static_cast<size_t>(1), static_cast<size_t>(1000)}) {
    SCOPED_TRACE("count " + std::to_string(count));
    qc_error_buffer_t eb = nullptr;
    ASSERT_EQ(qc_error_buffer_create(g[0], count, &eb), QC_SUCCESS) << qc_last_error();
    const Bytes a = save(eb);
    EXPECT_FALSE(a.empty());
    ASSERT_EQ(qc_error_buffer_reset(eb), QC_SUCCESS);
    ASSERT_EQ(qc_error_buffer_load(eb, a.data(), a.size()), QC_SUCCESS) << qc_last_error();
    const Bytes b = save(eb);
    EXPECT_TRUE(bytes_equal(a, b, "save after load vs first save"));
    EXPECT_EQ(norm(eb), 0.0);
    qc_error_buffer_destroy(eb);
  }
}

TEST(ErrorBufferIo, DamagedImagesAreRejectedAndBufferUnchanged) {
  qc_error_buffer_t eb = nullptr, other = nullptr;
  ASSERT_EQ(qc_error_buffer_create(nullptr, 64, &eb), QC_SUCCESS);
  ASSERT_EQ(qc_error_buffer_create(nullptr, 65, &other), QC_SUCCESS);
  const Bytes good = save(eb);
  ASSERT_GT(good.size(), 0u);

  // Too small a capacity.
  Bytes small(good.size() - 1);
  size_t written = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, small.data(), small.size(), &written),
            QC_ERROR_INVALID_ARGUMENT);

  // Truncated image.
  EXPECT_EQ(qc_error_buffer_load(eb, good.data(), good.size() - 1), QC_ERROR_CORRUPT_DATA);
  EXPECT_EQ(qc_error_buffer_load(eb, good.data(), 0), QC_ERROR_CORRUPT_DATA);
  // Every single flipped byte is caught (versioned and checksummed format).
  for (size_t i = 0; i < good.size(); ++i) {
    Bytes bad = good;
    bad[i] ^= 0x5A;
    const qc_status_t s = qc_error_buffer_load(eb, bad.data(), bad.size());
    EXPECT_TRUE(s == QC_ERROR_CORRUPT_DATA || s == QC_ERROR_VERSION || s == QC_ERROR_MISMATCH)
        << "flipped byte " << i << " gave " << st(s);
  }
  // A different element count.
  const Bytes other_img = save(other);
  EXPECT_EQ(qc_error_buffer_load(eb, other_img.data(), other_img.size()), QC_ERROR_MISMATCH);
  // Unchanged after all those failures.
  EXPECT_TRUE(bytes_equal(save(eb), good, "buffer after failed loads"));
  EXPECT_EQ(qc_error_buffer_load(eb, good.data(), good.size()), QC_SUCCESS);

  EXPECT_EQ(qc_error_buffer_destroy(nullptr), QC_SUCCESS);
  qc_error_buffer_destroy(eb);
  qc_error_buffer_destroy(other);
}

// With a lossy codec (where this build has one) the residual is not zero, and
// save / reset / load restores it exactly.
TEST(ErrorBufferIo, NonZeroResidualRoundTrip) {
  const int n = 2;
  const size_t count = 1000;
  qc_policy_t pol = make_policy(QC_ALGO_RING);
  pol.error_feedback = 1;
  pol.codec = QC_CODEC_MINMAX;
  pol.bits = 2;
  std::vector<qc_error_buffer_t> eb(n, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(qc_error_buffer_create(nullptr, count, &eb[r]), QC_SUCCESS);
  const auto bytes = encode_all(random_inputs(n, count, 17), QC_DTYPE_FLOAT32);
  const auto emu = allreduce_emulate(n, bytes, count, QC_DTYPE_FLOAT32, QC_OP_SUM, pol, eb.data());
  if (emu.status == QC_ERROR_UNSUPPORTED) {
    for (auto b : eb) qc_error_buffer_destroy(b);
    GTEST_SKIP() << "minmax not in this build: " << emu.error;
  }
  ASSERT_EQ(emu.status, QC_SUCCESS) << emu.error;
  const double before = norm(eb[0]);
  EXPECT_GT(before, 0.0);
  const Bytes a = save(eb[0]);
  ASSERT_EQ(qc_error_buffer_reset(eb[0]), QC_SUCCESS);
  EXPECT_EQ(norm(eb[0]), 0.0);
  ASSERT_EQ(qc_error_buffer_load(eb[0], a.data(), a.size()), QC_SUCCESS);
  EXPECT_EQ(norm(eb[0]), before);
  EXPECT_TRUE(bytes_equal(save(eb[0]), a, "save after load"));
  for (auto b : eb) qc_error_buffer_destroy(b);
}

}  // namespace
