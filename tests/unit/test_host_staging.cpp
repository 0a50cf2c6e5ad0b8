// Collectives on device buffers through host staging (src/core/host_staging.h),
// without a GPU: a fake DeviceMemory whose "device" blocks are host memory it
// hands out. What this checks is the staging logic: which buffers count as
// device memory, that the staged results are the host results bit for bit
// (and the emulation's), in place, the caller's stream on every copy, the
// reuse and release of the page-locked buffer, and that a failed copy on one
// rank fails its peers at once rather than at the timeout. The same paths on
// a real GPU are in tests/cuda/test_cuda_codecs.cpp (CudaStaging.*).
#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>

#include "core/communicator.h"
#include "core/error_buffer.h"
#include "core/codecs/device_message_codec.h"
#include "core/host_staging.h"
#include "comm_internals.h"
#include "fake_device.h"
#include "device_groups.h"
#include "fake_device_codec.h"
#include "test_util.h"

using namespace qct;
using Clock = std::chrono::steady_clock;

namespace {

using qcfake::CpuMessageCodec;
using qcfake::FakeDevice;

void* const kStream = reinterpret_cast<void*>(0x5eed);

// qc_allreduce's dispatch with the fake in place of the CUDA runtime.
qc::Status staged_allreduce(qc_comm_t comm, const FakeDevice& dev, const void* send, void* recv,
                            size_t count, qc_dtype_t dtype, qc_error_buffer_t eb = nullptr) {
  return qc::allreduce_placed(qct::internals_of(comm), &dev, nullptr, kStream, send, recv, count,
                              dtype, QC_OP_SUM, nullptr, qct::internals_of(eb));
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
    sa[r] = qc::run_on_placed_buffers(qct::internals_of(g[r]), &dev[r], kStream, send[r], bytes, recv[r], bytes,
                                      [&](const void* s, void* d) {
                                        return qc::comm_alltoall(qct::internals_of(g[r]), s, d, cpr,
                                                                 QC_DTYPE_FLOAT32, nullptr);
                                      });
    sg[r] = qc::run_on_placed_buffers(qct::internals_of(g[r]), &dev[r], kStream, send[r], 750 * 4, seg[r], 750 * 4,
                                      [&](const void* s, void* d) {
                                        return qc::comm_allreduce_segments(
                                            qct::internals_of(g[r]), s, d, 2, counts, layers,
                                            QC_DTYPE_FLOAT32,
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
// alltoall with the codec on the device: only compressed bytes staged
// (core/device_staging.h)
// ---------------------------------------------------------------------------

// A device call measures its input's norm on the device (the fake: the host
// loop's sum), so the layer's mean_sq_norm is the host path's; the error
// estimate is not measured on the device.
void expect_device_layer_norm(qc_comm_t host, qc_comm_t device) {
  qc_layer_stats_t lh{}, ld{};
  lh.struct_size = ld.struct_size = sizeof(qc_layer_stats_t);
  ASSERT_EQ(qc_comm_get_layer_stats(host, nullptr, &lh), QC_SUCCESS);
  ASSERT_EQ(qc_comm_get_layer_stats(device, nullptr, &ld), QC_SUCCESS);
  EXPECT_GT(lh.mean_sq_norm, 0.0);
  EXPECT_EQ(ld.mean_sq_norm, lh.mean_sq_norm);
  EXPECT_EQ(ld.last_rel_error, -1.0) << "not measured";
}

qc::Status device_alltoall(qc_comm_t comm, const FakeDevice& dev, const CpuMessageCodec* codec,
                           const void* send, void* recv, size_t count_per_rank,
                           qc_dtype_t dtype = QC_DTYPE_FLOAT32) {
  return qc::alltoall_placed(qct::internals_of(comm), &dev, codec, kStream, send, recv, count_per_rank, dtype,
                             nullptr);
}

struct CompressedCase {
  const char* name;
  qc_codec_t codec;
  int bits;
  int bucket;
  qc_rounding_t rounding;
  double max_ratio;  // staged bytes per rank at most this fraction of the uncompressed
};

class CompressedAlltoall : public ::testing::TestWithParam<CompressedCase> {};

// Two calls (the random bits depend on the call) of every rank on device
// memory: the host path's bytes exactly, the same wire bytes, every block
// encoded and decoded by the device codec on the caller's stream, and one
// copy each way of only the compressed payloads.
TEST_P(CompressedAlltoall, EqualsTheHostPathAndStagesOnlyCompressedBytes) {
  const CompressedCase& c = GetParam();
  const int n = 3;
  const size_t cpr = 1000;  // not a multiple of the buckets
  qc_policy_t p = policy_of(c.codec, c.bits, QC_ALGO_AUTO);
  p.bucket_size = c.bucket;
  p.rounding = c.rounding;
  p.seed = 42;
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  const size_t bytes = cpr * n * 4;
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const auto in = encode_all(random_inputs(n, cpr * n, 20 + call), QC_DTYPE_FLOAT32);
    const RunResult want = alltoall_on(host, in, cpr, QC_DTYPE_FLOAT32);
    ASSERT_TRUE(want.all_ok()) << want.describe();
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = dev[r].alloc(bytes);
      dev[r].bytes_to_host = dev[r].bytes_to_device = 0;
      dev[r].copies_to_host = dev[r].copies_to_device = 0;
      mc[r].encodes = mc[r].decodes = mc[r].synchronizations = mc[r].norms = 0;
      mc[r].streams.clear();
      dev[r].streams.clear();
    }
    std::vector<qc::Status> s(n);
    run_ranks(n, [&](int r) {
      s[r] = device_alltoall(device[r], dev[r], &mc[r], send[r], recv[r], cpr);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(s[r]) << s[r].message();
      EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]);
      EXPECT_EQ(mc[r].encodes, n);
      EXPECT_EQ(mc[r].decodes, n);
      EXPECT_EQ(mc[r].synchronizations, 1) << "the call returns with the result";
      EXPECT_EQ(mc[r].norms, 1);
      EXPECT_EQ(dev[r].copies_to_host, 1);
      EXPECT_EQ(dev[r].copies_to_device, 1);
      EXPECT_LE(static_cast<double>(dev[r].bytes_to_host), c.max_ratio * bytes)
          << "staged " << dev[r].bytes_to_host << " of " << bytes << " bytes";
      EXPECT_LE(static_cast<double>(dev[r].bytes_to_device), c.max_ratio * bytes);
      for (void* st : mc[r].streams) EXPECT_EQ(st, kStream);
      for (void* st : dev[r].streams) EXPECT_EQ(st, kStream);
    }
  }
  for (int r = 0; r < n; ++r) {
    qc_stats_t sh{}, sd{};
    sh.struct_size = sd.struct_size = sizeof(qc_stats_t);
    ASSERT_EQ(qc_comm_get_stats(host[r], &sh), QC_SUCCESS);
    ASSERT_EQ(qc_comm_get_stats(device[r], &sd), QC_SUCCESS);
    EXPECT_EQ(sd.calls, sh.calls);
    EXPECT_EQ(sd.wire_bytes, sh.wire_bytes) << "the same messages travel";
    expect_device_layer_norm(host[r], device[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CompressedAlltoall,
    ::testing::Values(CompressedCase{"Minmax4", QC_CODEC_MINMAX, 4, 128, QC_ROUND_NEAREST_EVEN, 0.16},
                      CompressedCase{"Minmax2Bucket37", QC_CODEC_MINMAX, 2, 37,
                                     QC_ROUND_STOCHASTIC, 0.16},
                      CompressedCase{"Qsgd4", QC_CODEC_QSGD, 4, 128, QC_ROUND_STOCHASTIC, 0.16},
                      CompressedCase{"Onebit", QC_CODEC_ONEBIT, 1, 128, QC_ROUND_NEAREST_EVEN,
                                     0.1},
                      CompressedCase{"Fp16", QC_CODEC_FP16, 4, 128, QC_ROUND_NEAREST_EVEN, 0.6},
                      CompressedCase{"Bf16", QC_CODEC_BF16, 4, 128, QC_ROUND_NEAREST_EVEN, 0.6}),
    [](const ::testing::TestParamInfo<CompressedCase>& info) { return info.param.name; });

// The messages are the host path's, so one rank on device memory and its
// peers on host memory meet in one call.
TEST(CompressedAlltoallMixed, DeviceAndHostRanksMeetInOneCall) {
  const int n = 3;
  const size_t cpr = 300;
  const qc_policy_t p = policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_AUTO);
  TwoGroups groups(n);
  auto& [dev, mc, host, mixed] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  const auto in = encode_all(random_inputs(n, cpr * n, 5), QC_DTYPE_FLOAT32);
  const RunResult want = alltoall_on(host, in, cpr, QC_DTYPE_FLOAT32);
  ASSERT_TRUE(want.all_ok()) << want.describe();
  void* send0 = dev[0].upload(in[0]);
  void* recv0 = dev[0].alloc(cpr * n * 4);
  std::vector<Bytes> out(n, Bytes(cpr * n * 4));
  std::vector<qc::Status> s(n);
  run_ranks(n, [&](int r) {
    s[r] = r == 0 ? device_alltoall(mixed[r], dev[r], &mc[r], send0, recv0, cpr)
                  : qc::alltoall_placed(qct::internals_of(mixed[r]), &dev[r], &mc[r], nullptr, in[r].data(),
                                        out[r].data(), cpr, QC_DTYPE_FLOAT32, nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(s[r]) << "rank " << r << ": " << s[r].message();
  EXPECT_EQ(mc[0].encodes, n) << "rank 0's blocks were encoded on its device";
  for (int r = 1; r < n; ++r) EXPECT_EQ(mc[r].encodes, 0) << "rank " << r << " is on the host";
  EXPECT_EQ(dev[0].download(recv0, cpr * n * 4), want.out[0]);
  for (int r = 1; r < n; ++r) EXPECT_EQ(out[r], want.out[r]) << "rank " << r;
}

// In place: every block is encoded before any is decoded into the buffer.
TEST(CompressedAlltoallInPlace, SameBufferGivesTheHostPathsBlocks) {
  const int n = 3;
  const size_t cpr = 500;
  const qc_policy_t p = policy_of(QC_CODEC_QSGD, 4, QC_ALGO_AUTO);
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  const auto in = encode_all(random_inputs(n, cpr * n, 6), QC_DTYPE_FLOAT32);
  const RunResult want = alltoall_on(host, in, cpr, QC_DTYPE_FLOAT32);
  ASSERT_TRUE(want.all_ok()) << want.describe();
  std::vector<void*> buf(n);
  for (int r = 0; r < n; ++r) buf[r] = dev[r].upload(in[r]);
  std::vector<qc::Status> s(n);
  run_ranks(n, [&](int r) { s[r] = device_alltoall(device[r], dev[r], &mc[r], buf[r], buf[r], cpr); });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(s[r]) << "rank " << r << ": " << s[r].message();
    EXPECT_EQ(mc[r].encodes, n);
    EXPECT_EQ(dev[r].download(buf[r], cpr * n * 4), want.out[r]) << "rank " << r;
  }
}

// What the device codec does not take is staged uncompressed, as before:
// codec none (16-bit data too), topk, a global codec, scale reuse.
TEST(CompressedAlltoallFallback, OtherCallsStageUncompressedAndMatchTheHostPath) {
  const int n = 3;
  const size_t cpr = 256;
  struct Case {
    const char* name;
    qc_codec_t codec;
    qc_dtype_t dtype;
    int period;
  };
  for (const Case& c : {Case{"none", QC_CODEC_NONE, QC_DTYPE_FLOAT32, 1},
                        Case{"topk", QC_CODEC_TOPK, QC_DTYPE_FLOAT32, 1},
                        Case{"global_linear", QC_CODEC_GLOBAL_LINEAR, QC_DTYPE_FLOAT32, 1},
                        Case{"none on fp16 data", QC_CODEC_NONE, QC_DTYPE_FLOAT16, 1},
                        Case{"minmax reusing scales", QC_CODEC_MINMAX, QC_DTYPE_FLOAT32, 2}}) {
    SCOPED_TRACE(c.name);
    qc_policy_t p = policy_of(c.codec, 4, QC_ALGO_AUTO);
    p.scale_update_period = c.period;
    TwoGroups groups(n);
    auto& [dev, mc, host, device] = groups;
    ASSERT_TRUE(under_policy(groups, p));
    const size_t bytes = cpr * n * qct::dtype_size(c.dtype);
    for (int call = 0; call < 2; ++call) {
      const auto in = encode_all(random_inputs(n, cpr * n, 30 + call, c.dtype), c.dtype);
      const RunResult want = alltoall_on(host, in, cpr, c.dtype);
      ASSERT_TRUE(want.all_ok()) << want.describe();
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = dev[r].upload(in[r]);
        recv[r] = dev[r].alloc(bytes);
      }
      std::vector<qc::Status> s(n);
      run_ranks(n, [&](int r) {
        s[r] = device_alltoall(device[r], dev[r], &mc[r], send[r], recv[r], cpr, c.dtype);
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(s[r]) << "rank " << r << ": " << s[r].message();
        EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]) << "rank " << r;
        EXPECT_EQ(mc[r].encodes, 0) << "rank " << r;
      }
    }
    EXPECT_EQ(dev[0].bytes_to_host, 2 * bytes) << "the whole input, twice";
  }
}

// 16-bit data: widened to float32 copies on the device, the blocks encoded
// and decoded there, narrowed into recvbuf; the host path's bytes with only
// compressed payloads staged.
TEST(CompressedAlltoallHalfData, EqualsTheHostPathOnFloat32CopiesOnTheDevice) {
  const int n = 3;
  const size_t cpr = 300;
  struct Case {
    const char* name;
    qc_codec_t codec;
    qc_dtype_t dtype;
    bool in_place;
  };
  for (const Case& c : {Case{"minmax fp16", QC_CODEC_MINMAX, QC_DTYPE_FLOAT16, false},
                        Case{"qsgd bf16 in place", QC_CODEC_QSGD, QC_DTYPE_BFLOAT16, true},
                        Case{"bf16 codec bf16", QC_CODEC_BF16, QC_DTYPE_BFLOAT16, false}}) {
    SCOPED_TRACE(c.name);
    qc_policy_t p = policy_of(c.codec, 4, QC_ALGO_AUTO);
    p.rounding = QC_ROUND_STOCHASTIC;
    TwoGroups groups(n);
    auto& [dev, mc, host, device] = groups;
    ASSERT_TRUE(under_policy(groups, p));
    const size_t bytes = cpr * n * 2;
    const auto in = encode_all(random_inputs(n, cpr * n, 44, c.dtype), c.dtype);
    const RunResult want = alltoall_on(host, in, cpr, c.dtype);
    ASSERT_TRUE(want.all_ok()) << want.describe();
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = c.in_place ? send[r] : dev[r].alloc(bytes);
    }
    std::vector<qc::Status> s(n);
    run_ranks(n, [&](int r) {
      s[r] = device_alltoall(device[r], dev[r], &mc[r], send[r], recv[r], cpr, c.dtype);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(s[r]) << s[r].message();
      EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]);
      EXPECT_EQ(mc[r].encodes, n);
      ASSERT_FALSE(mc[r].arithmetic_ops.empty());
      EXPECT_EQ(mc[r].arithmetic_ops.front(), "widen");
      EXPECT_EQ(mc[r].arithmetic_ops.back(), "narrow");
      if (c.codec != QC_CODEC_BF16) {
        EXPECT_LT(dev[r].bytes_to_host, bytes) << "only compressed payloads staged";
      }
    }
  }
}

// Runs `call` on every rank of a group whose rank `bad` fails on its device:
// that rank reports `what`, and every rank fails at once, not at the
// group's timeout (give it a long one: a hang would show as that long).
// One group of n ranks, each on its own fake device (declared first, so the
// devices outlive the group's staging) holding `values` random floats at
// send[r] and room for as many at recv[r]; a hang would show as ~60 s.
struct DeviceRanks {
  DeviceRanks(int n, const qc_policy_t& p, size_t values, uint64_t seed)
      : dev(n), mc(n), g(n, 60.0), send(n), recv(n) {
    ready = g.ok() && g.set_policy("*", p) == QC_SUCCESS;
    const auto in = encode_all(random_inputs(n, values, seed), QC_DTYPE_FLOAT32);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = dev[r].alloc(values * 4);
    }
  }
  std::vector<FakeDevice> dev;
  std::vector<CpuMessageCodec> mc;
  Group g;
  std::vector<void*> send, recv;
  bool ready = false;
};

void expect_device_failure_fails_the_peers_at_once(int n, int bad, const std::string& what,
                                                   const std::function<qc::Status(int)>& call) {
  std::vector<qc::Status> s(n);
  std::vector<double> seconds(n);
  run_ranks(n, [&](int r) {
    const auto t0 = Clock::now();
    s[r] = call(r);
    seconds[r] = seconds_since(t0);
  });
  EXPECT_EQ(s[bad].code(), QC_ERROR_INTERNAL) << s[bad].message();
  EXPECT_NE(s[bad].message().find(what), std::string::npos) << s[bad].message();
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(s[r]) << "rank " << r;
    EXPECT_LT(seconds[r], 10.0) << "rank " << r << " waited for the timeout";
  }
}

