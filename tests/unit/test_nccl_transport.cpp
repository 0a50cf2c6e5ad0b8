// The NCCL transport (src/core/transports/nccl_transport.h) over the fake
// NCCL of fake_nccl.h: every algorithm and alltoall give the local
// transport's results bit for bit, every send meets a receive of exactly its
// size (what real NCCL requires), and failures end in the documented
// statuses instead of hangs. Real NCCL needs GPUs: see docs/cuda.md.
#include <gtest/gtest.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/communicator.h"
#include "core/host_staging.h"
#include "core/policy.h"
#include "core/transports/nccl_transport.h"
#include "device_groups.h"
#include "fake_device.h"
#include "fake_device_codec.h"
#include "comm_internals.h"
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
      qct::internals_of(group[r])->transport = std::make_unique<qc::NcclTransport>(world->backend(r));
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
    // AUTO hands codec none to NCCL's own float sum (docs/algorithms.md),
    // whose order differs from qc's algorithms: the same to float rounding,
    // and the same bytes on every rank. Everything else, the global codecs'
    // integer sums included, is the local transport's bit for bit.
    const bool float_sum = !alltoall && codec.codec == QC_CODEC_NONE &&
                           std::get<1>(GetParam()) == QC_ALGO_AUTO;
    if (float_sum) {
      const size_t calls = got.size() / static_cast<size_t>(n);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], got[i % calls]) << "output " << i << " differs from rank 0's";
        const float* g = reinterpret_cast<const float*>(got[i].data());
        const float* w = reinterpret_cast<const float*>(want[i].data());
        for (size_t k = 0; k < count; ++k) {
          ASSERT_NEAR(g[k], w[k], 4.0f * static_cast<float>(n) * FLT_EPSILON * (1 + std::fabs(w[k])))
              << "output " << i << " element " << k;
        }
      }
    } else {
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "output " << i;
    }
    // The path taken: NCCL groups for qc's messages (the global codecs'
    // packed integer sums included), ncclAllReduce for codec none's sums.
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(nccl.world->allreduces(r, qc::NcclReduction::kSumFloat32) > 0, float_sum);
      EXPECT_EQ(nccl.world->allreduces(r, qc::NcclReduction::kMinUint64) > 0, float_sum);
      if (!float_sum) {
        EXPECT_GT(nccl.world->groups(r), 0) << "never used NCCL's point to point";
      }
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

// Reduce-scatter, allgather and broadcast over NCCL's point to point: the
// local transport's bytes, every message at its exact frame size.
TEST(NcclTransport, ShardedCollectivesSameBytesAsTheLocalTransport) {
  enum Kind { kReduceScatter, kAllgather, kBroadcast };
  for (int n : {2, 3, 5}) {
    for (int kind : {kReduceScatter, kAllgather, kBroadcast}) {
      for (int c : {0, 2, 3, 5, 6, 7}) {
        for (qc_algorithm_t a : {QC_ALGO_AUTO, QC_ALGO_RING, QC_ALGO_TREE}) {
          SCOPED_TRACE("n " + std::to_string(n) + " kind " + std::to_string(kind) + " codec " +
                       kCodecs[c].name + " algorithm " + qct::algo_name(a));
          const qc_policy_t p = policy_of(kCodecs[c], a);
          const size_t block = 1003;
          const size_t in_n = kind == kReduceScatter ? block * static_cast<size_t>(n) : block;
          const size_t out_n = kind == kAllgather ? block * static_cast<size_t>(n) : block;
          auto run_group = [&](Group& g, std::vector<Bytes>* out) {
            EXPECT_EQ(g.set_policy("*", p), QC_SUCCESS) << qc_last_error();
            out->assign(static_cast<size_t>(n), Bytes(out_n * 4));
            const auto in = qct::random_inputs(n, in_n, 7);
            std::vector<qc_error_buffer_t> eb(static_cast<size_t>(n), nullptr);
            for (int r = 0; r < n && p.error_feedback != 0 && kind != kBroadcast; ++r)
              EXPECT_EQ(qc_error_buffer_create(g[r], in_n, &eb[static_cast<size_t>(r)]), QC_SUCCESS);
            qct::run_ranks(n, [&](int r) {
              const float* x = in[static_cast<size_t>(r)].data();
              void* y = (*out)[static_cast<size_t>(r)].data();
              qc_error_buffer_t e = eb[static_cast<size_t>(r)];
              qc_status_t s = QC_SUCCESS;
              for (int call = 0; call < 2 && s == QC_SUCCESS; ++call) {
                s = kind == kReduceScatter
                        ? qc_reduce_scatter(g[r], x, y, block, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                            nullptr, e, nullptr)
                    : kind == kAllgather
                        ? qc_allgather(g[r], x, y, block, QC_DTYPE_FLOAT32, nullptr, e, nullptr)
                        : qc_broadcast(g[r], x, y, block, QC_DTYPE_FLOAT32, n - 1, nullptr,
                                       nullptr);
              }
              EXPECT_EQ(s, QC_SUCCESS) << "rank " << r << ": " << qc_last_error();
            });
            for (auto e : eb) qc_error_buffer_destroy(e);
          };
          Group local(n);
          NcclGroup nccl(n, qct::kTimeoutSeconds);
          ASSERT_TRUE(local.ok() && nccl.group.ok());
          std::vector<Bytes> want, got;
          run_group(local, &want);
          run_group(nccl.group, &got);
          EXPECT_EQ(nccl.world->size_mismatch(), "");
          for (int r = 0; r < n; ++r) {
            EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "rank " << r;
            EXPECT_GT(nccl.world->groups(r), 0) << "rank " << r << " never used NCCL's point to point";
          }
        }
      }
    }
  }
}

// The sparse allreduce's three schedules over NCCL's point to point: few
// rows (allgather), policy algorithm sra, and every row of the table on
// every rank (a dense output densifies): the local transport's bits.
TEST(NcclTransport, SparseAllreduceSameBytesAsTheLocalTransport) {
  const size_t row_len = 9, nrows = 120;
  for (int n : {2, 3, 5}) {
    for (int c : {0, 2, 4, 5}) {
      for (qc_algorithm_t a : {QC_ALGO_AUTO, QC_ALGO_SRA}) {
        for (bool full : {false, true}) {
          SCOPED_TRACE("n " + std::to_string(n) + " codec " + kCodecs[c].name + " algorithm " +
                       qct::algo_name(a) + (full ? " full table" : " few rows"));
          qc_policy_t p = policy_of(kCodecs[c], a);
          p.error_feedback = 0;
          std::vector<std::vector<int64_t>> idx(static_cast<size_t>(n));
          for (int r = 0; r < n; ++r) {
            const size_t rows = full ? nrows : static_cast<size_t>(3 + 2 * r);
            for (size_t k = 0; k < rows; ++k) {
              idx[static_cast<size_t>(r)].push_back(
                  full ? static_cast<int64_t>(k) : static_cast<int64_t>((k * 37 + 11 * r) % nrows));
            }
          }
          auto run_group = [&](Group& g, std::vector<Bytes>* out) {
            EXPECT_EQ(g.set_policy("*", p), QC_SUCCESS) << qc_last_error();
            out->assign(static_cast<size_t>(n), Bytes(nrows * row_len * 4));
            const auto in = qct::random_inputs(n, nrows * row_len, 11);
            qct::run_ranks(n, [&](int r) {
              const std::vector<int64_t>& i = idx[static_cast<size_t>(r)];
              const qc_status_t s = qc_sparse_allreduce_dense(
                  g[r], i.data(), in[static_cast<size_t>(r)].data(), i.size(), row_len, nrows,
                  (*out)[static_cast<size_t>(r)].data(), QC_DTYPE_FLOAT32, QC_OP_SUM, "emb");
              EXPECT_EQ(s, QC_SUCCESS) << "rank " << r << ": " << qc_last_error();
            });
          };
          Group local(n);
          NcclGroup nccl(n, qct::kTimeoutSeconds);
          ASSERT_TRUE(local.ok() && nccl.group.ok());
          std::vector<Bytes> want, got;
          run_group(local, &want);
          run_group(nccl.group, &got);
          EXPECT_EQ(nccl.world->size_mismatch(), "");
          for (int r = 0; r < n; ++r) {
            EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "rank " << r;
            EXPECT_EQ(got[static_cast<size_t>(r)], got[0]) << "rank " << r;
            EXPECT_GT(nccl.world->groups(r), 0) << "rank " << r;
          }
        }
      }
    }
  }
}

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

