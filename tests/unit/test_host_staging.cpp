// Collectives on device buffers through host staging (src/core/host_staging.h),
// without a GPU: a fake DeviceMemory whose "device" blocks are host memory it
// hands out. What this checks is the staging logic: which buffers count as
// device memory, that the staged results are the host results bit for bit
// (and the emulation's), in place, the caller's stream on every copy, the
// reuse and release of the page-locked buffer, and that a failed copy on one
// rank fails its peers at once rather than at the timeout. The same paths on
// a real GPU are in tests/cuda/test_cuda_codecs.cpp (CudaStaging.*).
#include <atomic>
#include <deque>

#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/host_staging.h"
#include "fake_device.h"
#include "test_util.h"

using namespace qct;
using Clock = std::chrono::steady_clock;

namespace {

using qcfake::FakeDevice;

void* const kStream = reinterpret_cast<void*>(0x5eed);

// qc_allreduce's dispatch with the fake in place of the CUDA runtime.
qc::Status staged_allreduce(qc_comm_t comm, const FakeDevice& dev, const void* send, void* recv,
                            size_t count, qc_dtype_t dtype, qc_error_buffer_t eb = nullptr) {
  return qc::allreduce_placed(comm, &dev, kStream, send, recv, count, dtype, QC_OP_SUM, nullptr,
                              eb);
}

qc_policy_t policy_of(qc_codec_t codec, int bits, qc_algorithm_t algo) {
  qc_policy_t p = make_policy(algo);
  p.codec = codec;
  p.bits = bits;
  return p;
}

// ---------------------------------------------------------------------------
// where the buffers are
// ---------------------------------------------------------------------------
TEST(PlaceBuffers, BothOnOneSideOrAClearError) {
  FakeDevice dev;
  void* d1 = dev.alloc(64);
  void* d2 = dev.alloc(64);
  std::vector<float> h1(16), h2(16);
  qc::BufferPlace place = qc::BufferPlace::kHost;

  ASSERT_TRUE(qc::place_collective_buffers(&dev, nullptr, h1.data(), h2.data(), &place));
  EXPECT_EQ(place, qc::BufferPlace::kHost);
  ASSERT_TRUE(qc::place_collective_buffers(&dev, kStream, d1, d2, &place));
  EXPECT_EQ(place, qc::BufferPlace::kDevice);
  ASSERT_TRUE(qc::place_collective_buffers(&dev, nullptr, d1, d1, &place));
  EXPECT_EQ(place, qc::BufferPlace::kDevice);
  // An empty (NULL) buffer goes with the other one.
  ASSERT_TRUE(qc::place_collective_buffers(&dev, nullptr, nullptr, d2, &place));
  EXPECT_EQ(place, qc::BufferPlace::kDevice);
  ASSERT_TRUE(qc::place_collective_buffers(&dev, nullptr, h1.data(), nullptr, &place));
  EXPECT_EQ(place, qc::BufferPlace::kHost);

  qc::Status s = qc::place_collective_buffers(&dev, nullptr, d1, h2.data(), &place);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("'recvbuf' is host memory but 'sendbuf' is CUDA device memory"),
            std::string::npos) << s.message();
  s = qc::place_collective_buffers(&dev, nullptr, h1.data(), d2, &place);
  EXPECT_EQ(s.code(), QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("'sendbuf' is host memory but 'recvbuf'"), std::string::npos)
      << s.message();
  // A stream orders device work; with host buffers it is a mistake.
  s = qc::place_collective_buffers(&dev, kStream, h1.data(), h2.data(), &place);
  EXPECT_EQ(s.code(), QC_ERROR_UNSUPPORTED);
  EXPECT_NE(s.message().find("'stream'"), std::string::npos) << s.message();
  // A build without CUDA has no device memory at all.
  s = qc::place_collective_buffers(nullptr, kStream, h1.data(), h2.data(), &place);
  EXPECT_EQ(s.code(), QC_ERROR_UNSUPPORTED);
  EXPECT_NE(s.message().find("no CUDA support"), std::string::npos) << s.message();
  ASSERT_TRUE(qc::place_collective_buffers(nullptr, nullptr, h1.data(), h2.data(), &place));
  EXPECT_EQ(place, qc::BufferPlace::kHost);
}

// ---------------------------------------------------------------------------
// staged results are the host results
// ---------------------------------------------------------------------------
struct StagedCase {
  const char* name;
  qc_codec_t codec;
  int bits;
  qc_algorithm_t algo;
  qc_dtype_t dtype;
  bool in_place;
};

class StagedAllreduce : public ::testing::TestWithParam<StagedCase> {};

