// NCCL transport smoke test (issue 8): a one-rank NCCL communicator made by
// the test, handed to qc_comm_create, allreduces on host and device memory;
// and (issue 32) one qc makes itself from a unique id.
// One GPU allows only one rank (NCCL refuses two ranks on one device), so
// no message moves here: this checks the real backend's set-up (dlopen,
// ncclCommSplit, stream) and tear-down, and its ncclAllReduce of each
// reduction qc uses (a one-rank sum or minimum is the input); the framing,
// grouping and multi-rank sums are tested over a fake NCCL in
// tests/unit/test_nccl_transport.cpp. Exits 77
// (skipped) without a CUDA device or without libnccl.so.2.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda/nccl_backend.h"
#include "qc.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s (qc_last_error: %s)\n", what, qc_last_error());
    ++failures;
  } else {
    std::printf("ok: %s\n", what);
  }
}

// Polls a started group or allreduce to its end (60 s at most).
qc::Status poll_until_done(qc::NcclBackend& backend, qc::Status s, bool* done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  *done = false;
  while (s.is_ok() && !*done && std::chrono::steady_clock::now() < deadline) s = backend.poll(done);
  return s;
}

// The real backend's ncclAllReduce, started and polled as the transport
// does, on `bytes` of host data that one rank's reduction leaves unchanged.
void check_backend_allreduce(qc::NcclBackend& backend, qc::NcclReduction reduction,
                             const char* what) {
  const size_t count = 1000;
  std::vector<uint8_t> data(count * qc::element_bytes(reduction));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  if (reduction == qc::NcclReduction::kSumFloat32) {
    for (size_t i = 0; i < count; ++i) {
      const float v = static_cast<float>(i) * 0.5f - 100.0f;
      std::memcpy(data.data() + 4 * i, &v, 4);
    }
  }
  const std::vector<uint8_t> want = data;
  bool done = false;
  const qc::Status s =
      poll_until_done(backend, backend.start_allreduce(data.data(), count, reduction), &done);
  if (!s.is_ok()) std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  check(s.is_ok() && done && data == want, what);
}

// The real backend's group on host frames (what the staged algorithms and
// the agreement's messages use): two sends to itself out of one image, their
// receives into another part of it, with a byte between that no op names.
// Also: polling while the stream runs leaves no CUDA error behind for the
// caller's next launch check.
void check_backend_start(qc::NcclBackend& backend) {
  const size_t a = 1000, b = (1u << 20) + 3, gap = 1;
  const size_t recv_at = a + b + gap;
  std::vector<uint8_t> image(recv_at + a + b, 0);
  for (size_t i = 0; i < a + b; ++i) image[i] = static_cast<uint8_t>(i * 29 + 11);
  image[a + b] = 0x5A;  // the gap
  std::vector<uint8_t> want = image;
  std::memcpy(want.data() + recv_at, image.data(), a + b);
  std::vector<qc::NcclOp> ops(4);
  ops[0] = {true, 0, 0, a};
  ops[1] = {true, 0, a, b};
  ops[2] = {false, 0, recv_at, a};
  ops[3] = {false, 0, recv_at + a, b};
  bool done = false;
  const qc::Status s = poll_until_done(backend, backend.start(image.data(), image.size(), ops),
                                       &done);
  if (!s.is_ok()) std::fprintf(stderr, "start: %s\n", s.message().c_str());
  check(s.is_ok() && done && image == want,
        "a started group of host frames moves the bytes and nothing else");
  check(cudaGetLastError() == cudaSuccess, "no CUDA error left after polling");
}