// The native collectives on their own: float sums in and out of place, and
// the agreement that comes before a native collective.
TEST(NcclNative, FloatAndAgreement) {
  const int n = 3;
  auto world = qcfake::FakeNcclWorld::create(n);
  std::vector<std::unique_ptr<qc::NcclTransport>> t;
  for (int r = 0; r < n; ++r) t.push_back(std::make_unique<qc::NcclTransport>(world->backend(r)));
  const auto deadline = qc::Clock::now() + std::chrono::seconds(10);
  std::vector<std::vector<float>> fsend(n), frecv(n), finplace(n);
  std::vector<qc::Status> s(static_cast<size_t>(n) * 3);
  qct::run_ranks(n, [&](int r) {
    fsend[r] = {0.5f * static_cast<float>(r), -1.25f, 3.0f};
    frecv[r].assign(3, -7.0f);
    finplace[r] = {1.0f, static_cast<float>(r), 0.25f};
    s[r * 3 + 0] = t[r]->allreduce_float(fsend[r].data(), frecv[r].data(), 3, deadline);
    s[r * 3 + 1] = t[r]->allreduce_float(finplace[r].data(), finplace[r].data(), 3, deadline);
    s[r * 3 + 2] = t[r]->agree(0x1234abcdu, deadline);
  });
  for (size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(s[i].is_ok()) << i << ": " << s[i].message();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(frecv[r], (std::vector<float>{1.5f, -3.75f, 9.0f}));
    EXPECT_EQ(fsend[r][0], 0.5f * static_cast<float>(r)) << "the send buffer must stay as given";
    EXPECT_EQ(finplace[r], (std::vector<float>{3.0f, 3.0f, 0.75f}));
    EXPECT_EQ(world->allreduces(r, qc::NcclReduction::kSumFloat32), 2);
    EXPECT_EQ(world->allreduces(r, qc::NcclReduction::kMinUint64), 1);
    EXPECT_EQ(world->groups(r), 0);
  }
  EXPECT_EQ(world->size_mismatch(), "");

  // One rank passes another value: every rank sees the MISMATCH.
  qct::run_ranks(n, [&](int r) { s[r] = t[r]->agree(r == 1 ? 5u : 4u, deadline); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(s[r].code(), QC_ERROR_MISMATCH) << s[r].message();
}

// A native collective that a peer never joins times out and aborts, like a
// group; a one-rank communicator needs no NCCL call at all.
TEST(NcclNative, AMissingRankTimesOutAndOneRankCallsNothing) {
  auto world = qcfake::FakeNcclWorld::create(2);
  qc::NcclTransport t0(world->backend(0));
  float v[2] = {1, 2};
  const qc::Status s =
      t0.allreduce_float(v, v, 2, qc::Clock::now() + std::chrono::milliseconds(200));
  EXPECT_EQ(s.code(), QC_ERROR_TIMEOUT) << s.message();
  EXPECT_NE(s.message().find("NCCL float allreduce"), std::string::npos) << s.message();
  EXPECT_TRUE(world->aborted(0));
  EXPECT_EQ(t0.failure().code(), QC_ERROR_TIMEOUT);

  auto solo = qcfake::FakeNcclWorld::create(1);
  qc::NcclTransport t(solo->backend(0));
  float x[2] = {1.5f, 2.5f}, y[2] = {0, 0};
  const auto deadline = qc::Clock::now() + std::chrono::seconds(10);
  EXPECT_TRUE(t.allreduce_float(x, y, 2, deadline).is_ok());
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], 2.5f);
  EXPECT_TRUE(t.agree(9, deadline).is_ok());
  EXPECT_EQ(solo->allreduces(0, qc::NcclReduction::kSumFloat32) +
                solo->allreduces(0, qc::NcclReduction::kMinUint64),
            0);
}

// Through qc_allreduce: explicit native with codec none runs on NCCL (the
// local transport refuses it), averages, and ranks that disagree on the
// count fail with MISMATCH at the agreement, before NCCL sees the data.
TEST(NcclNative, CodecNoneThroughTheApi) {
  const int n = 3;
  NcclGroup nccl(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.algorithm = QC_ALGO_NATIVE;
  ASSERT_EQ(nccl.group.set_policy("*", p), QC_SUCCESS) << qc_last_error();
  std::vector<qc_status_t> s(n);
  std::vector<std::vector<float>> y(n, std::vector<float>(4));
  qct::run_ranks(n, [&](int r) {
    const std::vector<float> x = {1.0f * r, 2.0f, -4.0f, 0.5f};
    s[r] = qc_allreduce(nccl.group[r], x.data(), y[r].data(), 4, QC_DTYPE_FLOAT32, QC_OP_AVG,
                        nullptr, nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(s[r], QC_SUCCESS) << qc_last_error();
    EXPECT_EQ(y[r], (std::vector<float>{1.0f, 2.0f, -4.0f, 0.5f}));
  }

  std::vector<std::string> e(n);
  qct::run_ranks(n, [&](int r) {
    const std::vector<float> x(8, 1.0f);
    std::vector<float> out(8);
    s[r] = qc_allreduce(nccl.group[r], x.data(), out.data(), r == 2 ? 8 : 6, QC_DTYPE_FLOAT32,
                        QC_OP_SUM, nullptr, nullptr, nullptr);
    e[r] = qc_last_error();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(s[r], QC_ERROR_MISMATCH) << e[r];
    EXPECT_NE(e[r].find("disagree"), std::string::npos) << e[r];
  }
  EXPECT_EQ(nccl.world->size_mismatch(), "") << "the data allreduce must not have started";
}

// ---------------------------------------------------------------------------
// Device buffers: qc_allreduce's dispatch with a fake device in place of the
// CUDA runtime (fake_device.h), one per rank.
// ---------------------------------------------------------------------------
void* stream_of(int r) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x5000 + r)); }

qc::Status device_allreduce(qc_comm_t comm, const qcfake::FakeDevice& dev, int r,
                            const void* send, void* recv, size_t count, qc_reduce_op_t op,
                            qc_dtype_t dtype = QC_DTYPE_FLOAT32, qc_error_buffer_t eb = nullptr) {
  return qc::allreduce_placed(qct::internals_of(comm), &dev, nullptr, stream_of(r), send, recv,
                              count, dtype, op, nullptr, qct::internals_of(eb));
}

std::vector<float> floats_of(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * 4);
  std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// Codec none under AUTO on float32 device buffers is NCCL's own allreduce on
// the caller's buffers and stream: one agreement, then ncclAllReduce
// enqueued, no staging copy, no host-image allreduce; sums and averages, in
// and out of place, the same bytes on every rank.
TEST(NcclDevice, CodecNoneIsEnqueuedOnTheCallersStreamWithoutCopies) {
  const int n = 3;
  const size_t count = 1001;
  for (qc_reduce_op_t op : {QC_OP_SUM, QC_OP_AVG}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::string(op == QC_OP_SUM ? "sum" : "avg") + (in_place ? ", in place" : ""));
      std::vector<qcfake::FakeDevice> dev(n);  // outlives the communicators
      NcclGroup nccl(n, qct::kTimeoutSeconds);
      ASSERT_TRUE(nccl.group.ok());
      const auto in = qct::random_inputs(n, count, 7);
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = dev[r].upload(bytes_of(in[r]));
        recv[r] = in_place ? send[r] : dev[r].alloc(count * 4);
      }
      std::vector<qc::Status> s(n);
      qct::run_ranks(n, [&](int r) {
        s[r] = device_allreduce(nccl.group[r], dev[r], r, send[r], recv[r], count, op);
      });
      std::vector<float> want(count);
      for (size_t i = 0; i < count; ++i) {
        float acc = in[0][i];
        for (int r = 1; r < n; ++r) acc += in[r][i];
        want[i] = op == QC_OP_AVG ? acc / static_cast<float>(n) : acc;
      }
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(s[r].is_ok()) << s[r].message();
        EXPECT_EQ(floats_of(dev[r].download(recv[r], count * 4)), want);
        EXPECT_EQ(dev[r].copies_to_host + dev[r].copies_to_device, 0) << "nothing is staged";
        EXPECT_EQ(dev[r].host_allocations, 0);
        EXPECT_EQ(nccl.world->enqueued(r), 1);
        EXPECT_EQ(nccl.world->last_stream(r), stream_of(r)) << "the caller's stream";
        EXPECT_EQ(nccl.world->allreduces(r, qc::NcclReduction::kMinUint64), 1) << "one agreement";
        EXPECT_EQ(nccl.world->allreduces(r, qc::NcclReduction::kSumFloat32), 0);
        EXPECT_EQ(nccl.world->groups(r), 0);
        qc_stats_t st{};
        st.struct_size = sizeof st;
        ASSERT_EQ(qc_comm_get_stats(nccl.group[r], &st), QC_SUCCESS);
        EXPECT_EQ(st.calls, 1u);
        EXPECT_EQ(st.logical_bytes, count * 4);
      }
      EXPECT_EQ(nccl.world->size_mismatch(), "");
    }
  }
}