TEST_P(StagedAllreduce, BitIdenticalToTheEmulation) {
  const StagedCase c = GetParam();
  const int n = 3;
  const size_t count = 1000;
  const qc_policy_t p = policy_of(c.codec, c.bits, c.algo);
  const auto in = encode_all(random_inputs(n, count, 7, c.dtype), c.dtype);
  const EmuResult want = allreduce_emulate(n, in, count, c.dtype, QC_OP_SUM, p);
  ASSERT_EQ(want.status, QC_SUCCESS) << want.error;

  std::vector<FakeDevice> dev(n);  // outlives the group, whose staging it holds
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  const size_t bytes = count * dtype_size(c.dtype);
  std::vector<void*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = dev[r].upload(in[r]);
    recv[r] = c.in_place ? send[r] : dev[r].alloc(bytes);
  }
  std::vector<qc::Status> status(n);
  run_ranks(n, [&](int r) {
    status[r] = staged_allreduce(g[r], dev[r], send[r], recv[r], count, c.dtype);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r]) << "rank " << r << ": " << status[r].message();
    EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]) << "rank " << r;
    // One copy in, one copy out, both on the caller's stream.
    EXPECT_EQ(dev[r].copies_to_host, 1);
    EXPECT_EQ(dev[r].copies_to_device, 1);
    for (void* s : dev[r].streams) EXPECT_EQ(s, kStream);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, StagedAllreduce,
    ::testing::Values(
        StagedCase{"minmax4_ring", QC_CODEC_MINMAX, 4, QC_ALGO_RING, QC_DTYPE_FLOAT32, false},
        StagedCase{"minmax4_ring_in_place", QC_CODEC_MINMAX, 4, QC_ALGO_RING, QC_DTYPE_FLOAT32,
                   true},
        StagedCase{"qsgd4_sra_fp16", QC_CODEC_QSGD, 4, QC_ALGO_SRA, QC_DTYPE_FLOAT16, false},
        StagedCase{"onebit_tree_bf16", QC_CODEC_ONEBIT, 1, QC_ALGO_TREE, QC_DTYPE_BFLOAT16, true},
        StagedCase{"global_linear_native", QC_CODEC_GLOBAL_LINEAR, 4, QC_ALGO_NATIVE,
                   QC_DTYPE_FLOAT32, false},
        StagedCase{"minmax2_recursive_doubling", QC_CODEC_MINMAX, 2,
                   QC_ALGO_RECURSIVE_DOUBLING, QC_DTYPE_FLOAT32, false},
        StagedCase{"none_auto", QC_CODEC_NONE, 4, QC_ALGO_AUTO, QC_DTYPE_FLOAT32, false}),
    [](const ::testing::TestParamInfo<StagedCase>& i) { return std::string(i.param.name); });

