// The NCCL transport (src/core/transports/nccl_transport.h) over the fake
// NCCL of fake_nccl.h: every algorithm and alltoall give the local
// transport's results bit for bit, every send meets a receive of exactly its
// size (what real NCCL requires), and failures end in the documented
// statuses instead of hangs. Real NCCL needs GPUs: see docs/cuda.md.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/communicator.h"
#include "core/transports/nccl_transport.h"
#include "fake_nccl.h"
#include "test_util.h"

namespace {

using qct::Bytes;
using qct::Group;

// A local group whose transports are replaced by NCCL transports over one
// fake NCCL communicator.
struct NcclGroup {
  NcclGroup(int n, double timeout_seconds)
      : world(qcfake::FakeNcclWorld::create(n)), group(n, timeout_seconds) {
    for (int r = 0; r < n && group.ok(); ++r) {
      group[r]->transport = std::make_unique<qc::NcclTransport>(world->backend(r));
    }
  }
  std::shared_ptr<qcfake::FakeNcclWorld> world;
  Group group;
};

struct Codec {
  const char* name;
  qc_codec_t codec;
  int bits;
  int bucket_size;
  int error_feedback;
};

const Codec kCodecs[] = {
    {"None", QC_CODEC_NONE, 4, 128, 0},         {"Fp16", QC_CODEC_FP16, 4, 128, 0},
    {"Minmax4", QC_CODEC_MINMAX, 4, 128, 1},    {"Minmax2b37", QC_CODEC_MINMAX, 2, 37, 1},
    {"Qsgd4", QC_CODEC_QSGD, 4, 64, 0},         {"Onebit", QC_CODEC_ONEBIT, 1, 128, 1},
    {"Topk", QC_CODEC_TOPK, 4, 128, 1},         {"GlobalLinear", QC_CODEC_GLOBAL_LINEAR, 4, 128, 0},
};

qc_policy_t policy_of(const Codec& c, qc_algorithm_t algorithm) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = c.codec;
  p.bits = c.bits;
  p.bucket_size = c.bucket_size;
  p.error_feedback = c.error_feedback;
  p.algorithm = algorithm;
  p.min_compress_bytes = 0;
  p.topk_ratio = 0.05f;
  return p;
}