// Every other call on device buffers is staged and runs qc's algorithms (or
// the host image's allreduce) on the host copy: compressed codecs, 16-bit
// data, and codec none with error feedback.
TEST(NcclDevice, OtherCallsAreStagedAndMatchTheHostPath) {
  const int n = 3;
  const size_t count = 600;
  struct Case {
    const char* name;
    qc_codec_t codec;
    qc_dtype_t dtype;
    bool feedback;
  };
  for (const Case& c : {Case{"minmax", QC_CODEC_MINMAX, QC_DTYPE_FLOAT32, false},
                        Case{"none fp16", QC_CODEC_NONE, QC_DTYPE_FLOAT16, false},
                        Case{"none with feedback", QC_CODEC_NONE, QC_DTYPE_FLOAT32, true}}) {
    SCOPED_TRACE(c.name);
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.error_feedback = c.feedback ? 1 : 0;
    p.min_compress_bytes = 0;
    std::vector<qcfake::FakeDevice> dev(n);  // outlives the communicators, which stage through it
    NcclGroup on_device(n, qct::kTimeoutSeconds), on_host(n, qct::kTimeoutSeconds);
    ASSERT_TRUE(on_device.group.ok() && on_host.group.ok());
    ASSERT_EQ(on_device.group.set_policy("*", p), QC_SUCCESS);
    ASSERT_EQ(on_host.group.set_policy("*", p), QC_SUCCESS);
    const auto in = qct::random_inputs(n, count, 11, c.dtype);
    std::vector<Bytes> host_in(n), host_out(n, Bytes(count * qct::dtype_size(c.dtype)));
    std::vector<void*> send(n), recv(n);
    std::vector<qc_error_buffer_t> eb_dev(n, nullptr), eb_host(n, nullptr);
    for (int r = 0; r < n; ++r) {
      host_in[r] = qct::encode(in[r], c.dtype);
      send[r] = dev[r].upload(host_in[r]);
      recv[r] = dev[r].alloc(host_in[r].size());
      if (c.feedback) {
        ASSERT_EQ(qc_error_buffer_create(on_device.group[r], count, &eb_dev[r]), QC_SUCCESS);
        ASSERT_EQ(qc_error_buffer_create(on_host.group[r], count, &eb_host[r]), QC_SUCCESS);
      }
    }
    std::vector<qc::Status> sd(n);
    std::vector<qc_status_t> sh(n);
    qct::run_ranks(n, [&](int r) {
      sd[r] = device_allreduce(on_device.group[r], dev[r], r, send[r], recv[r], count, QC_OP_SUM,
                               c.dtype, eb_dev[r]);
    });
    qct::run_ranks(n, [&](int r) {
      sh[r] = qc_allreduce(on_host.group[r], host_in[r].data(), host_out[r].data(), count,
                           c.dtype, QC_OP_SUM, nullptr, eb_host[r], nullptr);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(sd[r].is_ok()) << sd[r].message();
      ASSERT_EQ(sh[r], QC_SUCCESS);
      EXPECT_EQ(dev[r].download(recv[r], host_out[r].size()), host_out[r]);
      EXPECT_EQ(on_device.world->enqueued(r), 0) << "not enqueued";
      EXPECT_GT(dev[r].copies_to_host, 0) << "staged";
      if (eb_dev[r] != nullptr) qc_error_buffer_destroy(eb_dev[r]);
      if (eb_host[r] != nullptr) qc_error_buffer_destroy(eb_host[r]);
    }
  }
}

// Reduce-scatter, allgather and broadcast on device buffers are staged
// whole (no device-executor path for them yet): the host path's bytes, in
// and out through the device, error feedback included.
TEST(NcclDevice, ShardedCollectivesAreStagedAndMatchTheHostPath) {
  const int n = 3;
  const size_t block = 500;
  enum Kind { kReduceScatter, kAllgather, kBroadcast };
  for (int kind : {kReduceScatter, kAllgather, kBroadcast}) {
    for (bool feedback : {false, true}) {
      if (kind == kBroadcast && feedback) continue;
      SCOPED_TRACE("kind " + std::to_string(kind) + (feedback ? " with feedback" : ""));
      qc_policy_t p = QC_POLICY_INIT;
      p.codec = QC_CODEC_MINMAX;
      p.bits = 4;
      p.error_feedback = feedback ? 1 : 0;
      p.min_compress_bytes = 0;
      const size_t in_n = kind == kReduceScatter ? block * n : block;
      const size_t out_n = kind == kAllgather ? block * n : block;
      std::vector<qcfake::FakeDevice> dev(n);  // outlives the communicators
      NcclGroup on_device(n, qct::kTimeoutSeconds), on_host(n, qct::kTimeoutSeconds);
      ASSERT_TRUE(on_device.group.ok() && on_host.group.ok());
      ASSERT_EQ(on_device.group.set_policy("*", p), QC_SUCCESS);
      ASSERT_EQ(on_host.group.set_policy("*", p), QC_SUCCESS);
      const auto in = qct::random_inputs(n, in_n, 13);
      std::vector<Bytes> host_out(n, Bytes(out_n * 4));
      std::vector<void*> send(n), recv(n);
      std::vector<qc_error_buffer_t> eb_dev(n, nullptr), eb_host(n, nullptr);
      for (int r = 0; r < n; ++r) {
        send[r] = dev[r].upload(bytes_of(in[r]));
        recv[r] = dev[r].alloc(out_n * 4);
        if (feedback) {
          ASSERT_EQ(qc_error_buffer_create(on_device.group[r], in_n, &eb_dev[r]), QC_SUCCESS);
          ASSERT_EQ(qc_error_buffer_create(on_host.group[r], in_n, &eb_host[r]), QC_SUCCESS);
        }
      }
      std::vector<qc::Status> sd(n);
      std::vector<qc_status_t> sh(n);
      for (int call = 0; call < 2; ++call) {  // the second call spends the residuals
        qct::run_ranks(n, [&](int r) {
          qc::Communicator* c = qct::internals_of(on_device.group[r]);
          qc::ErrorBuffer* e = qct::internals_of(eb_dev[r]);
          sd[r] = kind == kReduceScatter
                      ? qc::comm_reduce_scatter(c, &dev[r], stream_of(r), send[r], recv[r], block,
                                                QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, e)
                  : kind == kAllgather
                      ? qc::comm_allgather(c, &dev[r], stream_of(r), send[r], recv[r], block,
                                           QC_DTYPE_FLOAT32, nullptr, e)
                      : qc::comm_broadcast(c, &dev[r], stream_of(r), r == 1 ? send[r] : nullptr,
                                           recv[r], block, QC_DTYPE_FLOAT32, 1, nullptr);
        });
        qct::run_ranks(n, [&](int r) {
          const float* x = in[r].data();
          void* y = host_out[r].data();
          sh[r] = kind == kReduceScatter
                      ? qc_reduce_scatter(on_host.group[r], x, y, block, QC_DTYPE_FLOAT32,
                                          QC_OP_SUM, nullptr, eb_host[r], nullptr)
                  : kind == kAllgather
                      ? qc_allgather(on_host.group[r], x, y, block, QC_DTYPE_FLOAT32, nullptr,
                                     eb_host[r], nullptr)
                      : qc_broadcast(on_host.group[r], x, y, block, QC_DTYPE_FLOAT32, 1, nullptr,
                                     nullptr);
        });
        for (int r = 0; r < n; ++r) {
          SCOPED_TRACE("call " + std::to_string(call) + " rank " + std::to_string(r));
          ASSERT_TRUE(sd[r].is_ok()) << sd[r].message();
          ASSERT_EQ(sh[r], QC_SUCCESS) << qc_last_error();
          EXPECT_EQ(dev[r].download(recv[r], out_n * 4), host_out[r]);
          // Staged: the input up (a broadcast's only at its root), the output down.
          if (kind != kBroadcast || r == 1) {
            EXPECT_GT(dev[r].copies_to_host, 0) << "staged";
          }
          EXPECT_GT(dev[r].copies_to_device, 0) << "staged";
          EXPECT_EQ(on_device.world->enqueued(r), 0) << "not enqueued";
        }
      }
      for (int r = 0; r < n; ++r) {
        if (eb_dev[r] != nullptr) qc_error_buffer_destroy(eb_dev[r]);
        if (eb_host[r] != nullptr) qc_error_buffer_destroy(eb_host[r]);
      }
    }
  }
}

// A rank whose buffers are on another device than its communicator's says
// so in the agreement: it gets INVALID_ARGUMENT, every peer MISMATCH, and no
// rank enqueues an allreduce that would wait on its stream for ever.
TEST(NcclDevice, BuffersOnAnotherDeviceFailEveryRankBeforeAnyEnqueue) {
  const int n = 3;
  std::vector<qcfake::FakeDevice> dev(n);  // outlives the communicators
  NcclGroup nccl(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  std::vector<void*> buf(n);
  for (int r = 0; r < n; ++r) buf[r] = dev[r].alloc(64 * 4);
  nccl.world->set_foreign_buffer(buf[1]);
  std::vector<qc::Status> s(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = device_allreduce(nccl.group[r], dev[r], r, buf[r], buf[r], 64, QC_OP_SUM);
  });
  EXPECT_EQ(s[1].code(), QC_ERROR_INVALID_ARGUMENT) << s[1].message();
  EXPECT_NE(s[1].message().find("another device"), std::string::npos) << s[1].message();
  for (int r : {0, 2}) EXPECT_EQ(s[r].code(), QC_ERROR_MISMATCH) << s[r].message();
  for (int r = 0; r < n; ++r) EXPECT_EQ(nccl.world->enqueued(r), 0);
}

// One rank on device buffers, the others on host buffers: two protocols
// (NCCL's average on the device, a host sum scaled after), told apart by
// the agreement.
TEST(NcclDevice, MixingDeviceAndHostRanksIsAMismatch) {
  const int n = 3;
  qcfake::FakeDevice dev;  // outlives the communicators
  NcclGroup nccl(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  void* d = dev.alloc(32 * 4, 0);
  std::vector<std::vector<float>> h(n, std::vector<float>(32, 1.0f));
  std::vector<qc_status_t> s(n);
  std::vector<std::string> e(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = r == 0 ? device_allreduce(nccl.group[r], dev, r, d, d, 32, QC_OP_AVG).code()
                  : qc_allreduce(nccl.group[r], h[r].data(), h[r].data(), 32, QC_DTYPE_FLOAT32,
                                 QC_OP_AVG, nullptr, nullptr, nullptr);
    e[r] = r == 0 ? "" : qc_last_error();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(s[r], QC_ERROR_MISMATCH) << "rank " << r << ": " << e[r];
    EXPECT_EQ(nccl.world->enqueued(r), 0);
  }
}

// An error NCCL finds after the call returned (an enqueued allreduce that
// failed) breaks the group: qc_comm_get_async_error reports it, qc aborts
// its NCCL communicator, and the next call fails at once.
TEST(NcclDevice, AnAsynchronousNcclErrorBreaksTheGroup) {
  const int n = 2;
  std::vector<qcfake::FakeDevice> dev(n);  // outlives the communicators
  NcclGroup nccl(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  std::vector<void*> buf(n);
  for (int r = 0; r < n; ++r) buf[r] = dev[r].alloc(16 * 4, 0);
  std::vector<qc::Status> s(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = device_allreduce(nccl.group[r], dev[r], r, buf[r], buf[r], 16, QC_OP_SUM);
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(s[r].is_ok()) << s[r].message();
  qc_status_t async = QC_ERROR_INTERNAL;
  ASSERT_EQ(qc_comm_get_async_error(nccl.group[1], &async), QC_SUCCESS);
  EXPECT_EQ(async, QC_SUCCESS);

  nccl.world->set_async_error(1, qc::transport_error("fake NCCL: remote process exited"));
  ASSERT_EQ(qc_comm_get_async_error(nccl.group[1], &async), QC_SUCCESS);
  EXPECT_EQ(async, QC_ERROR_TRANSPORT);
  const std::string why = qc_last_error();
  EXPECT_NE(why.find("after a call returned"), std::string::npos) << why;
  EXPECT_NE(why.find("remote process exited"), std::string::npos) << why;
  EXPECT_TRUE(nccl.world->aborted(1));
  const qc::Status next =
      device_allreduce(nccl.group[1], dev[1], 1, buf[1], buf[1], 16, QC_OP_SUM);
  EXPECT_EQ(next.code(), QC_ERROR_TRANSPORT) << next.message();
  EXPECT_NE(next.message().find("broken"), std::string::npos) << next.message();
  EXPECT_EQ(nccl.world->enqueued(1), 1);
}

// A device call reads no input on the host, so it has no norm: the layer's
// mean_sq_norm (what adaptive bit widths use) averages the host calls only.
TEST(NcclDevice, LayerNormsAverageOnlyTheCallsThatMeasuredOne) {
  qcfake::FakeDevice dev;  // outlives the communicator
  NcclGroup nccl(1, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  // One rank: AUTO would pick ring (and stage); native keeps NCCL's sum.
  qc_policy_t p = QC_POLICY_INIT;
  p.algorithm = QC_ALGO_NATIVE;
  ASSERT_EQ(nccl.group.set_policy("*", p), QC_SUCCESS);
  void* d = dev.alloc(4 * 4, 0);
  const qc::Status s = device_allreduce(nccl.group[0], dev, 0, d, d, 4, QC_OP_SUM);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(nccl.world->enqueued(0), 1);
  qc_layer_stats_t ls{};
  ls.struct_size = sizeof ls;
  ASSERT_EQ(qc_comm_get_layer_stats(nccl.group[0], nullptr, &ls), QC_SUCCESS);
  EXPECT_EQ(ls.calls, 1u);
  EXPECT_EQ(ls.mean_sq_norm, 0.0);
  std::vector<float> x = {3.0f, 4.0f}, y(2);
  ASSERT_EQ(qc_allreduce(nccl.group[0], x.data(), y.data(), 2, QC_DTYPE_FLOAT32, QC_OP_SUM,
                         nullptr, nullptr, nullptr),
            QC_SUCCESS);
  ASSERT_EQ(qc_comm_get_layer_stats(nccl.group[0], nullptr, &ls), QC_SUCCESS);
  EXPECT_EQ(ls.calls, 2u);
  EXPECT_EQ(ls.mean_sq_norm, 25.0) << "the host call's norm alone, not (0 + 25) / 2";
}


// ---------------------------------------------------------------------------
// Compressed allreduces of device buffers, stream-ordered: every step of
// ring, recursive doubling, SRA and tree (kernels, ncclSend/ncclRecv
// groups) enqueued on the caller's stream (executors/device_executor.cpp).
// The fake device codec runs the CPU codecs over the fake device's memory;
// the fake NCCL's "stream" runs each group before returning, so the
// results are checked right after the call.
// ---------------------------------------------------------------------------

qc::Status codec_allreduce(qc_comm_t comm, const qcfake::FakeDevice& dev,
                           const qcfake::CpuMessageCodec& mc, void* stream, const void* send,
                           void* recv, size_t count, qc_reduce_op_t op,
                           qc_error_buffer_t eb = nullptr) {
  return qc::allreduce_placed(qct::internals_of(comm), &dev, &mc, stream, send, recv, count,
                              QC_DTYPE_FLOAT32, op, nullptr, qct::internals_of(eb));
}

// TwoGroups (device_groups.h) whose device group runs on NCCL transports
// over one fake NCCL.
struct NcclTwoGroups : TwoGroups {
  explicit NcclTwoGroups(int n) : TwoGroups(n), world(qcfake::FakeNcclWorld::create(n)) {
    for (int r = 0; r < n && device.ok(); ++r) {
      qct::internals_of(device[r])->transport = std::make_unique<qc::NcclTransport>(world->backend(r));
    }
  }
  std::shared_ptr<qcfake::FakeNcclWorld> world;
};

// The host path's outputs on the local group `g` (under the device ranks'
// policy: AUTO picks the same algorithm there, the rule differs only for
// codec none), the reference.
std::vector<Bytes> host_allreduce(Group& g, const std::vector<Bytes>& in, size_t count,
                                  qc_reduce_op_t op, qc_dtype_t dtype = QC_DTYPE_FLOAT32) {
  const int n = g.size();
  std::vector<Bytes> out(n, Bytes(count * qct::dtype_size(dtype)));
  std::vector<qc_status_t> s(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = qc_allreduce(g[r], in[r].data(), out[r].data(), count, dtype, op, nullptr, nullptr,
                        nullptr);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(s[r], QC_SUCCESS) << "host path, rank " << r;
  return out;
}

struct EnqueuedCase {
  const char* name;
  qc_codec_t codec;
  int bits;
  int bucket_size;
  qc_rounding_t rounding;
  qc_algorithm_t algorithm;
  int ranks;
  size_t count;
  qc_reduce_op_t op;
  bool in_place;
  int group_size;
  // Each rank's device groups: the algorithm's schedule (ring: 2 (n-1)
  // exchanges; SRA: scatter and allgather; tree and recursive doubling:
  // one per step, per rank). Empty blocks send nothing, hence no count for
  // fewer values than ranks.
  std::vector<long> groups;
};

void PrintTo(const EnqueuedCase& c, std::ostream* os) { *os << c.name; }

qc_policy_t enqueued_policy(const EnqueuedCase& c) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = c.codec;
  p.bits = c.bits;
  p.bucket_size = c.bucket_size;
  p.rounding = c.rounding;
  p.algorithm = c.algorithm;
  p.min_compress_bytes = 0;
  p.seed = 17;
  if (c.group_size > 0) p.group_size = c.group_size;
  return p;
}

class NcclEnqueued : public ::testing::TestWithParam<EnqueuedCase> {};

// The host algorithm's result bit for bit, with nothing staged and nothing
// awaited: one agreement, then the algorithm's groups on the caller's
// stream, and an event marking where the call's work ends.
TEST_P(NcclEnqueued, MatchesTheHostPathWithNothingStagedOrAwaited) {
  const EnqueuedCase& c = GetParam();
  const int n = c.ranks;
  const qc_policy_t p = enqueued_policy(c);
  NcclTwoGroups t(n);
  ASSERT_TRUE(under_policy(t, p));
  const auto in = qct::encode_all(qct::random_inputs(n, c.count, 31), QC_DTYPE_FLOAT32);
  const std::vector<Bytes> want = host_allreduce(t.host, in, c.count, c.op);
  ASSERT_EQ(want.size(), static_cast<size_t>(n));
  std::vector<void*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = t.dev[r].upload(in[r]);
    recv[r] = c.in_place ? send[r] : t.dev[r].alloc(c.count * 4);
  }
  std::vector<qc::Status> s(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = codec_allreduce(t.device[r], t.dev[r], t.mc[r], stream_of(r), send[r], recv[r],
                           c.count, c.op);
  });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(s[r].is_ok()) << s[r].message();
    EXPECT_EQ(t.dev[r].download(recv[r], c.count * 4), want[r]);
    EXPECT_EQ(t.dev[r].copies_to_host + t.dev[r].copies_to_device, 0) << "nothing staged";
    EXPECT_EQ(t.dev[r].host_allocations, 0);
    EXPECT_EQ(t.mc[r].synchronizations, 0) << "nothing awaited";
    EXPECT_EQ(t.mc[r].norms, 0) << "a norm would wait for the stream";
    EXPECT_GT(t.mc[r].encodes, 0);
    for (void* st : t.mc[r].streams) EXPECT_EQ(st, stream_of(r)) << "the caller's stream";
    EXPECT_EQ(t.world->allreduces(r, qc::NcclReduction::kMinUint64), n > 1 ? 1 : 0)
        << "one agreement (none needed alone)";
    EXPECT_EQ(t.world->groups(r), 0) << "no host frames";
    EXPECT_EQ(t.world->enqueued(r), 0);
    if (!c.groups.empty()) {
      EXPECT_EQ(t.world->device_groups(r), c.groups[static_cast<size_t>(r)]);
    }
    if (n > 1) {
      EXPECT_EQ(t.world->last_stream(r), stream_of(r));
    }
    EXPECT_EQ(t.dev[r].event_records, 1) << "the call's end, for the next user of its memory";
    EXPECT_TRUE(t.dev[r].host_waits.empty());
  }
  EXPECT_EQ(t.world->size_mismatch(), "");
}

std::vector<long> each(int n, long groups) {
  return std::vector<long>(static_cast<size_t>(n), groups);
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, NcclEnqueued,
    ::testing::Values(
        // AUTO below 64 KiB per rank: recursive doubling, here one group of
        // three (an intra-group reduce and gather).
        EnqueuedCase{"Minmax4AutoThreeRanks", QC_CODEC_MINMAX, 4, 128, QC_ROUND_NEAREST_EVEN,
                     QC_ALGO_AUTO, 3, 1001, QC_OP_SUM, false, 0, each(3, 2)},
        // AUTO from 64 KiB per rank: SRA.
        EnqueuedCase{"Minmax4AutoLargeFourRanks", QC_CODEC_MINMAX, 4, 128, QC_ROUND_STOCHASTIC,
                     QC_ALGO_AUTO, 4, 20000, QC_OP_AVG, false, 0, each(4, 2)},
        EnqueuedCase{"Minmax2Bucket37RingFiveRanksAvgInPlace", QC_CODEC_MINMAX, 2, 37,
                     QC_ROUND_STOCHASTIC, QC_ALGO_RING, 5, 999, QC_OP_AVG, true, 0, each(5, 8)},
        EnqueuedCase{"Qsgd4StochasticAutoTwoRanks", QC_CODEC_QSGD, 4, 64, QC_ROUND_STOCHASTIC,
                     QC_ALGO_AUTO, 2, 4096, QC_OP_SUM, false, 0, each(2, 2)},
        EnqueuedCase{"OnebitRingFourRanksAvg", QC_CODEC_ONEBIT, 1, 128, QC_ROUND_NEAREST_EVEN,
                     QC_ALGO_RING, 4, 1000, QC_OP_AVG, false, 0, each(4, 6)},
        EnqueuedCase{"Fp16AutoThreeRanksInPlace", QC_CODEC_FP16, 4, 128, QC_ROUND_NEAREST_EVEN,
                     QC_ALGO_AUTO, 3, 777, QC_OP_SUM, true, 0, each(3, 2)},
        EnqueuedCase{"Bf16OneRank", QC_CODEC_BF16, 4, 128, QC_ROUND_NEAREST_EVEN, QC_ALGO_AUTO, 1,
                     500, QC_OP_SUM, false, 0, each(1, 0)},
        EnqueuedCase{"Minmax4FewerValuesThanRanks", QC_CODEC_MINMAX, 4, 128,
                     QC_ROUND_NEAREST_EVEN, QC_ALGO_RING, 5, 3, QC_OP_SUM, false, 0, {}},
        EnqueuedCase{"Minmax4SraFiveRanksStochasticAvgInPlace", QC_CODEC_MINMAX, 4, 128,
                     QC_ROUND_STOCHASTIC, QC_ALGO_SRA, 5, 1003, QC_OP_AVG, true, 0, each(5, 2)},
        EnqueuedCase{"OnebitSraFewerValuesThanRanks", QC_CODEC_ONEBIT, 1, 128,
                     QC_ROUND_NEAREST_EVEN, QC_ALGO_SRA, 5, 3, QC_OP_SUM, false, 0, {}},
        // Rank 0 receives from 1, 2 and 4, then broadcasts in one group;
        // 2 receives from 3, sends, receives the result and forwards it.
        EnqueuedCase{"Qsgd4TreeFiveRanks", QC_CODEC_QSGD, 4, 64, QC_ROUND_STOCHASTIC,
                     QC_ALGO_TREE, 5, 999, QC_OP_SUM, false, 0, {4, 2, 4, 2, 2}},
        EnqueuedCase{"Bf16TreeThreeRanksAvgInPlace", QC_CODEC_BF16, 4, 128,
                     QC_ROUND_NEAREST_EVEN, QC_ALGO_TREE, 3, 640, QC_OP_AVG, true, 0, {3, 2, 2}},
        // Groups of 2, 2 groups, ranks 4 and 5 folded into 0 and 1: fold,
        // intra reduce, one halving, one doubling, intra gather, unfold.
        EnqueuedCase{"Minmax4RecursiveDoublingSixRanksGroupsOfTwo", QC_CODEC_MINMAX, 4, 128,
                     QC_ROUND_STOCHASTIC, QC_ALGO_RECURSIVE_DOUBLING, 6, 1001, QC_OP_SUM, false, 2,
                     {6, 6, 4, 4, 2, 2}},
        // Groups of 1: two halvings and two doublings across four groups,
        // rank 4 folded into 0.
        EnqueuedCase{"OnebitRecursiveDoublingFiveRanksGroupsOfOne", QC_CODEC_ONEBIT, 1, 64,
                     QC_ROUND_NEAREST_EVEN, QC_ALGO_RECURSIVE_DOUBLING, 5, 1000, QC_OP_AVG, true,
                     1, {6, 4, 4, 4, 2}},
        // AUTO's recursive doubling, told from SRA by its schedule.
        EnqueuedCase{"Minmax4AutoFiveRanksGroupsOfTwo", QC_CODEC_MINMAX, 4, 128,
                     QC_ROUND_STOCHASTIC, QC_ALGO_AUTO, 5, 1001, QC_OP_SUM, false, 2,
                     {6, 4, 4, 4, 2}},
        // Groups of 2 across 4 groups: two halvings, two doublings, a gather
        // of four blocks from the other member.
        EnqueuedCase{"Qsgd4RecursiveDoublingEightRanksGroupsOfTwo", QC_CODEC_QSGD, 4, 64,
                     QC_ROUND_STOCHASTIC, QC_ALGO_RECURSIVE_DOUBLING, 8, 2003, QC_OP_AVG, false,
                     2, each(8, 6)},
        EnqueuedCase{"Minmax8RecursiveDoublingFewerValuesThanRanks", QC_CODEC_MINMAX, 8, 128,
                     QC_ROUND_NEAREST_EVEN, QC_ALGO_RECURSIVE_DOUBLING, 7, 4, QC_OP_SUM, false, 2,
                     {}}),
    [](const ::testing::TestParamInfo<EnqueuedCase>& info) { return info.param.name; });

// 16-bit data runs the enqueued algorithm on a float32 copy on the device,
// widened first and narrowed into recvbuf last, on the caller's stream: the
// host path's bytes.
TEST(NcclEnqueued16Bit, MatchesTheHostPathOnAFloat32Copy) {
  const int n = 3;
  const size_t count = 1001;
  const std::tuple<qc_dtype_t, qc_algorithm_t, std::vector<long>> cases[] = {
      {QC_DTYPE_FLOAT16, QC_ALGO_RING, each(n, 4)},
      {QC_DTYPE_BFLOAT16, QC_ALGO_SRA, each(n, 2)},
      {QC_DTYPE_FLOAT16, QC_ALGO_TREE, {3, 2, 2}},
      {QC_DTYPE_BFLOAT16, QC_ALGO_AUTO, each(n, 2)}};  // recursive doubling
  for (const auto& [dtype, algorithm, groups] : cases) {
    SCOPED_TRACE(std::string(dtype == QC_DTYPE_FLOAT16 ? "float16, " : "bfloat16, ") +
                 qc::algorithm_name(algorithm));
    const qc_policy_t p = enqueued_policy(EnqueuedCase{"", QC_CODEC_MINMAX, 4, 128,
                                                       QC_ROUND_STOCHASTIC, algorithm, n, count,
                                                       QC_OP_AVG, false, 0, {}});
    NcclTwoGroups t(n);
    ASSERT_TRUE(under_policy(t, p));
    const auto in = qct::encode_all(qct::random_inputs(n, count, 37, dtype), dtype);
    const std::vector<Bytes> want = host_allreduce(t.host, in, count, QC_OP_AVG, dtype);
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = t.dev[r].upload(in[r]);
      recv[r] = t.dev[r].alloc(count * 2);
    }
    std::vector<qc::Status> s(n);
    qct::run_ranks(n, [&](int r) {
      s[r] = qc::allreduce_placed(qct::internals_of(t.device[r]), &t.dev[r], &t.mc[r], stream_of(r), send[r],
                                  recv[r], count, dtype, QC_OP_AVG, nullptr, nullptr);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(s[r].is_ok()) << s[r].message();
      EXPECT_EQ(t.dev[r].download(recv[r], count * 2), want[r]);
      EXPECT_EQ(t.dev[r].copies_to_host + t.dev[r].copies_to_device, 0) << "nothing staged";
      EXPECT_EQ(t.mc[r].synchronizations, 0) << "nothing awaited";
      EXPECT_EQ(t.world->device_groups(r), groups[static_cast<size_t>(r)]);
      ASSERT_FALSE(t.mc[r].arithmetic_ops.empty());
      EXPECT_EQ(t.mc[r].arithmetic_ops.front(), "widen");
      EXPECT_EQ(t.mc[r].arithmetic_ops.back(), "narrow");
    }
  }
}

std::vector<Bytes> images_of(const std::vector<qc_error_buffer_t>& ebs) {
  std::vector<Bytes> out;
  for (qc_error_buffer_t eb : ebs) {
    size_t size = 0;
    EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS) << qc_last_error();
    Bytes image(size);
    EXPECT_EQ(qc_error_buffer_save(eb, image.data(), size, &size), QC_SUCCESS) << qc_last_error();
    out.push_back(image);
  }
  return out;
}

// The enqueued tests' minmax 4-bit stochastic policy with error feedback.
qc_policy_t feedback_policy(qc_algorithm_t algorithm, int group_size, qc_reduce_op_t op) {
  qc_policy_t p = enqueued_policy(EnqueuedCase{"", QC_CODEC_MINMAX, 4, 128, QC_ROUND_STOCHASTIC,
                                               algorithm, 0, 0, op, false, group_size, {}});
  p.error_feedback = 1;
  return p;
}

// With error feedback the residuals stay on the device and every encode is
// compensated there: three calls give the host algorithm's results and,
// read back (which waits for the enqueued work first), its residuals. Five
// ranks in groups of two: recursive doubling folds rank 4 into rank 0,
// whose whole tensor is then one compensated encode.
TEST(NcclEnqueuedFeedback, ResidualsOnTheDeviceEqualTheHostPaths) {
  const int n = 5;
  const size_t count = 1000;
  for (const qc_algorithm_t algorithm : {QC_ALGO_RING, QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA,
                                         QC_ALGO_TREE}) {
    SCOPED_TRACE(qc::algorithm_name(algorithm));
    NcclTwoGroups t(n);
    ASSERT_TRUE(under_policy(t, feedback_policy(algorithm, 2, QC_OP_AVG)));
    const PairedErrorBuffers eb(t, count, /*feedback=*/true);
    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const auto in = qct::encode_all(qct::random_inputs(n, count, 50 + call), QC_DTYPE_FLOAT32);
      std::vector<Bytes> want(n, Bytes(count * 4));
      qct::run_ranks(n, [&](int r) {
        EXPECT_EQ(qc_allreduce(t.host[r], in[r].data(), want[r].data(), count, QC_DTYPE_FLOAT32,
                               QC_OP_AVG, nullptr, eb.host[r], nullptr),
                  QC_SUCCESS);
      });
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = t.dev[r].upload(in[r]);
        recv[r] = t.dev[r].alloc(count * 4);
        t.mc[r].encodes = t.mc[r].compensated_encodes = 0;
      }
      std::vector<long> groups_before(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) groups_before[r] = t.world->device_groups(r);
      std::vector<qc::Status> s(n);
      qct::run_ranks(n, [&](int r) {
        s[r] = codec_allreduce(t.device[r], t.dev[r], t.mc[r], stream_of(r), send[r], recv[r],
                               count, QC_OP_AVG, eb.device[r]);
      });
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(s[r].is_ok()) << s[r].message();
        EXPECT_EQ(t.dev[r].download(recv[r], count * 4), want[r]);
        EXPECT_GT(t.mc[r].compensated_encodes, 0);
        EXPECT_EQ(t.mc[r].compensated_encodes, t.mc[r].encodes) << "every encode compensated";
        EXPECT_EQ(t.mc[r].synchronizations, 0) << "nothing awaited";
        EXPECT_TRUE(t.dev[r].host_waits.empty()) << "the residuals stayed on the device";
        EXPECT_GT(t.world->device_groups(r), groups_before[static_cast<size_t>(r)])
            << "this call's groups";
      }
    }
    EXPECT_EQ(images_of(eb.device), images_of(eb.host));
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(t.dev[r].host_waits.empty()) << "reading the residuals waited for the stream";
    }
  }
}

