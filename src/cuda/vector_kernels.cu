// The float32 arithmetic the allreduce algorithms do on their values between
// codec calls (core/device_staging.h): SRA's rank-order sum of its own block,
// AVG's one division; and 16-bit data widened to the float32 values and the
// result narrowed back, with the CPU's conversions (cpu/half_convert.h).
// Each element gets the host loop's single IEEE operation (compiled with
// --fmad=false like every kernel here), so the device values stay the host
// path's bit for bit.
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

// `op(i)` for every element i < count, one grid-stride loop for all of
// this file's operations.
template <typename Op>
__global__ void __launch_bounds__(kThreads) for_each_element(Op op, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    op(i);
  }
}

struct AddOp {
  float* dst;
  const float* src;
  __device__ void operator()(size_t i) const { dst[i] = dst[i] + src[i]; }
};

// A kernel rather than cudaMemsetAsync, so the warp emulator, which has no
// CUDA runtime to call, checks it with the others (tests/cuda).
struct ZeroOp {
  float* dst;
  __device__ void operator()(size_t i) const { dst[i] = 0.0f; }
};

struct ScaleOp {
  float* dst;
  float factor;
  __device__ void operator()(size_t i) const { dst[i] = dst[i] * factor; }
};

template <bool kBfloat16>
struct WidenOp {
  const uint16_t* src;
  float* dst;
  __device__ void operator()(size_t i) const {
    dst[i] = kBfloat16 ? cpu::bfloat16_to_float(src[i]) : cpu::half_to_float(src[i]);
  }
};

template <bool kBfloat16>
struct NarrowOp {
  const float* src;
  uint16_t* dst;
  __device__ void operator()(size_t i) const {
    dst[i] = kBfloat16 ? cpu::float_to_bfloat16(src[i]) : cpu::float_to_half(src[i]);
  }
};

// Enqueues `op` over `count` elements on `stream`; `what` names it in errors.
template <typename Op>
Status launch_elementwise(const Op& op, size_t count, void* stream, const char* what) {
  if (count == 0) return Status::ok();
  auto* kernel = &for_each_element<Op>;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(op, count);
  return launch_status(what);
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
  return launch_elementwise(AddOp{dst, src}, count, stream, "cuda: add");
}

Status scale_values(float* dst, float factor, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_aligned(dst));
  return launch_elementwise(ScaleOp{dst, factor}, count, stream, "cuda: scale");
}

Status widen_values(const void* src, qc_dtype_t dtype, float* dst, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_16bit(dtype, src));
  QC_RETURN_IF_ERROR(check_aligned(dst));
  const auto* from = static_cast<const uint16_t*>(src);
  return dtype == QC_DTYPE_BFLOAT16
             ? launch_elementwise(WidenOp<true>{from, dst}, count, stream, "cuda: widen")
             : launch_elementwise(WidenOp<false>{from, dst}, count, stream, "cuda: widen");
}

Status narrow_values(const float* src, qc_dtype_t dtype, void* dst, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_16bit(dtype, dst));
  QC_RETURN_IF_ERROR(check_aligned(src));
  auto* to = static_cast<uint16_t*>(dst);
  return dtype == QC_DTYPE_BFLOAT16
             ? launch_elementwise(NarrowOp<true>{src, to}, count, stream, "cuda: narrow")
             : launch_elementwise(NarrowOp<false>{src, to}, count, stream, "cuda: narrow");
}

Status zero_values(float* dst, size_t count, void* stream) {
  QC_RETURN_IF_ERROR(check_aligned(dst));
  return launch_elementwise(ZeroOp{dst}, count, stream, "cuda: zero");
}

}  // namespace cuda
}  // namespace qc