TEST(Staged, ErrorFeedbackOverStepsMatchesTheHostPath) {
  const int n = 3;
  const size_t count = 777;
  const qc_policy_t p = [] {
    qc_policy_t q = policy_of(QC_CODEC_MINMAX, 2, QC_ALGO_SRA);
    q.error_feedback = 1;
    return q;
  }();
  std::vector<FakeDevice> dev(n);  // outlives the groups, whose staging it holds
  Group host(n), staged(n);
  ASSERT_TRUE(host.ok() && staged.ok());
  ASSERT_EQ(host.set_policy("*", p), QC_SUCCESS);
  ASSERT_EQ(staged.set_policy("*", p), QC_SUCCESS);
  std::vector<qc_error_buffer_t> eb_host(n), eb_staged(n);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(qc_error_buffer_create(host[r], count, &eb_host[r]), QC_SUCCESS);
    ASSERT_EQ(qc_error_buffer_create(staged[r], count, &eb_staged[r]), QC_SUCCESS);
  }
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto in = encode_all(random_inputs(n, count, 100 + step), QC_DTYPE_FLOAT32);
    std::vector<Bytes> out_host(n, Bytes(count * 4));
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = dev[r].alloc(count * 4);
    }
    std::vector<qc_status_t> sh(n);
    std::vector<qc::Status> ss(n);
    run_ranks(n, [&](int r) {
      sh[r] = qc_allreduce(host[r], in[r].data(), out_host[r].data(), count, QC_DTYPE_FLOAT32,
                           QC_OP_SUM, nullptr, eb_host[r], nullptr);
      ss[r] = staged_allreduce(staged[r], dev[r], send[r], recv[r], count, QC_DTYPE_FLOAT32,
                               eb_staged[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(sh[r], QC_SUCCESS);
      ASSERT_TRUE(ss[r]) << ss[r].message();
      EXPECT_EQ(dev[r].download(recv[r], count * 4), out_host[r]) << "rank " << r;
      double a = 0, b = 0;
      ASSERT_EQ(qc_error_buffer_norm(eb_host[r], &a), QC_SUCCESS);
      ASSERT_EQ(qc_error_buffer_norm(eb_staged[r], &b), QC_SUCCESS);
      EXPECT_EQ(a, b) << "the residuals follow the same path";
      EXPECT_GT(b, 0.0);
    }
  }
  for (int r = 0; r < n; ++r) {
    qc_error_buffer_destroy(eb_host[r]);
    qc_error_buffer_destroy(eb_staged[r]);
  }
}

TEST(Staged, AlltoallAndSegmentsMatchTheHostPath) {
  const int n = 3;
  const size_t cpr = 250;
  const qc_policy_t p = policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_AUTO);
  std::vector<FakeDevice> dev(n);  // outlives the group, whose staging it holds
  Group g(n);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", p), QC_SUCCESS);
  const auto in = encode_all(random_inputs(n, cpr * n, 3), QC_DTYPE_FLOAT32);
  const RunResult want = alltoall_on(g, in, cpr, QC_DTYPE_FLOAT32);
  ASSERT_TRUE(want.all_ok()) << want.describe();

  // Two segments with different policies (one exact), fused in one call.
  const size_t counts[2] = {300, 450};
  const char* layers[2] = {"exact", "*"};
  ASSERT_EQ(g.set_policy("exact", make_policy()), QC_SUCCESS);
  std::vector<Bytes> seg_host(n, Bytes(750 * 4));
  std::vector<qc_status_t> sh(n);
  run_ranks(n, [&](int r) {
    sh[r] = qc_allreduce_segments(g[r], in[r].data(), seg_host[r].data(), 2, counts, layers,
                                  QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr);
  });

  const size_t bytes = cpr * n * 4;
  std::vector<void*> send(n), recv(n), seg(n);
  for (int r = 0; r < n; ++r) {
    send[r] = dev[r].upload(in[r]);
    recv[r] = dev[r].alloc(bytes);
    seg[r] = dev[r].alloc(750 * 4);
  }
  std::vector<qc::Status> sa(n), sg(n);
  run_ranks(n, [&](int r) {
    sa[r] = qc::run_on_placed_buffers(g[r], &dev[r], kStream, send[r], bytes, recv[r], bytes,
                                      [&](const void* s, void* d) {
                                        return qc::comm_alltoall(g[r], s, d, cpr,
                                                                 QC_DTYPE_FLOAT32, nullptr);
                                      });
    sg[r] = qc::run_on_placed_buffers(g[r], &dev[r], kStream, send[r], 750 * 4, seg[r], 750 * 4,
                                      [&](const void* s, void* d) {
                                        return qc::comm_allreduce_segments(
                                            g[r], s, d, 2, counts, layers, QC_DTYPE_FLOAT32,
                                            QC_OP_SUM, nullptr);
                                      });
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(sh[r], QC_SUCCESS);
    ASSERT_TRUE(sa[r]) << sa[r].message();
    ASSERT_TRUE(sg[r]) << sg[r].message();
    EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]) << "alltoall, rank " << r;
    EXPECT_EQ(dev[r].download(seg[r], 750 * 4), seg_host[r]) << "segments, rank " << r;
  }
}

// ---------------------------------------------------------------------------
// the page-locked buffer
// ---------------------------------------------------------------------------
TEST(Staged, HostBufferIsReusedGrownAndFreedWithTheCommunicator) {
  FakeDevice dev;
  {
    Group g(1);
    ASSERT_TRUE(g.ok());
    void* a = dev.alloc(4000);
    void* b = dev.alloc(4000);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(staged_allreduce(g[0], dev, a, b, 1000, QC_DTYPE_FLOAT32));
    EXPECT_EQ(dev.host_allocations, 1) << "the same size reuses the buffer";
    ASSERT_TRUE(staged_allreduce(g[0], dev, a, a, 1000, QC_DTYPE_FLOAT32));
    ASSERT_TRUE(staged_allreduce(g[0], dev, a, b, 10, QC_DTYPE_FLOAT32));
    EXPECT_EQ(dev.host_allocations, 1) << "smaller calls fit in it";
    void* c = dev.alloc(40000);
    void* d = dev.alloc(40000);
    ASSERT_TRUE(staged_allreduce(g[0], dev, c, d, 10000, QC_DTYPE_FLOAT32));
    EXPECT_EQ(dev.host_allocations, 2) << "a larger call grows it";
    EXPECT_EQ(dev.live_host.load(), 1) << "the old one is freed when it grows";
    // Count 0 copies nothing and allocates nothing, device pointers or not.
    const int copies = dev.copies_to_host + dev.copies_to_device;
    ASSERT_TRUE(staged_allreduce(g[0], dev, a, b, 0, QC_DTYPE_FLOAT32));
    EXPECT_EQ(dev.copies_to_host + dev.copies_to_device, copies);
    EXPECT_EQ(dev.host_allocations, 2);
    // A one-rank sum is the input itself.
    const Bytes in = dev.download(c, 40000);
    EXPECT_EQ(dev.download(d, 40000), in);
  }
  EXPECT_EQ(dev.live_host.load(), 0) << "destroying the communicator frees it";
}