// AUTO picks on device buffers what it picks on host buffers, so one error
// buffer serves both kinds of call without a reset (its grid is the
// algorithm's): a device, a host and a device call on NCCL give the results
// and residuals of three host calls. Below 64 KiB per rank recursive
// doubling, above SRA.
TEST(NcclEnqueuedFeedback, AutoKeepsOneGridForHostAndDeviceCalls) {
  const int n = 3;
  for (const size_t count : {size_t{6000}, size_t{40000}}) {
    SCOPED_TRACE(std::to_string(count) + " values");
    NcclTwoGroups t(n);
    ASSERT_TRUE(under_policy(t, feedback_policy(QC_ALGO_AUTO, 0, QC_OP_SUM)));
    const PairedErrorBuffers eb(t, count, /*feedback=*/true);
    for (int call = 0; call < 3; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const bool on_device = call != 1;
      const auto in = qct::encode_all(qct::random_inputs(n, count, 80 + call), QC_DTYPE_FLOAT32);
      std::vector<Bytes> want(n, Bytes(count * 4)), got(n, Bytes(count * 4));
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n && on_device; ++r) {
        send[r] = t.dev[r].upload(in[r]);
        recv[r] = t.dev[r].alloc(count * 4);
      }
      std::vector<qc_status_t> sh(n), sn(n);
      qct::run_ranks(n, [&](int r) {
        sh[r] = qc_allreduce(t.host[r], in[r].data(), want[r].data(), count, QC_DTYPE_FLOAT32,
                             QC_OP_SUM, nullptr, eb.host[r], nullptr);
        sn[r] = on_device ? codec_allreduce(t.device[r], t.dev[r], t.mc[r], stream_of(r),
                                            send[r], recv[r], count, QC_OP_SUM, eb.device[r])
                                .code()
                          : qc_allreduce(t.device[r], in[r].data(), got[r].data(), count,
                                         QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, eb.device[r], nullptr);
      });
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_EQ(sh[r], QC_SUCCESS);
        ASSERT_EQ(sn[r], QC_SUCCESS);
        if (on_device) got[r] = t.dev[r].download(recv[r], count * 4);
        EXPECT_EQ(got[r], want[r]);
      }
    }
    EXPECT_EQ(images_of(eb.device), images_of(eb.host)) << "no reset between the calls";
  }
}