// A device failure on one rank (here its copy to the host) breaks the group
// at once: the peers fail in the exchange instead of waiting for it.
TEST(CompressedAlltoallFailure, ADeviceFailureFailsThePeersAtOnce) {
  const int n = 3;
  const size_t cpr = 200;
  DeviceRanks d(n, policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_AUTO), cpr * n, 8);
  ASSERT_TRUE(d.ready);
  auto& [dev, mc, g, send, recv, ready] = d;
  dev[1].fail_to_host = true;
  expect_device_failure_fails_the_peers_at_once(
      n, 1, "rank 1 could not encode its blocks on the device",
      [&](int r) { return device_alltoall(g[r], dev[r], &mc[r], send[r], recv[r], cpr); });
  EXPECT_EQ(dev[1].copies_to_device, 0);
}

// ---------------------------------------------------------------------------
// allreduce with the codec on the device: the algorithms run on the device
// values, only compressed payloads staged (core/device_staging.h)
// ---------------------------------------------------------------------------

qc::Status device_allreduce(qc_comm_t comm, const FakeDevice& dev, const CpuMessageCodec* codec,
                            const void* send, void* recv, size_t count,
                            qc_reduce_op_t op = QC_OP_SUM, qc_error_buffer_t eb = nullptr,
                            qc_dtype_t dtype = QC_DTYPE_FLOAT32) {
  return qc::allreduce_placed(qct::internals_of(comm), &dev, codec, kStream, send, recv, count,
                              dtype, op, nullptr, qct::internals_of(eb));
}