// The real backend's group of ncclSend/ncclRecv on device buffers enqueued
// on a caller's stream (what the stream-ordered ring and alltoall do),
// here a send to itself, the one peer a one-GPU machine has.
void check_backend_group(qc::NcclBackend& backend) {
  const size_t bytes = (1u << 20) + 37;
  std::vector<uint8_t> pattern(bytes), back(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 131 + 7);
  void *src = nullptr, *dst = nullptr;
  cudaMalloc(&src, bytes);
  cudaMalloc(&dst, bytes);
  cudaMemcpy(src, pattern.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemset(dst, 0, bytes);
  // The memset runs on the legacy stream, which a non-blocking stream does
  // not wait for.
  cudaDeviceSynchronize();
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  qc::DeviceTransfer ops[2];
  ops[0].send = true;
  ops[0].peer = 0;
  ops[0].data = src;
  ops[0].bytes = bytes;
  ops[1].peer = 0;
  ops[1].data = dst;
  ops[1].bytes = bytes;
  const qc::Status s = backend.enqueue_group(ops, 2, stream);
  if (!s.is_ok()) std::fprintf(stderr, "enqueue_group: %s\n", s.message().c_str());
  const bool synced = cudaStreamSynchronize(stream) == cudaSuccess;
  cudaMemcpy(back.data(), dst, bytes, cudaMemcpyDeviceToHost);
  check(s.is_ok() && synced && back == pattern,
        "an ncclSend/ncclRecv group enqueued on the caller's stream moves the bytes");
  cudaStreamDestroy(stream);
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    std::printf("no libnccl.so.2 (%s)\n", dlerror());
    return 77;
  }
  auto get_id = reinterpret_cast<decltype(&ncclGetUniqueId)>(dlsym(lib, "ncclGetUniqueId"));
  auto init = reinterpret_cast<decltype(&ncclCommInitRank)>(dlsym(lib, "ncclCommInitRank"));
  auto destroy = reinterpret_cast<decltype(&ncclCommDestroy)>(dlsym(lib, "ncclCommDestroy"));
  if (!get_id || !init || !destroy) {
    std::fprintf(stderr, "FAILED: libnccl.so.2 lacks ncclGetUniqueId/ncclCommInitRank\n");
    return 1;
  }
  cudaSetDevice(0);
  ncclUniqueId id;
  ncclComm_t user = nullptr;
  if (get_id(&id) != ncclSuccess || init(&user, 1, id, 0) != ncclSuccess) {
    std::fprintf(stderr, "FAILED: a one-rank NCCL communicator\n");
    return 1;
  }

  qc_comm_config_t cfg = QC_COMM_CONFIG_INIT;
  cfg.transport = QC_TRANSPORT_NCCL;
  cfg.nccl_comm = user;
  qc_comm_t comm = nullptr;
  check(qc_comm_create(&cfg, &comm) == QC_SUCCESS, "qc_comm_create over the NCCL communicator");
  if (comm != nullptr) {
    int size = 0, rank = -1;
    check(qc_comm_size(comm, &size) == QC_SUCCESS && size == 1, "one rank");
    check(qc_comm_rank(comm, &rank) == QC_SUCCESS && rank == 0, "rank 0");
    // 16 KiB, the default min_compress_bytes: compressed, so one rank's
    // sum is its input quantized, the same bytes on the host and the device.
    qc_policy_t p = QC_POLICY_INIT;
    p.codec = QC_CODEC_MINMAX;
    check(qc_comm_set_layer_policy(comm, "*", &p) == QC_SUCCESS, "a minmax policy");
    std::vector<float> x(4096), y(4096, -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
    check(qc_allreduce(comm, x.data(), y.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr,
                       nullptr, nullptr) == QC_SUCCESS && y != x,
          "host allreduce of one rank returns the input quantized");
    float *dx = nullptr, *dy = nullptr;
    cudaMalloc(&dx, x.size() * 4);
    cudaMalloc(&dy, x.size() * 4);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    std::vector<float> back(x.size(), -1.0f);
    check(qc_allreduce(comm, dx, dy, x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                       nullptr) == QC_SUCCESS,
          "device allreduce");
    cudaMemcpy(back.data(), dy, x.size() * 4, cudaMemcpyDeviceToHost);
    check(std::memcmp(back.data(), y.data(), x.size() * 4) == 0,
          "device allreduce of one rank gives the host's bytes");
    // The stream-ordered path: codec none with native on float32 device
    // buffers is ncclAllReduce enqueued on the caller's stream.
    qc_policy_t none = QC_POLICY_INIT;
    none.algorithm = QC_ALGO_NATIVE;
    check(qc_comm_set_layer_policy(comm, "*", &none) == QC_SUCCESS, "a native policy with codec none");
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    cudaMemset(dy, 0, x.size() * 4);
    check(qc_allreduce(comm, dx, dy, x.size(), QC_DTYPE_FLOAT32, QC_OP_AVG, nullptr, nullptr,
                       stream) == QC_SUCCESS,
          "device allreduce enqueued on the caller's stream");
    cudaStreamSynchronize(stream);
    back.assign(x.size(), -1.0f);
    cudaMemcpy(back.data(), dy, x.size() * 4, cudaMemcpyDeviceToHost);
    check(back == x, "the enqueued average of one rank is the input");
    // The stream-ordered compressed ring (one rank: one encode and decode on
    // the device, no group), on a stream kept busy first, then at once on a
    // second stream, which must wait on the device for the first call's use
    // of qc's memory: both give the host path's bytes.
    qc_policy_t q = QC_POLICY_INIT;
    q.codec = QC_CODEC_MINMAX;
    q.min_compress_bytes = 0;
    check(qc_comm_set_layer_policy(comm, "*", &q) == QC_SUCCESS, "a minmax policy for every size");
    std::vector<float> want(x.size(), -1.0f);
    check(qc_allreduce(comm, x.data(), want.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                       nullptr, nullptr, nullptr) == QC_SUCCESS && want != x,
          "host minmax allreduce (quantized)");
    cudaStream_t other = nullptr;
    cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
    void* busy = nullptr;
    const size_t busy_bytes = size_t{256} << 20;
    cudaMalloc(&busy, busy_bytes);
    for (int i = 0; i < 20; ++i) cudaMemsetAsync(busy, i, busy_bytes, stream);
    float* dz = nullptr;
    cudaMalloc(&dz, x.size() * 4);
    check(qc_allreduce(comm, dx, dy, x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                       stream) == QC_SUCCESS,
          "compressed device allreduce enqueued behind a busy stream");
    check(qc_allreduce(comm, dx, dz, x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                       other) == QC_SUCCESS,
          "compressed device allreduce enqueued at once on another stream");
    cudaStreamSynchronize(other);
    cudaStreamSynchronize(stream);
    for (float* out : {dy, dz}) {
      back.assign(x.size(), -1.0f);
      cudaMemcpy(back.data(), out, x.size() * 4, cudaMemcpyDeviceToHost);
      check(std::memcmp(back.data(), want.data(), x.size() * 4) == 0,
            "each enqueued compressed allreduce gives the host path's bytes");
    }
    // The other stream-ordered algorithms, named: on one rank each is its
    // encodes, decodes and (SRA) the device sum, still the host's bytes.
    for (const qc_algorithm_t algorithm :
         {QC_ALGO_RECURSIVE_DOUBLING, QC_ALGO_SRA, QC_ALGO_TREE}) {
      q.algorithm = algorithm;
      check(qc_comm_set_layer_policy(comm, "*", &q) == QC_SUCCESS, "a minmax policy by name");
      cudaMemsetAsync(dz, 0, x.size() * 4, other);
      check(qc_allreduce(comm, dx, dz, x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, nullptr, nullptr,
                         other) == QC_SUCCESS,
            "a compressed device allreduce by name enqueued");
      cudaStreamSynchronize(other);
      back.assign(x.size(), -1.0f);
      cudaMemcpy(back.data(), dz, x.size() * 4, cudaMemcpyDeviceToHost);
      check(std::memcmp(back.data(), want.data(), x.size() * 4) == 0,
            "recursive doubling, SRA and tree enqueued give the host path's bytes");
    }
    cudaFree(busy);
    cudaFree(dz);
    cudaStreamDestroy(other);
    cudaStreamDestroy(stream);
    qc_status_t async = QC_ERROR_INTERNAL;
    check(qc_comm_get_async_error(comm, &async) == QC_SUCCESS && async == QC_SUCCESS,
          "no asynchronous error");
    check(qc_comm_destroy(comm) == QC_SUCCESS, "qc_comm_destroy");
    cudaFree(dx);
    cudaFree(dy);
  }
  {
    std::unique_ptr<qc::NcclBackend> backend;
    const qc::Status made = qc::cuda::make_nccl_backend(user, &backend);
    check(made.is_ok(), "the NCCL backend on its own");
    if (backend != nullptr) {
      check_backend_allreduce(*backend, qc::NcclReduction::kSumFloat32, "ncclAllReduce float sum");
      check_backend_allreduce(*backend, qc::NcclReduction::kMinUint64, "ncclAllReduce uint64 min");
      check_backend_start(*backend);
      check_backend_group(*backend);
    }
  }
  {
    // qc's own NCCL communicator from a unique id (what the torch backend
    // makes, the id shared through torch's store): a device allreduce
    // enqueued on a stream, then qc destroys the communicator it owns.
    unsigned char qc_id[QC_NCCL_UNIQUE_ID_BYTES + 1];
    std::memset(qc_id, 0xA5, sizeof qc_id);
    check(qc_nccl_unique_id_create(qc_id, sizeof qc_id) == QC_SUCCESS &&
              qc_id[QC_NCCL_UNIQUE_ID_BYTES] == 0xA5,
          "qc_nccl_unique_id_create writes QC_NCCL_UNIQUE_ID_BYTES bytes");
    qc_comm_t own = nullptr;
    check(qc_comm_create_nccl_id(qc_id, QC_NCCL_UNIQUE_ID_BYTES, 1, 1, nullptr, &own) ==
                  QC_ERROR_INVALID_ARGUMENT &&
              own == nullptr,
          "qc_comm_create_nccl_id refuses rank 1 of 1");
    qc_comm_config_t nccl_cfg = QC_COMM_CONFIG_INIT;
    nccl_cfg.transport = QC_TRANSPORT_NCCL;
    nccl_cfg.timeout_seconds = 60;
    check(qc_comm_create_nccl_id(qc_id, QC_NCCL_UNIQUE_ID_BYTES, 0, 1, &nccl_cfg, &own) ==
              QC_SUCCESS,
          "qc_comm_create_nccl_id of one rank");
    if (own != nullptr) {
      int size = 0;
      check(qc_comm_size(own, &size) == QC_SUCCESS && size == 1, "one rank from the id");
      qc_policy_t q = QC_POLICY_INIT;
      q.codec = QC_CODEC_MINMAX;
      q.bits = 4;
      q.error_feedback = 1;
      q.min_compress_bytes = 0;
      check(qc_comm_set_layer_policy(own, "*", &q) == QC_SUCCESS, "4-bit minmax with feedback");
      std::vector<float> x(3000), want(x.size(), -1.0f), back(x.size(), -1.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 89) * 0.125f - 5.0f;
      qc_error_buffer_t host_ebuf = nullptr, dev_ebuf = nullptr;
      check(qc_error_buffer_create(own, x.size(), &host_ebuf) == QC_SUCCESS &&
                qc_error_buffer_create(own, x.size(), &dev_ebuf) == QC_SUCCESS,
            "two error buffers");
      check(qc_allreduce(own, x.data(), want.data(), x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM,
                         "grad", host_ebuf, nullptr) == QC_SUCCESS && want != x,
            "host allreduce on the id's communicator (quantized)");
      float* dx = nullptr;
      cudaMalloc(&dx, x.size() * 4);
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      cudaMemcpyAsync(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream);
      check(qc_allreduce(own, dx, dx, x.size(), QC_DTYPE_FLOAT32, QC_OP_SUM, "grad", dev_ebuf,
                         stream) == QC_SUCCESS,
            "device allreduce in place with error feedback, enqueued");
      cudaStreamSynchronize(stream);
      cudaMemcpy(back.data(), dx, x.size() * 4, cudaMemcpyDeviceToHost);
      check(std::memcmp(back.data(), want.data(), x.size() * 4) == 0,
            "the enqueued device allreduce gives the host call's bytes");
      double host_norm = -1, dev_norm = -2;
      check(qc_error_buffer_norm(host_ebuf, &host_norm) == QC_SUCCESS &&
                qc_error_buffer_norm(dev_ebuf, &dev_norm) == QC_SUCCESS &&
                host_norm == dev_norm && host_norm > 0,
            "the device's residuals equal the host's");
      cudaStreamDestroy(stream);
      cudaFree(dx);
      qc_error_buffer_destroy(host_ebuf);
      qc_error_buffer_destroy(dev_ebuf);
      check(qc_comm_destroy(own) == QC_SUCCESS, "qc_comm_destroy frees the id's communicator");
    }
  }
  // qc split its own communicator off: the caller's is still usable.
  check(destroy(user) == ncclSuccess, "the caller's communicator outlives qc's");
  std::printf("%s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
