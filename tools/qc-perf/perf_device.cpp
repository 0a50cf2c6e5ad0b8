// qc-perf --device: each rank's buffers of a row copied to CUDA device memory
// before the timed calls and its output copied back after them, so the rows
// time qc's collectives on device buffers (with the codec on the device where
// qc runs it there; QC_DEVICE_CODEC=0 gives the whole-buffer staging to
// compare with) and the usual checks read the result. Without
// QC_PERF_HAVE_CUDA only stubs are built, and --device is refused by the
// command line.
#include "perf.h"

#ifdef QC_PERF_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace qcperf {

#ifdef QC_PERF_HAVE_CUDA

namespace {

bool cuda_ok(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

}  // namespace

DeviceSupport device_support() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return DeviceSupport::kNoDevice;
  return DeviceSupport::kYes;
}

bool device_begin(const RankBuffers& host, DeviceRank* d, std::string* error) {
  cudaStream_t stream = nullptr;
  bool ok = cuda_ok(cudaMalloc(&d->send, host.send_bytes > 0 ? host.send_bytes : 1),
                    "cudaMalloc", error) &&
            cuda_ok(cudaMalloc(&d->recv, host.recv_bytes > 0 ? host.recv_bytes : 1),
                    "cudaMalloc", error) &&
            cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                    "cudaStreamCreate", error);
  d->stream = stream;
  ok = ok && cuda_ok(cudaMemcpy(d->send, host.send, host.send_bytes, cudaMemcpyHostToDevice),
                     "upload", error);
  // 0xff bytes are NaN in float, half and bfloat16: an element qc never
  // writes shows up as wrong, as on the host.
  ok = ok && cuda_ok(cudaMemset(d->recv, 0xff, host.recv_bytes), "cudaMemset", error);
  // The upload and the memset ran on the legacy stream, which the rank's
  // non-blocking stream does not wait for.
  ok = ok && cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error);
  if (!ok) {
    std::string ignored;
    device_end(d, nullptr, &ignored);
  }
  return ok;
}

bool device_end(DeviceRank* d, RankBuffers* host, std::string* error) {
  bool ok = true;
  if (host != nullptr) {
    ok = cuda_ok(cudaMemcpy(host->recv, d->recv, host->recv_bytes, cudaMemcpyDeviceToHost),
                 "download", error);
  }
  cudaFree(d->send);
  cudaFree(d->recv);
  if (d->stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(d->stream));
  *d = DeviceRank{};
  return ok;
}

#else  // !QC_PERF_HAVE_CUDA

DeviceSupport device_support() { return DeviceSupport::kNotBuilt; }
bool device_begin(const RankBuffers&, DeviceRank*, std::string* error) {
  *error = "this qc-perf was built without CUDA";
  return false;
}
bool device_end(DeviceRank* d, RankBuffers*, std::string*) {
  *d = DeviceRank{};
  return true;
}

#endif

}  // namespace qcperf
