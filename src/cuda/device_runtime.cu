// The CUDA runtime as the rest of qc needs it (device_runtime.h).
#include "cuda/device_runtime.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.h"

namespace qc {
namespace cuda {

int device_count() {
  // Immutable once computed (a thread-safe static): the count cannot change
  // while the process runs, and asking costs a driver call.
  static const int count = [] {
    int n = 0;
    // No driver (every CI machine) is cudaErrorInsufficientDriver or
    // cudaErrorNoDevice: both mean "no device here", not a failure.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // do not leave the error sticky for later calls
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_device_memory(const void* p) {
  if (p == nullptr || device_count() == 0) return false;
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

Status copy_to_device(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cuda: copy to device");
}

Status copy_to_host(void* dst, const void* src, size_t bytes) {
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cuda: copy to host");
}

namespace {

// An async copy on `stream`, then a wait for that stream: the copy runs after
// the caller's earlier work there, and the bytes are in place on return.
Status copy_after(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, void* stream,
                  const char* what) {
  const auto s = static_cast<cudaStream_t>(stream);
  QC_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, s), what));
  return cuda_status(cudaStreamSynchronize(s), what);
}

}  // namespace

Status copy_to_host_after(void* dst, const void* src, size_t bytes, void* stream) {
  return copy_after(dst, src, bytes, cudaMemcpyDeviceToHost, stream,
                    "cuda: copy of the device input to host memory");
}

Status copy_to_device_after(void* dst, const void* src, size_t bytes, void* stream) {
  return copy_after(dst, src, bytes, cudaMemcpyHostToDevice, stream,
                    "cuda: copy of the result to device memory");
}

Status alloc_pinned(size_t bytes, void** p) {
  *p = nullptr;
  const cudaError_t err = cudaMallocHost(p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(QC_ERROR_OUT_OF_MEMORY, "cuda: no " + std::to_string(bytes) +
                                              " bytes of page-locked host memory");
  }
  return cuda_status(err, "cuda: page-locked host memory");
}

void free_pinned(void* p) {
  if (p != nullptr) (void)cudaFreeHost(p);
}

Status alloc_device(size_t bytes, void** p) {
  *p = nullptr;
  const cudaError_t err = cudaMalloc(p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status(QC_ERROR_OUT_OF_MEMORY, "cuda: no " + std::to_string(bytes) +
                                              " bytes of device memory");
  }
  return cuda_status(err, "cuda: device memory");
}

void free_device(void* p) {
  if (p != nullptr) (void)cudaFree(p);
}

Status copy_on_device(void* dst, const void* src, size_t bytes, void* stream) {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(stream)),
                     "cuda: copy on device");
}

Status synchronize(void* stream) {
  return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cuda: kernel");
}

Status create_event(void** event) {
  cudaEvent_t e = nullptr;
  Status s = cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  *event = s ? static_cast<void*>(e) : nullptr;
  return s;
}

void destroy_event(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status record_event(void* event, void* stream) {
  return cuda_status(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
      "cudaEventRecord");
}

Status stream_wait_event(void* stream, void* event) {
  return cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                         static_cast<cudaEvent_t>(event), 0),
                     "cudaStreamWaitEvent");
}

Status query_event(void* event, bool* done) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  *done = e != cudaErrorNotReady;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: do not leave it for the caller's next call
    return Status::ok();
  }
  return cuda_status(e, "cuda: kernel");
}

}  // namespace cuda
}  // namespace qc