// A rank reserves device memory only for the payloads it sends or
// receives: no fold slot where no rank is folded, none for its own
// partition, no child's slot on a leaf of the tree.
TEST(EnqueuedLayout, NoSlotForWhatARankNeverTouches) {
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  std::unique_ptr<qc::Codec> codec;
  ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &codec));
  const size_t count = size_t{1} << 20;
  qc::WireHeader h;
  ASSERT_TRUE(codec->header_for(count, &h));
  const size_t whole = qc::device_payload_slot(h.payload_bytes);
  auto bytes = [&](qc_algorithm_t algorithm, int n, int r, int group_size) {
    size_t b = 0;
    EXPECT_TRUE(qc::allreduce_enqueued_payload_bytes(algorithm, *codec, count, n, r, group_size,
                                                     &b));
    return b;
  };
  EXPECT_EQ(bytes(QC_ALGO_TREE, 4, 1, 8), whole) << "a leaf sends up and receives the result";
  EXPECT_EQ(bytes(QC_ALGO_TREE, 5, 4, 8), whole) << "an even rank can be a leaf too";
  EXPECT_EQ(bytes(QC_ALGO_TREE, 4, 0, 8), 2 * whole) << "the root receives its children's too";
  // Groups of two, M = 4 core ranks: a fifth rank folds into rank 0 alone.
  const qc_algorithm_t rd = QC_ALGO_RECURSIVE_DOUBLING;
  EXPECT_EQ(bytes(rd, 5, 0, 2), bytes(rd, 4, 0, 2) + whole);
  EXPECT_EQ(bytes(rd, 5, 1, 2), bytes(rd, 4, 1, 2));
  EXPECT_EQ(bytes(rd, 5, 4, 2), bytes(QC_ALGO_RING, 4, 0, 2) + whole)
      << "a folded rank: the blocks it gets back and its tensor";
  // One group of four, no fold: the blocks, three partitions out and three in.
  EXPECT_LT(bytes(rd, 4, 0, 8), bytes(QC_ALGO_RING, 4, 0, 8) + 2 * whole);
}

