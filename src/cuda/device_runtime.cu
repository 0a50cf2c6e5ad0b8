// The CUDA runtime as the rest of qc needs it (device_runtime.h).
#include "cuda/device_runtime.h"

#include <cuda_runtime.h>

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

Status copy_on_device(void* dst, const void* src, size_t bytes, void* stream) {
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(stream)),
                     "cuda: copy on device");
}

Status synchronize(void* stream) {
  return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cuda: kernel");
}

}  // namespace cuda
}  // namespace qc
