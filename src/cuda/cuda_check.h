// cudaError_t -> Status for the .cu files (this header includes the CUDA
// runtime, so only CUDA translation units may include it).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace qc {
namespace cuda {

// A CUDA runtime error as a qc status: a device that is missing or cannot
// run this build's code is QC_ERROR_UNSUPPORTED, an invalid pointer or
// argument QC_ERROR_INVALID_ARGUMENT, everything else QC_ERROR_INTERNAL.
inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  // Reported here, so not left as the thread's last error for the next
  // kernel launch check (launch_status) to report as that kernel's; a
  // sticky error stays whatever this does.
  (void)cudaGetLastError();
  std::string m = std::string(what) + ": CUDA error " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return unsupported(std::move(m));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return invalid_argument(std::move(m));
    default:
      return internal_error(std::move(m));
  }
}

// Kernels are launched through QC_LAUNCH(kernel, grid, block, stream)(args)
// rather than kernel<<<...>>>(args), so that tests/cuda/warp_emulator.h can
// run the very same kernel source on the CPU, one thread per lane, on
// machines without a GPU (every CI run). Only that test defines
// QC_CUDA_EMULATION; the library is always built with the real launch.
#ifndef QC_LAUNCH
#define QC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

// The launch status of the kernel just enqueued (configuration errors and
// sticky errors from earlier kernels surface here).
inline Status launch_status(const char* kernel) {
#if defined(QC_CUDA_EMULATION)
  (void)kernel;
  return Status::ok();  // the emulator ran the kernel to completion already
#else
  return cuda_status(cudaGetLastError(), kernel);
#endif
}

}  // namespace cuda
}  // namespace qc
