// The CUDA runtime as the rest of qc needs it: is there a device at all.
#include <cuda_runtime.h>

#include "cuda/device_codec.h"

namespace qc {
namespace cuda {

int device_count() {
  int count = 0;
  // No driver (every CI machine) is cudaErrorInsufficientDriver or
  // cudaErrorNoDevice: both mean "no device here", not a failure.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error sticky for later calls
    return 0;
  }
  return count;
}

}  // namespace cuda
}  // namespace qc