// ---------------------------------------------------------------------------
// failed copies: the group breaks at once, not at the timeout
// ---------------------------------------------------------------------------
TEST(StagedFailure, InputCopyFailureFailsThePeersAtOnce) {
  const int n = 3;
  const double timeout = 60.0;  // a hang would show as ~60 s
  std::vector<FakeDevice> dev(n);  // outlives the group, whose staging it holds
  Group g(n, timeout);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_RING)), QC_SUCCESS);
  dev[1].fail_to_host = true;
  const auto in = encode_all(random_inputs(n, 500, 1), QC_DTYPE_FLOAT32);
  std::vector<void*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = dev[r].upload(in[r]);
    recv[r] = dev[r].alloc(2000);
  }
  std::vector<qc::Status> status(n);
  std::vector<double> seconds(n);
  run_ranks(n, [&](int r) {
    const auto t0 = Clock::now();
    status[r] = staged_allreduce(g[r], dev[r], send[r], recv[r], 500, QC_DTYPE_FLOAT32);
    seconds[r] = seconds_since(t0);
  });
  EXPECT_EQ(status[1].code(), QC_ERROR_INTERNAL);
  EXPECT_NE(status[1].message().find("rank 1 could not copy its device input"), std::string::npos)
      << status[1].message();
  EXPECT_NE(status[1].message().find("fake to_host failed"), std::string::npos);
  EXPECT_EQ(dev[1].copies_to_device, 0) << "nothing is written back after a failed input";
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(status[r]) << "rank " << r;
    EXPECT_LT(seconds[r], 10.0) << "rank " << r << " waited for the timeout";
    qc_status_t e = QC_SUCCESS;
    ASSERT_EQ(qc_comm_get_async_error(g[r], &e), QC_SUCCESS);
    EXPECT_EQ(e, QC_ERROR_INTERNAL) << "rank " << r;
  }
  EXPECT_NE(status[0].message().find("rank 1 could not copy"), std::string::npos)
      << status[0].message();
}

TEST(StagedFailure, OutputCopyFailureIsVisibleToPeersThatSucceeded) {
  const int n = 3;
  std::vector<FakeDevice> dev(n);  // outlives the group, whose staging it holds
  Group g(n, 60.0);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g.set_policy("*", policy_of(QC_CODEC_QSGD, 4, QC_ALGO_SRA)), QC_SUCCESS);
  dev[2].fail_to_device = true;
  const auto in = encode_all(random_inputs(n, 300, 2), QC_DTYPE_FLOAT32);
  std::vector<void*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = dev[r].upload(in[r]);
    recv[r] = dev[r].alloc(1200);
  }
  std::vector<qc::Status> status(n);
  run_ranks(n, [&](int r) {
    status[r] = staged_allreduce(g[r], dev[r], send[r], recv[r], 300, QC_DTYPE_FLOAT32);
  });
  EXPECT_EQ(status[2].code(), QC_ERROR_INTERNAL);
  EXPECT_NE(status[2].message().find("rank 2 could not copy the result to its device output"),
            std::string::npos) << status[2].message();
  // Rank 2 fails after its own part of the collective is done. A peer whose
  // call returned by then keeps its result and learns of the broken group
  // without another call; a peer still in its last wait (its final send not
  // yet taken) fails with rank 2's status, as every broken-group wait does.
  for (int r = 0; r < 2; ++r) {
    if (!status[r]) {
      EXPECT_EQ(status[r].code(), QC_ERROR_INTERNAL) << "rank " << r;
      EXPECT_NE(status[r].message().find("rank 2 could not copy"), std::string::npos)
          << status[r].message();
    }
    qc_status_t e = QC_SUCCESS;
    ASSERT_EQ(qc_comm_get_async_error(g[r], &e), QC_SUCCESS);
    EXPECT_EQ(e, QC_ERROR_INTERNAL) << "rank " << r;
    EXPECT_NE(std::string(qc_last_error()).find("rank 2 could not copy"), std::string::npos)
        << qc_last_error();
  }
  // And the next call fails at once on every rank, without copying.
  const int before = dev[0].copies_to_host;
  run_ranks(n, [&](int r) {
    status[r] = staged_allreduce(g[r], dev[r], send[r], recv[r], 300, QC_DTYPE_FLOAT32);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(status[r].code(), QC_ERROR_INTERNAL) << "rank " << r;
  EXPECT_EQ(dev[0].copies_to_host, before) << "a broken group copies nothing";
}

}  // namespace
