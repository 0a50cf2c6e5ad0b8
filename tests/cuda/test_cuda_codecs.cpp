// The CUDA codec kernels on a GPU against the CPU reference (the cases are
// in cuda_codec_cases.h). Without a CUDA device the program prints
// "no CUDA device" and exits 77, which CTest reports as skipped
// (tests/cuda/CMakeLists.txt); the same cases still run on the CPU through
// the warp emulator (test_cuda_emulated.cpp).
#include <cuda_runtime.h>

#include <cfloat>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "cuda/device_runtime.h"
#include "cuda_codec_cases.h"
#include "qc.h"

namespace {

// ---- the public API on device memory (needs the real CUDA runtime) ----------

std::vector<uint8_t> host_encode(const qc_policy_t& p, const void* x, size_t n, qc_dtype_t dtype) {
  size_t cap = 0, written = 0;
  EXPECT_EQ(qc_codec_encoded_size(&p, n, &cap), QC_SUCCESS);
  std::vector<uint8_t> msg(cap);
  EXPECT_EQ(qc_codec_encode(&p, x, n, dtype, msg.data(), cap, &written), QC_SUCCESS) << qc_last_error();
  msg.resize(written);
  return msg;
}

// qc_codec_encode / qc_codec_decode with device pointers give the host's bytes and values.
TEST(CudaApi, EncodeAndDecodeOnDeviceMemoryMatchTheHost) {
  const size_t n = 30011;
  const std::vector<float> x = make_data(n, Data::kSpecial, 5);
  std::vector<uint16_t> x16(n);
  for (size_t i = 0; i < n; ++i) x16[i] = qc::cpu::float_to_half(x[i]);
  struct Case {
    qc_codec_t codec;
    int bits;
    int bucket;
    qc_rounding_t rounding;
    qc_dtype_t dtype;
  } cases[] = {{QC_CODEC_MINMAX, 4, 128, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_MINMAX, 3, 100, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32},
               {QC_CODEC_MINMAX, 8, 64, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT16},
               {QC_CODEC_QSGD, 4, 128, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32},
               {QC_CODEC_ONEBIT, 1, 512, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_FP16, 4, 128, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_BF16, 4, 128, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_GLOBAL_LINEAR, 4, 128, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32},
               {QC_CODEC_GLOBAL_EXP, 3, 128, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_NONE, 4, 128, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_MXFP8, 8, 32, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_MXFP6_E3M2, 6, 32, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32},
               {QC_CODEC_MXFP4, 4, 32, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32},
               {QC_CODEC_MXINT8, 8, 32, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_NVFP4, 4, 16, QC_ROUND_NEAREST_EVEN, QC_DTYPE_FLOAT32},
               {QC_CODEC_NVFP4, 4, 16, QC_ROUND_STOCHASTIC, QC_DTYPE_FLOAT32}};
  for (const Case& c : cases) {
    SCOPED_TRACE("codec " + std::to_string(c.codec) + " bits " + std::to_string(c.bits) +
                 " dtype " + std::to_string(c.dtype));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.bits = c.bits;
    p.bucket_size = c.bucket;
    p.rounding = c.rounding;
    p.seed = 1234;
    const void* xh = c.dtype == QC_DTYPE_FLOAT32 ? static_cast<const void*>(x.data()) : x16.data();
    const size_t in_bytes = n * (c.dtype == QC_DTYPE_FLOAT32 ? 4 : 2);
    const std::vector<uint8_t> want = host_encode(p, xh, n, c.dtype);

    DeviceBytes x_dev(in_bytes), msg_dev(want.size() + 16);
    x_dev.upload(xh, in_bytes);
    size_t written = 0;
    ASSERT_EQ(qc_codec_encode(&p, x_dev.data(), n, c.dtype, msg_dev.data(), want.size() + 16, &written),
              QC_SUCCESS)
        << qc_last_error();
    ASSERT_EQ(written, want.size());
    std::vector<uint8_t> got = msg_dev.contents();
    got.resize(written);
    ASSERT_EQ(got, want);

    std::vector<float> back_host(n);
    ASSERT_EQ(qc_codec_decode(want.data(), want.size(), back_host.data(), n, QC_DTYPE_FLOAT32), QC_SUCCESS);
    DeviceBytes back_dev(4 * n);
    ASSERT_EQ(qc_codec_decode(msg_dev.data(), written, back_dev.data(), n, QC_DTYPE_FLOAT32), QC_SUCCESS)
        << qc_last_error();
    ASSERT_EQ(first_float_diff(as_floats(back_dev.contents()), back_host), -1);
  }
}

// A block-scaled message in device memory gets the CPU decoder's payload
// checks: nvfp4's message and block scales, the unused bits of the last
// code byte.
TEST(CudaApi, DamagedBlockScaledMessagesOnDeviceAreRefused) {
  const size_t n = 1001;  // 4-bit codes: the last byte's high half is unused
  const std::vector<float> x = make_data(n, Data::kPlain, 8);
  for (qc_codec_t codec : {QC_CODEC_NVFP4, QC_CODEC_MXFP4}) {
    SCOPED_TRACE(std::string("codec ") + std::to_string(codec));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = codec;
    const std::vector<uint8_t> good = host_encode(p, x.data(), n, QC_DTYPE_FLOAT32);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> bad;
    bad.push_back({"unused code bits", good});
    bad.back().second.back() |= 0x40;
    if (codec == QC_CODEC_NVFP4) {
      bad.push_back({"negative block scale", good});
      bad.back().second[32 + 4 + 7] |= 0x80;
      bad.push_back({"negative message scale", good});
      bad.back().second[32 + 3] |= 0x80;
    }
    DeviceBytes msg_dev(good.size()), out_dev(4 * n);
    msg_dev.upload(good.data(), good.size());
    EXPECT_EQ(qc_codec_decode(msg_dev.data(), good.size(), out_dev.data(), n, QC_DTYPE_FLOAT32),
              QC_SUCCESS)
        << qc_last_error();
    for (const auto& b : bad) {
      msg_dev.upload(b.second.data(), b.second.size());
      EXPECT_EQ(qc_codec_decode(msg_dev.data(), b.second.size(), out_dev.data(), n, QC_DTYPE_FLOAT32),
                QC_ERROR_CORRUPT_DATA)
          << b.first;
      std::vector<float> host_out(n);
      EXPECT_EQ(qc_codec_decode(b.second.data(), b.second.size(), host_out.data(), n,
                                QC_DTYPE_FLOAT32),
                QC_ERROR_CORRUPT_DATA)
          << b.first << " (host)";
    }
  }
}

// A failed CUDA call that qc reports as a status (here a record on no
// event: cudaErrorInvalidResourceHandle, not sticky) is not left as the
// thread's last error, where the next kernel launch check would report it
// as that kernel's failure.
TEST(CudaApi, AReportedCudaErrorIsNotReportedAgain) {
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const qc::Status failed = qc::cuda::record_event(nullptr, nullptr);
  EXPECT_FALSE(failed.is_ok());
  EXPECT_NE(failed.message().find("cudaEventRecord"), std::string::npos) << failed.message();
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  DeviceBytes x(4 * 256);
  const qc::Status launched =
      qc::cuda::scale_values(reinterpret_cast<float*>(x.data()), 2.0f, 256, nullptr);
  EXPECT_TRUE(launched.is_ok()) << launched.message();
  sync();
}

TEST(CudaApi, DeviceMemoryErrorsAreClear) {
  const size_t n = 1000;
  std::vector<float> host(n, 1.0f);
  DeviceBytes x_dev(4 * n), msg_dev(8192), out_dev(4 * n);
  x_dev.upload(host.data(), 4 * n);
  qc_policy_t p = QC_POLICY_INIT;
  p.codec = QC_CODEC_MINMAX;
  std::vector<uint8_t> msg_host(8192);
  size_t written = 0;
  // Host source, device destination: refused, naming both arguments.
  EXPECT_EQ(qc_codec_encode(&p, host.data(), n, QC_DTYPE_FLOAT32, msg_dev.data(), 8192, &written),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(qc_last_error(), "device memory"), nullptr) << qc_last_error();
  // A codec without a kernel.
  p.codec = QC_CODEC_TOPK;
  EXPECT_EQ(qc_codec_encode(&p, x_dev.data(), n, QC_DTYPE_FLOAT32, msg_dev.data(), 8192, &written),
            QC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::strstr(qc_last_error(), "topk"), nullptr) << qc_last_error();
  // Too small a destination.
  p.codec = QC_CODEC_MINMAX;
  EXPECT_EQ(qc_codec_encode(&p, x_dev.data(), n, QC_DTYPE_FLOAT32, msg_dev.data(), 100, &written),
            QC_ERROR_INVALID_ARGUMENT);
  // A message whose payload length disagrees with its fields.
  ASSERT_EQ(qc_codec_encode(&p, x_dev.data(), n, QC_DTYPE_FLOAT32, msg_dev.data(), 8192, &written),
            QC_SUCCESS);
  EXPECT_EQ(qc_codec_decode(msg_dev.data(), written - 1, out_dev.data(), n, QC_DTYPE_FLOAT32),
            QC_ERROR_CORRUPT_DATA);
  EXPECT_EQ(qc_codec_decode(msg_dev.data(), written, out_dev.data(), n + 1, QC_DTYPE_FLOAT32),
            QC_ERROR_MISMATCH);
  EXPECT_EQ(qc_codec_decode(msg_dev.data(), written, out_dev.data(), n, QC_DTYPE_FLOAT16),
            QC_ERROR_UNSUPPORTED);
  // Collectives take device buffers (host-staged), but not mixed with host ones.
  qc_comm_t comm = nullptr;
  ASSERT_EQ(qc_comm_create_local(1, &comm), QC_SUCCESS);
  EXPECT_EQ(qc_allreduce(comm, x_dev.data(), host.data(), n, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                         nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(qc_last_error(), "'recvbuf' is host memory"), nullptr) << qc_last_error();
  EXPECT_EQ(qc_alltoall(comm, host.data(), out_dev.data(), n, QC_DTYPE_FLOAT32, nullptr, nullptr),
            QC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(qc_last_error(), "'sendbuf' is host memory"), nullptr) << qc_last_error();
  EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
  // The emulation and error-buffer checkpoints stay on the host: refused, not a crash.
  const void* sends[2] = {host.data(), x_dev.data()};
  void* recvs[2] = {out_dev.data(), out_dev.data()};
  qc_policy_t none = QC_POLICY_INIT;
  EXPECT_EQ(qc_emulate_allreduce(2, sends, recvs, 4, QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, 0, &none,
                                 nullptr),
            QC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::strstr(qc_last_error(), "device memory"), nullptr) << qc_last_error();
  qc_error_buffer_t eb = nullptr;
  ASSERT_EQ(qc_error_buffer_create(nullptr, 16, &eb), QC_SUCCESS);
  size_t image = 0;
  EXPECT_EQ(qc_error_buffer_save(eb, msg_dev.data(), 8192, &image), QC_ERROR_UNSUPPORTED);
  EXPECT_EQ(qc_error_buffer_load(eb, msg_dev.data(), 64), QC_ERROR_UNSUPPORTED);
  EXPECT_EQ(qc_error_buffer_destroy(eb), QC_SUCCESS);
}

// fn(r) on one thread per rank, as the ranks of a local group must run.
std::vector<qc_status_t> on_each_rank(int n, const std::function<qc_status_t(int)>& fn) {
  std::vector<qc_status_t> status(n, QC_ERROR_INTERNAL);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = fn(r); });
  for (auto& t : threads) t.join();
  return status;
}