void reset_counts(FakeDevice& dev, CpuMessageCodec& mc) {
  dev.bytes_to_host = dev.bytes_to_device = dev.largest_copy = 0;
  dev.copies_to_host = dev.copies_to_device = 0;
  dev.streams.clear();
  mc.encodes = mc.compensated_encodes = mc.decodes = mc.accumulating_decodes = 0;
  mc.synchronizations = mc.norms = 0;
  mc.arithmetic_ops.clear();
  mc.streams.clear();
}

struct DeviceAllreduceCase {
  const char* name;
  qc_codec_t codec;
  int bits;
  int bucket;
  qc_rounding_t rounding;
  qc_algorithm_t algo;
  int ranks;
  size_t count;
  qc_reduce_op_t op;
  bool in_place;
};

class CompressedAllreduce : public ::testing::TestWithParam<DeviceAllreduceCase> {};

// Two calls of every rank on device memory: the host path's result bit for
// bit, the same wire bytes, every encode and decode by the device codec on
// the device values and the caller's stream, no copy larger than one whole
// compressed message (the uncompressed staging copies all count*4 bytes),
// and the input of an out-of-place call untouched.
TEST_P(CompressedAllreduce, EqualsTheHostPathAndStagesOnlyPayloads) {
  const DeviceAllreduceCase& c = GetParam();
  const int n = c.ranks;
  qc_policy_t p = policy_of(c.codec, c.bits, c.algo);
  p.bucket_size = c.bucket;
  p.rounding = c.rounding;
  p.group_size = 2;
  p.seed = 7;
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  std::unique_ptr<qc::Codec> codec;
  ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &codec));
  qc::WireHeader whole;
  ASSERT_TRUE(codec->header_for(c.count, &whole));
  const size_t bytes = c.count * 4;
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const auto in = encode_all(random_inputs(n, c.count, 50 + call), QC_DTYPE_FLOAT32);
    const RunResult want = allreduce_on(host, in, c.count, QC_DTYPE_FLOAT32, c.op);
    ASSERT_TRUE(want.all_ok()) << want.describe();
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = c.in_place ? send[r] : dev[r].alloc(bytes);
      reset_counts(dev[r], mc[r]);
    }
    std::vector<qc::Status> s(n);
    run_ranks(n, [&](int r) {
      s[r] = device_allreduce(device[r], dev[r], &mc[r], send[r], recv[r], c.count, c.op);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(s[r]) << s[r].message();
      EXPECT_EQ(dev[r].download(recv[r], bytes), want.out[r]);
      if (!c.in_place) {
        EXPECT_EQ(dev[r].download(send[r], bytes), in[r]) << "input changed";
      }
      EXPECT_GT(mc[r].encodes, 0);
      EXPECT_GT(mc[r].decodes + mc[r].accumulating_decodes, 0);
      EXPECT_EQ(mc[r].synchronizations, 1) << "the call returns with the result";
      EXPECT_EQ(mc[r].norms, 1) << "the input's norm, measured on the device";
      EXPECT_LE(dev[r].largest_copy, whole.payload_bytes);
      EXPECT_GT(dev[r].copies_to_host, 0);
      const auto& ops = mc[r].arithmetic_ops;
      EXPECT_EQ(std::count(ops.begin(), ops.end(), "copy"), c.in_place ? 0 : 1);
      EXPECT_EQ(std::count(ops.begin(), ops.end(), "scale"), c.op == QC_OP_AVG ? 1 : 0);
      for (void* st : mc[r].streams) EXPECT_EQ(st, kStream);
      for (void* st : dev[r].streams) EXPECT_EQ(st, kStream);
    }
  }
  for (int r = 0; r < n; ++r) {
    qc_stats_t sh{}, sd{};
    sh.struct_size = sd.struct_size = sizeof(qc_stats_t);
    ASSERT_EQ(qc_comm_get_stats(host[r], &sh), QC_SUCCESS);
    ASSERT_EQ(qc_comm_get_stats(device[r], &sd), QC_SUCCESS);
    EXPECT_EQ(sd.calls, sh.calls);
    EXPECT_EQ(sd.wire_bytes, sh.wire_bytes) << "rank " << r << ": the same messages travel";
    expect_device_layer_norm(host[r], device[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, CompressedAllreduce,
    ::testing::Values(
        DeviceAllreduceCase{"RingMinmax4", QC_CODEC_MINMAX, 4, 128, QC_ROUND_NEAREST_EVEN,
                            QC_ALGO_RING, 3, 1000, QC_OP_SUM, false},
        DeviceAllreduceCase{"RingQsgd4InPlaceAvg", QC_CODEC_QSGD, 4, 128, QC_ROUND_STOCHASTIC,
                            QC_ALGO_RING, 4, 999, QC_OP_AVG, true},
        DeviceAllreduceCase{"SraMinmax2Bucket37", QC_CODEC_MINMAX, 2, 37, QC_ROUND_STOCHASTIC,
                            QC_ALGO_SRA, 3, 1000, QC_OP_SUM, false},
        DeviceAllreduceCase{"SraOnebitAvg", QC_CODEC_ONEBIT, 1, 128, QC_ROUND_NEAREST_EVEN,
                            QC_ALGO_SRA, 5, 1234, QC_OP_AVG, false},
        DeviceAllreduceCase{"RecursiveDoublingFp16FiveRanks", QC_CODEC_FP16, 4, 128,
                            QC_ROUND_NEAREST_EVEN, QC_ALGO_RECURSIVE_DOUBLING, 5, 700, QC_OP_SUM,
                            false},
        DeviceAllreduceCase{"RecursiveDoublingMinmax8InPlace", QC_CODEC_MINMAX, 8, 64,
                            QC_ROUND_NEAREST_EVEN, QC_ALGO_RECURSIVE_DOUBLING, 6, 1000,
                            QC_OP_SUM, true},
        DeviceAllreduceCase{"TreeBf16", QC_CODEC_BF16, 4, 128, QC_ROUND_NEAREST_EVEN,
                            QC_ALGO_TREE, 3, 1000, QC_OP_AVG, false},
        DeviceAllreduceCase{"TreeMinmax3Stochastic", QC_CODEC_MINMAX, 3, 100, QC_ROUND_STOCHASTIC,
                            QC_ALGO_TREE, 5, 901, QC_OP_SUM, true},
        DeviceAllreduceCase{"AutoQsgd8", QC_CODEC_QSGD, 8, 128, QC_ROUND_NEAREST_EVEN,
                            QC_ALGO_AUTO, 3, 40000, QC_OP_SUM, false},
        DeviceAllreduceCase{"RingFewerValuesThanRanks", QC_CODEC_MINMAX, 4, 128,
                            QC_ROUND_NEAREST_EVEN, QC_ALGO_RING, 5, 3, QC_OP_SUM, false},
        DeviceAllreduceCase{"SraFewerValuesThanRanks", QC_CODEC_FP16, 4, 128,
                            QC_ROUND_NEAREST_EVEN, QC_ALGO_SRA, 5, 2, QC_OP_AVG, false}),
    [](const ::testing::TestParamInfo<DeviceAllreduceCase>& info) { return info.param.name; });

// One rank on device memory, its peers on host memory, in one call: the
// messages are the host path's, and so are every rank's results.
TEST(CompressedAllreduceMixed, DeviceAndHostRanksMeetInOneCall) {
  const int n = 3;
  const size_t count = 1000;
  const qc_policy_t p = policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_SRA);
  TwoGroups groups(n);
  auto& [dev, mc, host, mixed] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  const auto in = encode_all(random_inputs(n, count, 9), QC_DTYPE_FLOAT32);
  const RunResult want = allreduce_on(host, in, count, QC_DTYPE_FLOAT32, QC_OP_SUM);
  ASSERT_TRUE(want.all_ok()) << want.describe();
  void* send1 = dev[1].upload(in[1]);
  void* recv1 = dev[1].alloc(count * 4);
  std::vector<Bytes> out(n, Bytes(count * 4));
  std::vector<qc::Status> s(n);
  run_ranks(n, [&](int r) {
    s[r] = r == 1 ? device_allreduce(mixed[r], dev[r], &mc[r], send1, recv1, count)
                  : qc::allreduce_placed(qct::internals_of(mixed[r]), &dev[r], &mc[r], nullptr, in[r].data(),
                                         out[r].data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                         nullptr, nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(s[r]) << "rank " << r << ": " << s[r].message();
  EXPECT_GT(mc[1].encodes, 0) << "rank 1 encoded on its device";
  EXPECT_EQ(mc[0].encodes + mc[2].encodes, 0) << "ranks 0 and 2 are on the host";
  EXPECT_EQ(dev[1].download(recv1, count * 4), want.out[1]);
  EXPECT_EQ(out[0], want.out[0]);
  EXPECT_EQ(out[2], want.out[2]);
}

// One allreduce of `in` on both groups: the host group on host memory (its
// results returned), the device group on device copies `send` (results in
// `recv`). Fails the test unless both succeed on every rank.
std::vector<Bytes> allreduce_both(TwoGroups& g, const std::vector<Bytes>& in,
                                  const std::vector<void*>& send, const std::vector<void*>& recv,
                                  size_t count, qc_dtype_t dtype, qc_reduce_op_t op,
                                  const PairedErrorBuffers& eb) {
  const int n = g.host.size();
  std::vector<Bytes> want(n, Bytes(count * qct::dtype_size(dtype)));
  std::vector<qc_status_t> sh(n);
  std::vector<qc::Status> sd(n);
  run_ranks(n, [&](int r) {
    sh[r] = qc_allreduce(g.host[r], in[r].data(), want[r].data(), count, dtype, op, nullptr,
                         eb.host[r], nullptr);
    sd[r] = device_allreduce(g.device[r], g.dev[r], &g.mc[r], send[r], recv[r], count, op,
                             eb.device[r], dtype);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sh[r], QC_SUCCESS) << "rank " << r << ": host call";
    EXPECT_TRUE(sd[r]) << "rank " << r << ": " << sd[r].message();
  }
  return want;
}

// What the device path does not take is staged whole, as before, with the
// host path's results: scale reuse (with error feedback or without), the
// native algorithm of the global codecs, codec none (16-bit data too), topk.
TEST(CompressedAllreduceFallback, OtherCallsStageUncompressedAndMatchTheHostPath) {
  const int n = 3;
  const size_t count = 600;
  struct Case {
    const char* name;
    qc_codec_t codec;
    qc_algorithm_t algo;
    qc_dtype_t dtype;
    int period;
    bool feedback;
  };
  for (const Case& c :
       {Case{"error feedback with scale reuse", QC_CODEC_MINMAX, QC_ALGO_RING, QC_DTYPE_FLOAT32,
             2, true},
        Case{"scale reuse", QC_CODEC_MINMAX, QC_ALGO_SRA, QC_DTYPE_FLOAT32, 2, false},
        Case{"global_linear native", QC_CODEC_GLOBAL_LINEAR, QC_ALGO_NATIVE, QC_DTYPE_FLOAT32, 1,
             false},
        Case{"none", QC_CODEC_NONE, QC_ALGO_RING, QC_DTYPE_FLOAT32, 1, false},
        Case{"topk", QC_CODEC_TOPK, QC_ALGO_RING, QC_DTYPE_FLOAT32, 1, false},
        Case{"none on fp16 data", QC_CODEC_NONE, QC_ALGO_RING, QC_DTYPE_FLOAT16, 1, false}}) {
    SCOPED_TRACE(c.name);
    qc_policy_t p = policy_of(c.codec, 4, c.algo);
    p.scale_update_period = c.period;
    p.error_feedback = c.feedback ? 1 : 0;
    TwoGroups groups(n);
    auto& [dev, mc, host, device] = groups;
    ASSERT_TRUE(under_policy(groups, p));
    const PairedErrorBuffers eb(groups, count, c.feedback);
    const size_t bytes = count * qct::dtype_size(c.dtype);
    for (int call = 0; call < 2; ++call) {
      const auto in = encode_all(random_inputs(n, count, 60 + call, c.dtype), c.dtype);
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = dev[r].upload(in[r]);
        recv[r] = dev[r].alloc(bytes);
      }
      const std::vector<Bytes> want =
          allreduce_both(groups, in, send, recv, count, c.dtype, QC_OP_SUM, eb);
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(dev[r].download(recv[r], bytes), want[r]) << "rank " << r;
        EXPECT_EQ(mc[r].encodes, 0) << "rank " << r;
      }
    }
    EXPECT_EQ(dev[0].bytes_to_host, 2 * bytes) << "the whole input, twice";
  }
}

std::vector<Bytes> images_of(const std::vector<qc_error_buffer_t>& ebs);  // below

// 16-bit data (float16, bfloat16) runs the device path on a float32 copy in
// device memory, as the host path runs on comm->work: widened at the start,
// narrowed into recvbuf at the end with the CPU's conversions, so the
// results (and residuals) are the host path's bit for bit and only
// compressed payloads are staged.
TEST(CompressedAllreduceHalfData, EqualsTheHostPathOnAFloat32CopyOnTheDevice) {
  const int n = 3;
  const size_t count = 700;
  struct Case {
    const char* name;
    qc_codec_t codec;
    qc_algorithm_t algo;
    qc_dtype_t dtype;
    qc_reduce_op_t op;
    bool in_place;
    bool feedback;
  };
  for (const Case& c :
       {Case{"minmax ring fp16 in place", QC_CODEC_MINMAX, QC_ALGO_RING, QC_DTYPE_FLOAT16,
             QC_OP_SUM, true, false},
        Case{"qsgd sra bf16 avg", QC_CODEC_QSGD, QC_ALGO_SRA, QC_DTYPE_BFLOAT16, QC_OP_AVG, false,
             false},
        Case{"bf16 codec tree bf16", QC_CODEC_BF16, QC_ALGO_TREE, QC_DTYPE_BFLOAT16, QC_OP_SUM,
             false, false},
        Case{"minmax recursive doubling fp16 with feedback", QC_CODEC_MINMAX,
             QC_ALGO_RECURSIVE_DOUBLING, QC_DTYPE_FLOAT16, QC_OP_SUM, false, true}}) {
    SCOPED_TRACE(c.name);
    qc_policy_t p = policy_of(c.codec, 4, c.algo);
    p.error_feedback = c.feedback ? 1 : 0;
    TwoGroups groups(n);
    auto& [dev, mc, host, device] = groups;
    ASSERT_TRUE(under_policy(groups, p));
    const PairedErrorBuffers eb(groups, count, c.feedback);
    const size_t bytes = count * 2;
    for (int call = 0; call < 2; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const auto in = encode_all(random_inputs(n, count, 90 + call, c.dtype), c.dtype);
      std::vector<void*> send(n), recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = dev[r].upload(in[r]);
        recv[r] = c.in_place ? send[r] : dev[r].alloc(bytes);
        reset_counts(dev[r], mc[r]);
      }
      const std::vector<Bytes> want = allreduce_both(groups, in, send, recv, count, c.dtype, c.op, eb);
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_EQ(dev[r].download(recv[r], bytes), want[r]);
        EXPECT_GT(mc[r].encodes, 0) << "the codec ran on the device";
        ASSERT_FALSE(mc[r].arithmetic_ops.empty());
        // The first value op, after the residuals' set-up (copy or zero).
        const auto first = std::find_if(mc[r].arithmetic_ops.begin(), mc[r].arithmetic_ops.end(),
                                        [](const std::string& op) {
                                          return op != "copy" && op != "zero";
                                        });
        ASSERT_NE(first, mc[r].arithmetic_ops.end());
        EXPECT_EQ(*first, "widen");
        EXPECT_EQ(mc[r].arithmetic_ops.back(), "narrow");
        if (c.codec == QC_CODEC_MINMAX || c.codec == QC_CODEC_QSGD) {
          EXPECT_LT(dev[r].bytes_to_host, bytes) << "only compressed payloads staged";
        }
      }
    }
    if (c.feedback) {
      EXPECT_EQ(images_of(eb.device), images_of(eb.host));
    }
    for (int r = 0; r < n; ++r) {
      qc_layer_stats_t ls{};
      ls.struct_size = sizeof ls;
      ASSERT_EQ(qc_comm_get_layer_stats(device[r], nullptr, &ls), QC_SUCCESS);
      EXPECT_EQ(ls.logical_bytes, 2 * bytes) << "16-bit bytes, two calls";
    }
  }
}

