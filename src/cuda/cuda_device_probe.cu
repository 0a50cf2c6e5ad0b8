// Placeholder for the CUDA kernels and NCCL transport (a later issue): it
// only proves that the CUDA toolchain builds and links into libqc.
#include <cuda_runtime.h>

namespace qc {
namespace cuda {

// Number of visible CUDA devices; 0 when there is no driver or device.
int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace cuda
}  // namespace qc