// Whichever path a device call takes (the codec on the device, or the whole
// buffer staged), its layer records the input's squared norm, which adaptive
// bit widths read; the device sums in its own order, so to rounding.
void expect_layer_norm(qc_comm_t comm, const std::vector<float>& x) {
  double want = 0;
  for (float v : x) want += double(v) * v;
  qc_layer_stats_t ls{};
  ls.struct_size = sizeof ls;
  ASSERT_EQ(qc_comm_get_layer_stats(comm, nullptr, &ls), QC_SUCCESS);
  EXPECT_NEAR(ls.mean_sq_norm, want, 1e-9 * want);
}

// A local group of n ranks under policy `p`; the test destroys it.
::testing::AssertionResult local_group(int n, const qc_policy_t& p,
                                       std::vector<qc_comm_t>* comms) {
  comms->assign(static_cast<size_t>(n), nullptr);
  if (qc_comm_create_local(n, comms->data()) != QC_SUCCESS) {
    return ::testing::AssertionFailure() << qc_last_error();
  }
  for (qc_comm_t comm : *comms) {
    if (qc_comm_set_layer_policy(comm, "*", &p) != QC_SUCCESS) {
      return ::testing::AssertionFailure() << qc_last_error();
    }
  }
  return ::testing::AssertionSuccess();
}

