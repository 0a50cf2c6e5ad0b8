// The float32 arithmetic the allreduce algorithms do on their values between
// codec calls (core/device_staging.h): SRA's rank-order sum of its own block,
// AVG's one division; and 16-bit data widened to the float32 values and the
// result narrowed back, with the CPU's conversions (cpu/half_convert.h). Each element gets the host loop's single IEEE
// operation (compiled with --fmad=false like every kernel here), so the
// device values stay the host path's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "cpu/half_convert.h"
#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernel_common.cuh"

namespace qc {
namespace cuda {
namespace {

using namespace kernel;

__global__ void __launch_bounds__(kThreads) add_kernel(float* dst, const float* src, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = dst[i] + src[i];
  }
}

__global__ void __launch_bounds__(kThreads) scale_kernel(float* dst, float factor, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = dst[i] * factor;
  }
}

template <bool kBfloat16>
__global__ void __launch_bounds__(kThreads)
    widen_kernel(const uint16_t* src, float* dst, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = kBfloat16 ? cpu::bfloat16_to_float(src[i]) : cpu::half_to_float(src[i]);
  }
}

template <bool kBfloat16>
__global__ void __launch_bounds__(kThreads)
    narrow_kernel(const float* src, uint16_t* dst, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = kBfloat16 ? cpu::float_to_bfloat16(src[i]) : cpu::float_to_half(src[i]);
  }
}

Status check_16bit(qc_dtype_t dtype, const void* p) {
  if (dtype != QC_DTYPE_FLOAT16 && dtype != QC_DTYPE_BFLOAT16) {
    return invalid_argument("cuda: widen and narrow take float16 or bfloat16 data");
  }
  if (reinterpret_cast<uintptr_t>(p) % 2 != 0) {
    return invalid_argument("cuda: device 16-bit buffer must be 2-byte aligned");
  }
  return Status::ok();
}

Status check_aligned(const float* p) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return invalid_argument("cuda: device float32 buffer must be 4-byte aligned");
  return Status::ok();
}

}  // namespace

Status add_values(float* dst, const float* src, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_aligned(dst));
  QC_RETURN_IF_ERROR(check_aligned(src));
  if (count == 0) return Status::ok();
  auto* kernel = &add_kernel;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(dst, src,
                                                                                     count);
  return launch_status("cuda: add");
}

Status scale_values(float* dst, float factor, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_aligned(dst));
  if (count == 0) return Status::ok();
  auto* kernel = &scale_kernel;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(dst, factor,
                                                                                     count);
  return launch_status("cuda: scale");
}

Status widen_values(const void* src, qc_dtype_t dtype, float* dst, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_16bit(dtype, src));
  QC_RETURN_IF_ERROR(check_aligned(dst));
  if (count == 0) return Status::ok();
  auto* kernel = dtype == QC_DTYPE_BFLOAT16 ? &widen_kernel<true> : &widen_kernel<false>;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(
      static_cast<const uint16_t*>(src), dst, count);
  return launch_status("cuda: widen");
}

Status narrow_values(const float* src, qc_dtype_t dtype, void* dst, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_16bit(dtype, dst));
  QC_RETURN_IF_ERROR(check_aligned(src));
  if (count == 0) return Status::ok();
  auto* kernel = dtype == QC_DTYPE_BFLOAT16 ? &narrow_kernel<true> : &narrow_kernel<false>;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(
      src, static_cast<uint16_t*>(dst), count);
  return launch_status("cuda: narrow");
}

Status zero_values(float* dst, size_t count, void* stream) {
  if (count == 0) return Status::ok();
  return cuda_status(cudaMemsetAsync(dst, 0, count * sizeof(float),
                                     static_cast<cudaStream_t>(stream)),
                     "cuda: zero");
}

}  // namespace cuda
}  // namespace qc