// ---------------------------------------------------------------------------
// error feedback with the codec on the device: the residuals stay on the
// device between calls (core/device_residuals.h)
// ---------------------------------------------------------------------------

// Every rank's error buffer as a checkpoint image (which brings device
// residuals to the host first).
std::vector<Bytes> images_of(const std::vector<qc_error_buffer_t>& ebs) {
  std::vector<Bytes> out;
  for (qc_error_buffer_t eb : ebs) {
    size_t size = 0;
    EXPECT_EQ(qc_error_buffer_save(eb, nullptr, 0, &size), QC_SUCCESS);
    Bytes image(size);
    EXPECT_EQ(qc_error_buffer_save(eb, image.data(), size, &size), QC_SUCCESS) << qc_last_error();
    out.push_back(image);
  }
  return out;
}

// Error buffers for each rank of a group, destroyed with it.
struct ErrorBuffers {
  ErrorBuffers(Group& g, size_t count) : ebs(g.size(), nullptr) {
    for (int r = 0; r < g.size(); ++r) {
      EXPECT_EQ(qc_error_buffer_create(g[r], count, &ebs[r]), QC_SUCCESS);
    }
  }
  ~ErrorBuffers() {
    for (qc_error_buffer_t eb : ebs) qc_error_buffer_destroy(eb);
  }
  qc_error_buffer_t operator[](int r) const { return ebs[r]; }
  std::vector<qc_error_buffer_t> ebs;
};