// The memory an enqueued call used (the communicator's staging) is still in
// use when the call returns: the next call waits for it on the device (on
// its own stream too: two streams may share a handle), growing or freeing
// it waits on the host. A call staged whole through the host (scale reuse
// keeps host copies of messages) leaves the enqueued work's record alone.
TEST(NcclEnqueuedOrdering, TheNextUserOfTheMemoryWaitsForTheEnqueuedWork) {
  const int n = 2;
  std::vector<qcfake::FakeDevice> dev(n);  // outlive the communicators
  std::vector<qcfake::CpuMessageCodec> mc(n);
  auto nccl = std::make_unique<NcclGroup>(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl->group.ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.min_compress_bytes = 0;
  ASSERT_EQ(nccl->group.set_policy("*", p), QC_SUCCESS);
  p.scale_update_period = 4;
  ASSERT_EQ(nccl->group.set_policy("reuse", p), QC_SUCCESS);
  auto stream_a = [](int r) { return stream_of(r); };
  auto stream_b = [](int r) { return stream_of(100 + r); };
  std::vector<void*> small(n), large(n);
  for (int r = 0; r < n; ++r) {
    mc[r].device = &dev[r];
    small[r] = dev[r].upload(bytes_of(std::vector<float>(256, 1.0f + r)));
    large[r] = dev[r].upload(bytes_of(std::vector<float>(4096, 2.0f + r)));
  }
  auto call_all = [&](const std::function<void*(int)>& stream, const std::vector<void*>& buf,
                      size_t count, const char* layer) {
    std::vector<qc::Status> s(n);
    qct::run_ranks(n, [&](int r) {
      s[r] = qc::allreduce_placed(qct::internals_of(nccl->group[r]), &dev[r], &mc[r], stream(r), buf[r], buf[r],
                                  count, QC_DTYPE_FLOAT32, QC_OP_SUM, layer, nullptr);
    });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(s[r].is_ok()) << "rank " << r << ": " << s[r].message();
  };
  using Wait = std::pair<void*, void*>;
  call_all(stream_a, small, 256, nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(dev[r].stream_waits.empty()) << "nothing was pending";
    EXPECT_TRUE(dev[r].host_waits.empty());
  }
  call_all(stream_b, small, 256, nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(dev[r].stream_waits, std::vector<Wait>({{stream_b(r), stream_a(r)}}))
        << "stream B waits for A's work on the device";
    EXPECT_TRUE(dev[r].host_waits.empty()) << "not on the host";
  }
  call_all(stream_b, small, 256, nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(dev[r].stream_waits.size(), 2u);
    EXPECT_EQ(dev[r].stream_waits.back(), Wait(stream_b(r), stream_b(r))) << "B waits for B";
  }
  call_all(stream_b, large, 4096, nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(dev[r].host_waits, std::vector<void*>({stream_b(r)}))
        << "the staging grew: the old block is freed only after B's work";
  }
  const size_t stream_waits = dev[0].stream_waits.size();
  const int device_encodes = mc[0].encodes;
  call_all(stream_a, small, 256, "reuse");
  EXPECT_EQ(mc[0].encodes, device_encodes) << "the staged call's codec ran on the host";
  for (int r = 0; r < n; ++r) {
    EXPECT_GT(dev[r].copies_to_host, 0) << "staged whole";
    EXPECT_GT(nccl->world->groups(r), 0) << "host frames";
    EXPECT_EQ(nccl->world->device_groups(r), 4 * 2)
        << "four enqueued calls of recursive doubling in one group of two";
  }
  EXPECT_EQ(dev[0].stream_waits.size(), stream_waits) << "it uses none of the pending memory";
  // NCCL's own uncompressed allreduce on A uses none of qc's memory either,
  // but records the pending event anew: it must wait for B's work first, or
  // the event would no longer cover it (the next call, a growth or the
  // destroy would free or reuse the memory B's work may still use).
  qc_policy_t plain = QC_POLICY_INIT;
  plain.algorithm = QC_ALGO_NATIVE;
  ASSERT_EQ(nccl->group.set_policy("plain", plain), QC_SUCCESS);
  call_all(stream_a, small, 256, "plain");
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(nccl->world->enqueued(r), 1) << "NCCL's allreduce, enqueued";
    EXPECT_EQ(dev[r].stream_waits.back(), Wait(stream_a(r), stream_b(r))) << "A waits for B";
  }
  call_all(stream_b, small, 256, nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(dev[r].stream_waits.back(), Wait(stream_b(r), stream_a(r)))
        << "B waits for A, whose event covers B's earlier work";
  }
  const size_t host_waits = dev[0].host_waits.size();
  nccl.reset();
  for (int r = 0; r < n; ++r) EXPECT_EQ(dev[r].live_events, 0);
  EXPECT_EQ(dev[0].host_waits.size(), host_waits + 1) << "destroying waits for the last call";
}