// Each rank's input copied to the device, and a device output of its size
// (none with `with_out` false: in place).
struct DeviceRanks {
  std::vector<std::unique_ptr<DeviceBytes>> in, out;
};

template <typename T>
DeviceRanks upload_each(const std::vector<std::vector<T>>& x, bool with_out) {
  DeviceRanks d;
  d.in.resize(x.size());
  d.out.resize(x.size());
  for (size_t r = 0; r < x.size(); ++r) {
    const size_t bytes = x[r].size() * sizeof(T);
    d.in[r] = std::make_unique<DeviceBytes>(bytes);
    d.in[r]->upload(x[r].data(), bytes);
    if (with_out) d.out[r] = std::make_unique<DeviceBytes>(bytes);
  }
  return d;
}

// Allreduce on device buffers, on the caller's stream, in place or not: the
// bucketed and cast codecs run the algorithms on the device values with the
// kernels (core/device_staging.h: only payloads staged); global_linear's
// native sum and codec none are staged whole (host_staging.h). Either way
// the results are the emulation's bit for bit.
TEST(CudaStaging, LocalGroupOnDeviceBuffersMatchesTheEmulation) {
  const int n = 3;
  const size_t count = 20011;
  struct Case {
    qc_codec_t codec;
    int bits;
    qc_algorithm_t algo;
    bool in_place;
    qc_rounding_t rounding;
    qc_reduce_op_t op;
  } cases[] = {
      {QC_CODEC_MINMAX, 4, QC_ALGO_RING, false, QC_ROUND_NEAREST_EVEN, QC_OP_SUM},
      {QC_CODEC_QSGD, 4, QC_ALGO_SRA, true, QC_ROUND_STOCHASTIC, QC_OP_SUM},
      {QC_CODEC_ONEBIT, 1, QC_ALGO_TREE, false, QC_ROUND_NEAREST_EVEN, QC_OP_AVG},
      {QC_CODEC_GLOBAL_LINEAR, 4, QC_ALGO_NATIVE, false, QC_ROUND_NEAREST_EVEN, QC_OP_SUM},
      {QC_CODEC_MINMAX, 2, QC_ALGO_RECURSIVE_DOUBLING, true, QC_ROUND_STOCHASTIC, QC_OP_SUM},
      {QC_CODEC_FP16, 4, QC_ALGO_SRA, false, QC_ROUND_NEAREST_EVEN, QC_OP_AVG},
      {QC_CODEC_BF16, 4, QC_ALGO_RING, true, QC_ROUND_NEAREST_EVEN, QC_OP_SUM},
      {QC_CODEC_NONE, 4, QC_ALGO_AUTO, false, QC_ROUND_NEAREST_EVEN, QC_OP_SUM}};
  std::vector<std::vector<float>> x(n);
  for (int r = 0; r < n; ++r) x[r] = make_data(count, Data::kPlain, 40 + r);
  std::vector<cudaStream_t> streams(n);
  for (auto& s : streams) ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (const Case& c : cases) {
    SCOPED_TRACE("codec " + std::to_string(c.codec) + " algorithm " + std::to_string(c.algo));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.bits = c.bits;
    p.algorithm = c.algo;
    p.rounding = c.rounding;
    p.min_compress_bytes = 0;
    p.seed = 5;
    std::vector<std::vector<float>> want(n, std::vector<float>(count));
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    for (int r = 0; r < n; ++r) {
      sp[r] = x[r].data();
      rp[r] = want[r].data();
    }
    ASSERT_EQ(qc_emulate_allreduce(n, sp.data(), rp.data(), count, QC_DTYPE_FLOAT32, c.op, nullptr,
                                   0, &p, nullptr),
              QC_SUCCESS)
        << qc_last_error();
    std::vector<qc_comm_t> comms;
    ASSERT_TRUE(local_group(n, p, &comms));
    const DeviceRanks d = upload_each(x, !c.in_place);
    const std::vector<qc_status_t> status = on_each_rank(n, [&](int r) {
      void* out = c.in_place ? d.in[r]->data() : d.out[r]->data();
      return qc_allreduce(comms[r], d.in[r]->data(), out, count, QC_DTYPE_FLOAT32, c.op,
                          nullptr, nullptr, streams[r]);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(status[r], QC_SUCCESS) << "rank " << r;
      const auto got = (c.in_place ? d.in[r] : d.out[r])->contents();
      EXPECT_EQ(first_float_diff(as_floats(got), want[r]), -1) << "rank " << r;
      expect_layer_norm(comms[r], x[r]);
    }
    for (auto comm : comms) EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
  }
  for (auto s : streams) cudaStreamDestroy(s);
}

// 16-bit data with the codec on the device: widened to a float32 copy on
// the GPU, reduced (or exchanged) there, narrowed into recvbuf; the
// emulation's bytes, for an allreduce and an alltoall.
TEST(CudaStaging, HalfDataOnDeviceBuffersMatchesTheEmulation) {
  const int n = 3;
  const size_t count = 20011;
  for (const qc_dtype_t dtype : {QC_DTYPE_FLOAT16, QC_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(dtype == QC_DTYPE_FLOAT16 ? "float16" : "bfloat16");
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = QC_CODEC_MINMAX;
    p.algorithm = QC_ALGO_SRA;
    p.rounding = QC_ROUND_STOCHASTIC;
    p.min_compress_bytes = 0;
    std::vector<std::vector<uint16_t>> x(n, std::vector<uint16_t>(count));
    std::vector<std::vector<uint16_t>> want(n, std::vector<uint16_t>(count));
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> f = make_data(count, Data::kPlain, 70 + r);
      qc::cpu::from_float32(f.data(), dtype, x[r].data(), count);
      sp[r] = x[r].data();
      rp[r] = want[r].data();
    }
    ASSERT_EQ(qc_emulate_allreduce(n, sp.data(), rp.data(), count, dtype, QC_OP_AVG, nullptr, 0, &p,
                                   nullptr),
              QC_SUCCESS)
        << qc_last_error();
    std::vector<qc_comm_t> comms;
    ASSERT_TRUE(local_group(n, p, &comms));
    const DeviceRanks d = upload_each(x, true);
    const std::vector<qc_status_t> status = on_each_rank(n, [&](int r) {
      return qc_allreduce(comms[r], d.in[r]->data(), d.out[r]->data(), count, dtype,
                          QC_OP_AVG, nullptr, nullptr, nullptr);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(status[r], QC_SUCCESS) << "rank " << r;
      const auto got = d.out[r]->contents();
      EXPECT_EQ(std::memcmp(got.data(), want[r].data(), 2 * count), 0) << "rank " << r;
    }
    // The alltoall of the same buffers (count / n values per block), on
    // new communicators: the emulation's is a group's first call, and
    // stochastic rounding draws from the call's sequence number.
    for (auto comm : comms) EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
    ASSERT_TRUE(local_group(n, p, &comms));
    const size_t cpr = count / n;
    ASSERT_EQ(qc_emulate_alltoall(n, sp.data(), rp.data(), cpr, dtype, nullptr, 0, &p), QC_SUCCESS)
        << qc_last_error();
    const std::vector<qc_status_t> all = on_each_rank(n, [&](int r) {
      return qc_alltoall(comms[r], d.in[r]->data(), d.out[r]->data(), cpr, dtype, nullptr,
                         nullptr);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(all[r], QC_SUCCESS) << "alltoall, rank " << r;
      const auto got = d.out[r]->contents();
      EXPECT_EQ(std::memcmp(got.data(), want[r].data(), 2 * cpr * n), 0) << "alltoall, rank " << r;
    }
    for (auto comm : comms) EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
  }
}

// Error feedback with the codec on the device: the residuals stay on the
// GPU between calls (core/device_residuals.h). Over three calls each result
// equals the emulation's with host error buffers, and at the end so do the
// residuals (saving brings the device's to the host). Round to nearest, so
// every emulated call draws the random bits a real call would. Call 1 is
// poisoned on rank 1 (a NaN, and +-FLT_MAX side by side, beyond every
// codec's range): the device kernels must drop the same residuals as the
// host's (residual hygiene, cpu/codec_kernels.h), so call 2 still matches.
TEST(CudaStaging, ErrorFeedbackOnDeviceBuffersMatchesTheEmulation) {
  const int n = 3;
  const size_t count = 20011;
  struct Case {
    qc_codec_t codec;
    int bits;
    qc_algorithm_t algo;
  };
  for (const Case& c : {Case{QC_CODEC_MINMAX, 4, QC_ALGO_RING}, Case{QC_CODEC_MINMAX, 2, QC_ALGO_SRA},
                        Case{QC_CODEC_ONEBIT, 1, QC_ALGO_TREE},
                        Case{QC_CODEC_BF16, 4, QC_ALGO_RECURSIVE_DOUBLING},
                        Case{QC_CODEC_QSGD, 4, QC_ALGO_SRA}, Case{QC_CODEC_FP16, 4, QC_ALGO_RING}}) {
    SCOPED_TRACE("codec " + std::to_string(c.codec) + " algorithm " + std::to_string(c.algo));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.bits = c.bits;
    p.algorithm = c.algo;
    p.error_feedback = 1;
    p.min_compress_bytes = 0;
    std::vector<qc_comm_t> comms;
    ASSERT_TRUE(local_group(n, p, &comms));
    std::vector<qc_error_buffer_t> emulated(n), on_device(n);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(qc_error_buffer_create(nullptr, count, &emulated[r]), QC_SUCCESS);
      ASSERT_EQ(qc_error_buffer_create(comms[r], count, &on_device[r]), QC_SUCCESS);
    }
    for (int call = 0; call < 3; ++call) {
      std::vector<std::vector<float>> x(n), want(n, std::vector<float>(count));
      std::vector<const void*> sp(n);
      std::vector<void*> rp(n);
      for (int r = 0; r < n; ++r) {
        x[r] = make_data(count, Data::kPlain, 100 * call + r);
        sp[r] = x[r].data();
        rp[r] = want[r].data();
      }
      if (call == 1) {
        x[1][7] = std::numeric_limits<float>::quiet_NaN();
        x[1][5000] = FLT_MAX;
        x[1][5001] = -FLT_MAX;
      }
      ASSERT_EQ(qc_emulate_allreduce(n, sp.data(), rp.data(), count, QC_DTYPE_FLOAT32, QC_OP_SUM,
                                     nullptr, 0, &p, emulated.data()),
                QC_SUCCESS)
          << qc_last_error();
      const DeviceRanks d = upload_each(x, true);
      const std::vector<qc_status_t> status = on_each_rank(n, [&](int r) {
        return qc_allreduce(comms[r], d.in[r]->data(), d.out[r]->data(), count,
                            QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, on_device[r], nullptr);
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(status[r], QC_SUCCESS) << "rank " << r;
        EXPECT_EQ(first_float_diff(as_floats(d.out[r]->contents()), want[r]), -1)
            << "call " << call << " rank " << r;
      }
    }
    for (int r = 0; r < n; ++r) {
      size_t a = 0, b = 0;
      ASSERT_EQ(qc_error_buffer_save(emulated[r], nullptr, 0, &a), QC_SUCCESS);
      ASSERT_EQ(qc_error_buffer_save(on_device[r], nullptr, 0, &b), QC_SUCCESS);
      std::vector<uint8_t> ia(a), ib(b);
      ASSERT_EQ(qc_error_buffer_save(emulated[r], ia.data(), a, &a), QC_SUCCESS);
      ASSERT_EQ(qc_error_buffer_save(on_device[r], ib.data(), b, &b), QC_SUCCESS);
      EXPECT_EQ(ia, ib) << "rank " << r << ": residuals";
      qc_error_buffer_destroy(emulated[r]);
      qc_error_buffer_destroy(on_device[r]);
    }
    for (auto comm : comms) EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
  }
}

// Alltoall with the codec on the device (core/device_staging.h: only the
// compressed payloads are staged) for each codec it takes, stochastic
// rounding included, against the emulation on the CPU.
TEST(CudaStaging, AlltoallOnDeviceBuffersMatchesTheEmulation) {
  const int n = 3;
  const size_t cpr = 5003;
  struct Case {
    qc_codec_t codec;
    int bits;
    int bucket;
    qc_rounding_t rounding;
  };
  for (const Case& c : {Case{QC_CODEC_MINMAX, 4, 128, QC_ROUND_NEAREST_EVEN},
                        Case{QC_CODEC_MINMAX, 2, 37, QC_ROUND_STOCHASTIC},
                        Case{QC_CODEC_QSGD, 4, 128, QC_ROUND_STOCHASTIC},
                        Case{QC_CODEC_ONEBIT, 1, 64, QC_ROUND_NEAREST_EVEN},
                        Case{QC_CODEC_FP16, 4, 128, QC_ROUND_NEAREST_EVEN},
                        Case{QC_CODEC_BF16, 4, 128, QC_ROUND_NEAREST_EVEN}}) {
    SCOPED_TRACE("codec " + std::to_string(c.codec) + " bits " + std::to_string(c.bits));
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = c.codec;
    p.bits = c.bits;
    p.bucket_size = c.bucket;
    p.rounding = c.rounding;
    p.seed = 7;
    p.min_compress_bytes = 0;
    std::vector<std::vector<float>> x(n), want(n, std::vector<float>(cpr * n));
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    for (int r = 0; r < n; ++r) {
      x[r] = make_data(cpr * n, Data::kPlain, 70 + r);
      sp[r] = x[r].data();
      rp[r] = want[r].data();
    }
    ASSERT_EQ(qc_emulate_alltoall(n, sp.data(), rp.data(), cpr, QC_DTYPE_FLOAT32, nullptr, 0, &p),
              QC_SUCCESS);
    std::vector<qc_comm_t> comms;
    ASSERT_TRUE(local_group(n, p, &comms));
    const DeviceRanks d = upload_each(x, true);
    const std::vector<qc_status_t> status = on_each_rank(n, [&](int r) {
      return qc_alltoall(comms[r], d.in[r]->data(), d.out[r]->data(), cpr, QC_DTYPE_FLOAT32,
                         nullptr, nullptr);
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(status[r], QC_SUCCESS) << "rank " << r << ": " << qc_last_error();
      EXPECT_EQ(first_float_diff(as_floats(d.out[r]->contents()), want[r]), -1)
          << "rank " << r;
      expect_layer_norm(comms[r], x[r]);
    }
    for (auto comm : comms) EXPECT_EQ(qc_comm_destroy(comm), QC_SUCCESS);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (qc::cuda::device_count() == 0) {
    std::printf("no CUDA device: the GPU tests are skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