// One allreduce with error feedback on host memory, every rank.
std::vector<Bytes> host_allreduce_with(Group& g, const ErrorBuffers& eb,
                                       const std::vector<Bytes>& in, size_t count,
                                       qc_reduce_op_t op) {
  const int n = g.size();
  std::vector<Bytes> out(n, Bytes(count * 4));
  std::vector<qc_status_t> s(n);
  run_ranks(n, [&](int r) {
    s[r] = qc_allreduce(g[r], in[r].data(), out[r].data(), count, QC_DTYPE_FLOAT32, op, nullptr,
                        eb[r], nullptr);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(s[r], QC_SUCCESS) << "rank " << r << ": host call";
  return out;
}

struct FeedbackCase {
  const char* name;
  qc_codec_t codec;
  int bits;
  qc_rounding_t rounding;
  qc_algorithm_t algo;
  int ranks;
  size_t count;
  qc_reduce_op_t op;
};

class CompressedAllreduceFeedback : public ::testing::TestWithParam<FeedbackCase> {};

// Three calls with error feedback on device memory: every encode
// error-compensated on the device, the host path's results bit for bit,
// the residuals uploaded once (the first call) and then kept on the device,
// so later calls copy no more than one message's payload; the buffers end
// with the host buffers' residuals.
TEST_P(CompressedAllreduceFeedback, EqualsTheHostPathWithResidualsOnTheDevice) {
  const FeedbackCase& c = GetParam();
  const int n = c.ranks;
  qc_policy_t p = policy_of(c.codec, c.bits, c.algo);
  p.rounding = c.rounding;
  p.error_feedback = 1;
  p.group_size = 2;
  p.seed = 3;
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  ErrorBuffers eb_host(host, c.count), eb_device(device, c.count);
  std::unique_ptr<qc::Codec> codec;
  ASSERT_TRUE(qc::make_codec(p, QC_DTYPE_FLOAT32, &codec));
  qc::WireHeader whole;
  ASSERT_TRUE(codec->header_for(c.count, &whole));
  const size_t bytes = c.count * 4;
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const auto in = encode_all(random_inputs(n, c.count, 80 + call), QC_DTYPE_FLOAT32);
    const std::vector<Bytes> want = host_allreduce_with(host, eb_host, in, c.count, c.op);
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = dev[r].alloc(bytes);
      reset_counts(dev[r], mc[r]);
    }
    std::vector<qc::Status> s(n);
    run_ranks(n, [&](int r) {
      s[r] = device_allreduce(device[r], dev[r], &mc[r], send[r], recv[r], c.count, c.op,
                              eb_device[r]);
    });
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(s[r]) << s[r].message();
      EXPECT_EQ(dev[r].download(recv[r], bytes), want[r]);
      EXPECT_GT(mc[r].compensated_encodes, 0);
      EXPECT_EQ(mc[r].compensated_encodes, mc[r].encodes) << "every encode compensated";
      if (call == 0) {
        EXPECT_EQ(dev[r].largest_copy, bytes) << "the residuals, uploaded once";
      } else {
        EXPECT_LE(dev[r].largest_copy, whole.payload_bytes) << "the residuals stayed";
      }
    }
  }
  EXPECT_EQ(images_of(eb_device.ebs), images_of(eb_host.ebs));
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, CompressedAllreduceFeedback,
    ::testing::Values(
        FeedbackCase{"RingMinmax4", QC_CODEC_MINMAX, 4, QC_ROUND_NEAREST_EVEN, QC_ALGO_RING, 3,
                     1000, QC_OP_SUM},
        FeedbackCase{"SraQsgd4StochasticAvg", QC_CODEC_QSGD, 4, QC_ROUND_STOCHASTIC, QC_ALGO_SRA,
                     4, 999, QC_OP_AVG},
        FeedbackCase{"RecursiveDoublingMinmax2FiveRanks", QC_CODEC_MINMAX, 2,
                     QC_ROUND_STOCHASTIC, QC_ALGO_RECURSIVE_DOUBLING, 5, 700, QC_OP_SUM},
        FeedbackCase{"TreeOnebit", QC_CODEC_ONEBIT, 1, QC_ROUND_NEAREST_EVEN, QC_ALGO_TREE, 3,
                     1234, QC_OP_SUM},
        FeedbackCase{"RingBf16", QC_CODEC_BF16, 4, QC_ROUND_NEAREST_EVEN, QC_ALGO_RING, 3, 900,
                     QC_OP_SUM},
        FeedbackCase{"SraFp16Avg", QC_CODEC_FP16, 4, QC_ROUND_NEAREST_EVEN, QC_ALGO_SRA, 4, 1001,
                     QC_OP_AVG}),
    [](const ::testing::TestParamInfo<FeedbackCase>& info) { return info.param.name; });