// A rank whose own preparation fails (here: an error buffer of another
// count) says so in the agreement: it gets its own error (MISMATCH naming
// the buffer), the peers MISMATCH, and no rank enqueues a group its peers
// would wait for.
TEST(NcclEnqueuedAgreement, ALocalFailureFailsEveryRankBeforeAnyGroup) {
  const int n = 3;
  const size_t count = 400;
  std::vector<qcfake::FakeDevice> dev(n);  // outlive the communicators
  std::vector<qcfake::CpuMessageCodec> mc(n);
  NcclGroup nccl(n, qct::kTimeoutSeconds);
  ASSERT_TRUE(nccl.group.ok());
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.min_compress_bytes = 0;
  p.error_feedback = 1;
  ASSERT_EQ(nccl.group.set_policy("*", p), QC_SUCCESS);
  std::vector<qc_error_buffer_t> eb(n);
  std::vector<void*> buf(n);
  for (int r = 0; r < n; ++r) {
    mc[r].device = &dev[r];
    ASSERT_EQ(qc_error_buffer_create(nccl.group[r], r == 1 ? count + 1 : count, &eb[r]),
              QC_SUCCESS);
    buf[r] = dev[r].upload(bytes_of(std::vector<float>(count, 1.0f)));
  }
  std::vector<qc::Status> s(n);
  qct::run_ranks(n, [&](int r) {
    s[r] = codec_allreduce(nccl.group[r], dev[r], mc[r], stream_of(r), buf[r], buf[r], count,
                           QC_OP_SUM, eb[r]);
  });
  EXPECT_EQ(s[1].code(), QC_ERROR_MISMATCH) << s[1].message();
  EXPECT_NE(s[1].message().find("401 residuals"), std::string::npos) << s[1].message();
  for (int r : {0, 2}) EXPECT_EQ(s[r].code(), QC_ERROR_MISMATCH) << s[r].message();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(nccl.world->device_groups(r), 0) << "rank " << r;
    EXPECT_EQ(mc[r].encodes, 0) << "rank " << r;
    qc_error_buffer_destroy(eb[r]);
  }
}