// Three allreduces (error feedback carries over) or one alltoall per rank;
// returns every rank's outputs of every call, in order.
std::vector<Bytes> run(Group& g, const qc_policy_t& p, size_t count, bool alltoall,
                       std::vector<qc_status_t>* statuses) {
  const int n = g.size();
  EXPECT_EQ(g.set_policy("*", p), QC_SUCCESS) << qc_last_error();
  const int calls = alltoall ? 1 : 3;
  const size_t total = alltoall ? count * static_cast<size_t>(n) : count;
  std::vector<Bytes> out(static_cast<size_t>(n * calls), Bytes(total * 4));
  statuses->assign(static_cast<size_t>(n), QC_SUCCESS);
  std::vector<std::string> errors(static_cast<size_t>(n));
  qct::run_ranks(n, [&](int r) {
    for (int k = 0; k < calls && (*statuses)[static_cast<size_t>(r)] == QC_SUCCESS; ++k) {
      const auto in = qct::random_inputs(n, total, 100 + static_cast<uint64_t>(k));
      const std::vector<float>& mine = in[static_cast<size_t>(r)];
      void* dst = out[static_cast<size_t>(r * calls + k)].data();
      const qc_status_t s =
          alltoall ? qc_alltoall(g[r], mine.data(), dst, count, QC_DTYPE_FLOAT32, nullptr, nullptr)
                   : qc_allreduce(g[r], mine.data(), dst, count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                  nullptr, nullptr, nullptr);
      (*statuses)[static_cast<size_t>(r)] = s;
      if (s != QC_SUCCESS) errors[static_cast<size_t>(r)] = qc_last_error();
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ((*statuses)[static_cast<size_t>(r)], QC_SUCCESS)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
  return out;
}

using Param = std::tuple<int, qc_algorithm_t, int, bool>;  // ranks, algorithm, codec, alltoall

class NcclTransportSweep : public ::testing::TestWithParam<Param> {};

TEST_P(NcclTransportSweep, SameBytesAsTheLocalTransportAndExactSizes) {
  const int n = std::get<0>(GetParam());
  const Codec& codec = kCodecs[std::get<2>(GetParam())];
  const bool alltoall = std::get<3>(GetParam());
  const qc_policy_t p = policy_of(codec, std::get<1>(GetParam()));
  for (size_t count : {size_t{1}, size_t{1003}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    Group local(n);
    NcclGroup nccl(n, qct::kTimeoutSeconds);
    ASSERT_TRUE(local.ok() && nccl.group.ok());
    std::vector<qc_status_t> s_local, s_nccl;
    const std::vector<Bytes> want = run(local, p, count, alltoall, &s_local);
    const std::vector<Bytes> got = run(nccl.group, p, count, alltoall, &s_nccl);
    EXPECT_EQ(nccl.world->size_mismatch(), "");
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "output " << i;
    for (int r = 0; r < n; ++r) {
      EXPECT_GT(nccl.world->groups(r), 0) << "rank " << r << " never used NCCL";
    }
  }
}

std::string sweep_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<3>(info.param) ? "Alltoall_" : "") +
         qct::algo_name(std::get<1>(info.param)) + "_" + kCodecs[std::get<2>(info.param)].name +
         "_n" + std::to_string(std::get<0>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Allreduce, NcclTransportSweep,
                         ::testing::Combine(::testing::Values(2, 3, 5, 6),
                                            ::testing::ValuesIn(qct::all_algorithms()),
                                            ::testing::Range(0, 8), ::testing::Values(false)),
                         sweep_name);
INSTANTIATE_TEST_SUITE_P(Alltoall, NcclTransportSweep,
                         ::testing::Combine(::testing::Values(2, 3, 5),
                                            ::testing::Values(QC_ALGO_AUTO),
                                            ::testing::Values(0, 2, 6), ::testing::Values(true)),
                         sweep_name);

TEST(NcclTransport, OneRankSendsNothing) {
  NcclGroup nccl(1, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  const std::vector<float> x = {1.5f, -2.0f, 3.25f};
  std::vector<float> y(3);
  ASSERT_EQ(qc_allreduce(nccl.group[0], x.data(), y.data(), 3, QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_SUCCESS)
      << qc_last_error();
  EXPECT_EQ(y, x);
  EXPECT_EQ(nccl.world->groups(0), 0);
}

// A rank that never calls: its peers time out, abort their NCCL
// communicator, and the group stays broken (qc_comm_get_async_error).
TEST(NcclTransport, AMissingRankIsATimeoutAndAnAbort) {
  NcclGroup nccl(3, 0.3);
  ASSERT_TRUE(nccl.group.ok());
  std::vector<qc_status_t> s(2, QC_SUCCESS);
  std::vector<std::string> e(2);
  qct::run_ranks(2, [&](int r) {
    std::vector<float> x(500, 1.0f), y(500);
    s[static_cast<size_t>(r)] = qc_allreduce(nccl.group[r], x.data(), y.data(), x.size(),
                                             QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                                             nullptr);
    e[static_cast<size_t>(r)] = qc_last_error();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[static_cast<size_t>(r)], QC_ERROR_TIMEOUT) << e[static_cast<size_t>(r)];
    EXPECT_NE(e[static_cast<size_t>(r)].find("NCCL"), std::string::npos)
        << e[static_cast<size_t>(r)];
    EXPECT_TRUE(nccl.world->aborted(r));
    qc_status_t async = QC_SUCCESS;
    ASSERT_EQ(qc_comm_get_async_error(nccl.group[r], &async), QC_SUCCESS);
    EXPECT_EQ(async, QC_ERROR_TIMEOUT);
  }
  EXPECT_FALSE(nccl.world->aborted(2));
}

// The transport on its own: the frame is what travels, the true length and
// the bytes are what arrive, and the padding is zeros.
TEST(NcclTransport, FramesCarryTheLengthAndZeroPadding) {
  auto world = qcfake::FakeNcclWorld::create(2);
  qc::NcclTransport t0(world->backend(0)), t1(world->backend(1));
  const uint8_t msg[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  uint8_t got[64];
  std::memset(got, 0xee, sizeof(got));
  qc::Request send, recv;
  ASSERT_TRUE(t0.post_send(1, 7, msg, sizeof(msg), 64, &send).is_ok());
  ASSERT_TRUE(t1.post_recv(0, 7, got, 64, &recv).is_ok());
  const auto deadline = qc::Clock::now() + std::chrono::seconds(10);
  qc::Status s0, s1;
  qct::run_ranks(2, [&](int r) {
    if (r == 0) s0 = t0.wait_all(&send, 1, deadline);
    else s1 = t1.wait_all(&recv, 1, deadline);
  });
  ASSERT_TRUE(s0.is_ok()) << s0.message();
  ASSERT_TRUE(s1.is_ok()) << s1.message();
  EXPECT_TRUE(send.done && recv.done);
  EXPECT_EQ(recv.bytes, sizeof(msg));
  EXPECT_EQ(std::memcmp(got, msg, sizeof(msg)), 0);
  EXPECT_EQ(got[10], 0xee) << "bytes past the length must not be written";
  EXPECT_EQ(world->size_mismatch(), "");
}

// What NCCL itself would hang on, the fake reports; and a wrong tag is a
// MISMATCH, as on the other transports.
TEST(NcclTransport, WrongFrameOrTagFailsBothRanks) {
  for (bool wrong_tag : {false, true}) {
    SCOPED_TRACE(wrong_tag ? "wrong tag" : "wrong frame");
    auto world = qcfake::FakeNcclWorld::create(2);
    qc::NcclTransport t0(world->backend(0)), t1(world->backend(1));
    const uint8_t msg[8] = {};
    uint8_t got[64];
    qc::Request send, recv;
    ASSERT_TRUE(t0.post_send(1, 7, msg, sizeof(msg), wrong_tag ? 64 : 40, &send).is_ok());
    ASSERT_TRUE(t1.post_recv(0, wrong_tag ? 8 : 7, got, 64, &recv).is_ok());
    const auto deadline = qc::Clock::now() + std::chrono::seconds(2);
    qc::Status s0, s1;
    qct::run_ranks(2, [&](int r) {
      if (r == 0) s0 = t0.wait_all(&send, 1, deadline);
      else s1 = t1.wait_all(&recv, 1, deadline);
    });
    if (wrong_tag) {
      EXPECT_TRUE(s0.is_ok()) << s0.message();
      EXPECT_EQ(s1.code(), QC_ERROR_MISMATCH) << s1.message();
    } else {
      EXPECT_NE(world->size_mismatch(), "");
      EXPECT_EQ(s0.code(), QC_ERROR_INTERNAL) << s0.message();
      EXPECT_EQ(s1.code(), QC_ERROR_INTERNAL) << s1.message();
    }
    EXPECT_FALSE(t1.failure().is_ok());
  }
}

}  // namespace