// One error buffer used by device calls, host calls, a reset, a loaded
// checkpoint and a change of grid, against the same sequence all on host
// memory: the host sees the device's residuals when it reads them, the
// device the host's after they changed, and the results and residuals are
// the host sequence's throughout. Destroying the buffers frees their device
// memory.
TEST(CompressedAllreduceFeedback, DeviceAndHostCallsShareOneBuffer) {
  const int n = 3;
  const size_t count = 800;
  qc_policy_t p = policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_RING);
  p.error_feedback = 1;
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  std::vector<int> live_before(n);
  {
    ErrorBuffers eb_host(host, count), eb_device(device, count);
    std::vector<Bytes> checkpoint;
    enum Step { kDevice, kHost, kReset, kSave, kLoad, kTwoBits };
    const Step steps[] = {kDevice, kDevice, kSave, kHost,    kDevice, kReset,
                          kDevice, kLoad,   kDevice, kTwoBits, kDevice, kHost};
    int call = 0;
    for (Step step : steps) {
      SCOPED_TRACE("step " + std::to_string(&step - steps));
      if (step == kReset) {
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(qc_error_buffer_reset(eb_host[r]), QC_SUCCESS);
          ASSERT_EQ(qc_error_buffer_reset(eb_device[r]), QC_SUCCESS);
        }
        continue;
      }
      if (step == kSave) {
        checkpoint = images_of(eb_device.ebs);
        EXPECT_EQ(checkpoint, images_of(eb_host.ebs));
        continue;
      }
      if (step == kLoad) {
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(qc_error_buffer_load(eb_host[r], checkpoint[r].data(), checkpoint[r].size()),
                    QC_SUCCESS);
          ASSERT_EQ(
              qc_error_buffer_load(eb_device[r], checkpoint[r].data(), checkpoint[r].size()),
              QC_SUCCESS);
        }
        continue;
      }
      if (step == kTwoBits) {
        p.bits = 2;  // another grid: both buffers restart from zero, with a warning
        ASSERT_TRUE(under_policy(groups, p));
        continue;
      }
      const auto in = encode_all(random_inputs(n, count, 90 + call++), QC_DTYPE_FLOAT32);
      const std::vector<Bytes> want = host_allreduce_with(host, eb_host, in, count, QC_OP_SUM);
      std::vector<Bytes> got(n, Bytes(count * 4));
      std::vector<qc::Status> s(n);
      run_ranks(n, [&](int r) {
        if (step == kDevice) {
          void* send = dev[r].upload(in[r]);
          void* recv = dev[r].alloc(count * 4);
          s[r] = device_allreduce(device[r], dev[r], &mc[r], send, recv, count, QC_OP_SUM,
                                  eb_device[r]);
          got[r] = dev[r].download(recv, count * 4);
        } else {
          s[r] = qc::allreduce_placed(qct::internals_of(device[r]), &dev[r], &mc[r], nullptr,
                                      in[r].data(), got[r].data(), count, QC_DTYPE_FLOAT32,
                                      QC_OP_SUM, nullptr, qct::internals_of(eb_device[r]));
        }
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(s[r]) << "rank " << r << ": " << s[r].message();
        EXPECT_EQ(got[r], want[r]) << "rank " << r;
      }
    }
    EXPECT_EQ(images_of(eb_device.ebs), images_of(eb_host.ebs));
    for (int r = 0; r < n; ++r) live_before[r] = dev[r].live_device;
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(dev[r].live_device, live_before[r] - 2) << "rank " << r << ": two residual blocks";
  }
}