// Enqueued work that never finishes (its peer failed before its part) must
// not hang the destroy: it waits the communicator's timeout, aborts the
// transport (which ends NCCL's waiting operations) and leaves the device
// memory the work may still touch allocated. For the compressed ring and
// for NCCL's own uncompressed allreduce alike.
TEST(NcclEnqueuedOrdering, WorkThatNeverFinishesDoesNotHangTheDestroy) {
  for (const qc_codec_t codec : {QC_CODEC_MINMAX, QC_CODEC_NONE}) {
    SCOPED_TRACE(qc::codec_name(codec));
    qcfake::FakeDevice dev;  // outlives the communicator
    qcfake::CpuMessageCodec mc;
    mc.device = &dev;
    auto nccl = std::make_unique<NcclGroup>(1, 0.2);
    ASSERT_TRUE(nccl->group.ok());
    const std::shared_ptr<qcfake::FakeNcclWorld> world = nccl->world;
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = codec;
    p.min_compress_bytes = 0;
    // One rank: AUTO would pick ring (and stage) for codec none.
    if (codec == QC_CODEC_NONE) p.algorithm = QC_ALGO_NATIVE;
    ASSERT_EQ(nccl->group.set_policy("*", p), QC_SUCCESS);
    void* buf = dev.upload(bytes_of(std::vector<float>(512, 1.5f)));
    const qc::Status s = codec_allreduce(nccl->group[0], dev, mc, stream_of(0), buf, buf, 512,
                                         QC_OP_SUM);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_EQ(dev.event_records, 1);
    EXPECT_EQ(world->enqueued(0), codec == QC_CODEC_NONE ? 1 : 0);
    dev.events_never_finish = true;
    const int live = dev.live_device;
    const auto t0 = std::chrono::steady_clock::now();
    nccl.reset();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 5.0) << "the destroy gave up after the timeout";
    EXPECT_GE(seconds, 0.2) << "after the timeout, not before";
    EXPECT_TRUE(world->aborted(0)) << "the transport was aborted";
    EXPECT_EQ(dev.live_device, live) << "the memory the work may touch stays allocated";
  }
}

// The agreement comes first: a rank whose buffers NCCL cannot take gets
// INVALID_ARGUMENT and its peers MISMATCH. A rank on host buffers runs the
// host algorithm, whose messages carry envelopes and which does not agree first:
// it and the device ranks wait in different collectives until the timeout
// (TIMEOUT everywhere, the group aborted). In neither case does a device
// rank encode or enqueue a group its peers would wait for on the device.
TEST(NcclEnqueuedAgreement, FailsEveryRankBeforeAnyGroup) {
  const int n = 3;
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  p.min_compress_bytes = 0;
  for (bool host_rank : {false, true}) {
    SCOPED_TRACE(host_rank ? "rank 1 on host buffers" : "rank 1 on another device");
    std::vector<qcfake::FakeDevice> dev(n);  // outlive the communicators
    std::vector<qcfake::CpuMessageCodec> mc(n);
    NcclGroup nccl(n, host_rank ? 0.5 : qct::kTimeoutSeconds);
    ASSERT_TRUE(nccl.group.ok());
    ASSERT_EQ(nccl.group.set_policy("*", p), QC_SUCCESS);
    std::vector<void*> buf(n);
    for (int r = 0; r < n; ++r) buf[r] = dev[r].upload(bytes_of(std::vector<float>(300, 1.0f)));
    std::vector<float> host_buf(300, 1.0f);
    if (!host_rank) nccl.world->set_foreign_buffer(buf[1]);
    std::vector<qc_status_t> s(n);
    std::vector<std::string> e(n);
    qct::run_ranks(n, [&](int r) {
      if (host_rank && r == 1) {
        s[r] = qc_allreduce(nccl.group[r], host_buf.data(), host_buf.data(), 300,
                            QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr, nullptr);
        e[r] = qc_last_error();
        return;
      }
      const qc::Status st =
          codec_allreduce(nccl.group[r], dev[r], mc[r], stream_of(r), buf[r], buf[r], 300,
                          QC_OP_SUM);
      s[r] = st.code();
      e[r] = st.message();
    });
    for (int r = 0; r < n; ++r) {
      const qc_status_t want = host_rank       ? QC_ERROR_TIMEOUT
                               : r == 1        ? QC_ERROR_INVALID_ARGUMENT
                                               : QC_ERROR_MISMATCH;
      EXPECT_EQ(s[r], want) << "rank " << r << ": " << e[r];
      EXPECT_EQ(nccl.world->device_groups(r), 0) << "rank " << r;
      EXPECT_EQ(mc[r].encodes, 0) << "rank " << r;
    }
  }
}


// The compressed alltoall of device buffers (paper 000 §3.3, DLRM's
// embedding exchange) on NCCL is stream-ordered too: every block encoded,
// one group, every block decoded on the caller's stream, the host
// alltoall's bytes, nothing staged or awaited.
TEST(NcclEnqueuedAlltoall, MatchesTheHostAlltoallWithNothingStagedOrAwaited) {
  for (const qc_codec_t codec : {QC_CODEC_MINMAX, QC_CODEC_QSGD, QC_CODEC_BF16}) {
    for (const int n : {1, 2, 4}) {
      // 16-bit data too (on float32 copies on the device), for one codec.
      const qc_dtype_t dtype = codec == QC_CODEC_QSGD ? QC_DTYPE_FLOAT16 : QC_DTYPE_FLOAT32;
      const size_t item = qct::dtype_size(dtype);
      SCOPED_TRACE(std::string(qc::codec_name(codec)) + ", " + std::to_string(n) + " ranks");
      const size_t cpr = 333;
      qc_policy_t p = QC_POLICY_INIT;
      p.codec = codec;
      p.rounding = QC_ROUND_STOCHASTIC;
      p.min_compress_bytes = 0;
      p.seed = 5;
      NcclTwoGroups t(n);
      ASSERT_TRUE(under_policy(t, p));
      const auto in = qct::encode_all(qct::random_inputs(n, cpr * n, 71, dtype), dtype);
      std::vector<Bytes> want(n, Bytes(cpr * n * item));
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = t.dev[r].upload(in[r]);
        recv[r] = t.dev[r].alloc(cpr * n * item);
      }
      std::vector<qc_status_t> sh(n);
      std::vector<qc::Status> sd(n);
      qct::run_ranks(n, [&](int r) {
        sh[r] = qc_alltoall(t.host[r], in[r].data(), want[r].data(), cpr, dtype, nullptr, nullptr);
        sd[r] = qc::alltoall_placed(qct::internals_of(t.device[r]), &t.dev[r], &t.mc[r], stream_of(r), send[r],
                                    recv[r], cpr, dtype, nullptr);
      });
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_EQ(sh[r], QC_SUCCESS);
        ASSERT_TRUE(sd[r].is_ok()) << sd[r].message();
        EXPECT_EQ(t.dev[r].download(recv[r], cpr * n * item), want[r]);
        EXPECT_EQ(t.dev[r].copies_to_host + t.dev[r].copies_to_device, 0) << "nothing staged";
        EXPECT_EQ(t.mc[r].synchronizations + t.mc[r].norms, 0) << "nothing awaited";
        EXPECT_EQ(t.mc[r].encodes, n);
        EXPECT_EQ(t.mc[r].decodes, n);
        EXPECT_EQ(t.world->device_groups(r), n > 1 ? 1 : 0) << "one group";
        EXPECT_EQ(t.world->groups(r), 0) << "no host frames";
        EXPECT_EQ(t.dev[r].event_records, 1);
        if (n > 1) {
          EXPECT_EQ(t.world->last_stream(r), stream_of(r));
        }
      }
      EXPECT_EQ(t.world->size_mismatch(), "");
    }
  }
}

}  // namespace