// A device failure during a call with error feedback (here a decode on
// rank 2) leaves every rank's residuals as they were before the call: those
// of the first call, which the host group's buffers hold too (read only at
// the end, so the device's residuals are never brought to the host between
// the calls).
TEST(CompressedAllreduceFeedback, AFailedCallLeavesTheResidualsAsTheyWere) {
  const int n = 3;
  const size_t count = 600;
  qc_policy_t p = policy_of(QC_CODEC_QSGD, 4, QC_ALGO_SRA);
  p.error_feedback = 1;
  TwoGroups groups(n);
  auto& [dev, mc, host, device] = groups;
  ASSERT_TRUE(under_policy(groups, p));
  ErrorBuffers eb(device, count), eb_host(host, count);
  for (int call = 0; call < 2; ++call) {
    const auto in = encode_all(random_inputs(n, count, 70 + call), QC_DTYPE_FLOAT32);
    if (call == 0) host_allreduce_with(host, eb_host, in, count, QC_OP_SUM);
    mc[2].fail_decode = call == 1;
    std::vector<qc::Status> s(n);
    run_ranks(n, [&](int r) {
      void* send = dev[r].upload(in[r]);
      void* recv = dev[r].alloc(count * 4);
      s[r] = device_allreduce(device[r], dev[r], &mc[r], send, recv, count, QC_OP_SUM, eb[r]);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(bool(s[r]), call == 0) << "rank " << r;
  }
  EXPECT_EQ(images_of(eb.ebs), images_of(eb_host.ebs));
  double norm = 0;
  ASSERT_EQ(qc_error_buffer_norm(eb[0], &norm), QC_SUCCESS);
  EXPECT_GT(norm, 0.0) << "the first call's residuals";
}

// A device failure on one rank (here a decode) breaks the group at once:
// the peers fail instead of waiting for it until the timeout.
TEST(CompressedAllreduceFailure, ADeviceFailureFailsThePeersAtOnce) {
  const int n = 3;
  const size_t count = 900;
  DeviceRanks d(n, policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_RING), count, 11);
  ASSERT_TRUE(d.ready);
  auto& [dev, mc, g, send, recv, ready] = d;
  mc[2].fail_decode = true;
  expect_device_failure_fails_the_peers_at_once(
      n, 2, "rank 2 could not decode a message on the device",
      [&](int r) { return device_allreduce(g[r], dev[r], &mc[r], send[r], recv[r], count); });
  // The group is broken: the next call fails at once, on every rank.
  std::vector<qc::Status> s(n);
  run_ranks(n, [&](int r) {
    s[r] = device_allreduce(g[r], dev[r], &mc[r], send[r], recv[r], count);
  });
  for (int r = 0; r < n; ++r) EXPECT_FALSE(s[r]) << "rank " << r;
}

// The input's norm is measured on the device before anything else; a
// failure there breaks the group at once, like any device failure.
TEST(CompressedStagingFailure, ANormFailureFailsThePeersAtOnce) {
  const int n = 3;
  const size_t cpr = 300;
  for (int kind = 0; kind < 2; ++kind) {
    SCOPED_TRACE(kind == 0 ? "allreduce" : "alltoall");
    DeviceRanks d(n, policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_RING), cpr * n, 12);
    ASSERT_TRUE(d.ready);
    auto& [dev, mc, g, send, recv, ready] = d;
    mc[1].fail_norm = true;
    expect_device_failure_fails_the_peers_at_once(
        n, 1,
        kind == 0 ? "rank 1 could not prepare its device values: injected norm failure"
                  : "rank 1 could not measure its input on the device: injected norm failure",
        [&](int r) {
          return kind == 0 ? device_allreduce(g[r], dev[r], &mc[r], send[r], recv[r], cpr * n)
                           : device_alltoall(g[r], dev[r], &mc[r], send[r], recv[r], cpr);
        });
    EXPECT_EQ(mc[1].encodes, 0) << "nothing encoded after the failure";
  }
}

// QC_DEVICE_CODEC, read when the communicator is created: 0 stages whole
// buffers (the device codec never runs) with the same results, 1 (the
// default) runs the codec on the device.
TEST(DeviceCodecSwitch, ZeroStagesWholeBuffersWithTheSameResults) {
  const int n = 3;
  const size_t count = 900;
  const qc_policy_t p = policy_of(QC_CODEC_MINMAX, 4, QC_ALGO_RING);
  const char* saved = std::getenv("QC_DEVICE_CODEC");
  const std::string saved_value = saved != nullptr ? saved : "";
  for (const char* flag : {"0", "1"}) {
    SCOPED_TRACE(std::string("QC_DEVICE_CODEC=") + flag);
    ASSERT_EQ(::setenv("QC_DEVICE_CODEC", flag, 1), 0);
    TwoGroups groups(n);
    if (saved != nullptr) {
      ::setenv("QC_DEVICE_CODEC", saved_value.c_str(), 1);
    } else {
      ::unsetenv("QC_DEVICE_CODEC");
    }
    auto& [dev, mc, host, device] = groups;
    ASSERT_TRUE(under_policy(groups, p));
    const bool on = *flag == '1';
    const auto in = encode_all(random_inputs(n, count * n, 31), QC_DTYPE_FLOAT32);
    const RunResult want_sum = allreduce_on(host, in, count * n, QC_DTYPE_FLOAT32, QC_OP_SUM);
    const RunResult want_a2a = alltoall_on(host, in, count, QC_DTYPE_FLOAT32);
    ASSERT_TRUE(want_sum.all_ok()) << want_sum.describe();
    ASSERT_TRUE(want_a2a.all_ok()) << want_a2a.describe();
    const size_t bytes = count * n * 4;
    std::vector<void*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = dev[r].upload(in[r]);
      recv[r] = dev[r].alloc(bytes);
    }
    for (int kind = 0; kind < 2; ++kind) {
      SCOPED_TRACE(kind == 0 ? "allreduce" : "alltoall");
      for (int r = 0; r < n; ++r) reset_counts(dev[r], mc[r]);
      std::vector<qc::Status> s(n);
      run_ranks(n, [&](int r) {
        s[r] = kind == 0 ? device_allreduce(device[r], dev[r], &mc[r], send[r], recv[r], count * n)
                         : device_alltoall(device[r], dev[r], &mc[r], send[r], recv[r], count);
      });
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_TRUE(s[r]) << s[r].message();
        EXPECT_EQ(dev[r].download(recv[r], bytes), (kind == 0 ? want_sum : want_a2a).out[r]);
        if (on) {
          EXPECT_GT(mc[r].encodes, 0);
          EXPECT_LT(dev[r].bytes_to_host, bytes);
        } else {
          EXPECT_EQ(mc[r].encodes + mc[r].decodes + mc[r].accumulating_decodes, 0);
          EXPECT_EQ(dev[r].bytes_to_host, bytes) << "the whole input";
          EXPECT_EQ(dev[r].bytes_to_device, bytes) << "the whole output";
        }
      }
    }
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
