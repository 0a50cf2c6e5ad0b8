// fp16 and bf16 wire casts on the device, through the same conversion
// functions as the CPU (cpu/half_convert.h), so NaN payloads, rounding and
// overflow come out bit for bit the same.
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

// The wire's 16-bit values sit at offset 32 of a message, so the buffer is
// usually 2-byte aligned; a message at an odd address is still accepted.
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p, bool aligned2) {
  if (aligned2) return *reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

__device__ __forceinline__ void store_u16(uint8_t* p, uint16_t v, bool aligned2) {
  if (aligned2) {
    *reinterpret_cast<uint16_t*>(p) = v;
    return;
  }
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// With e: the generic error-compensated encode of the CPU codecs
// (Codec::encode_error_compensated), per element: z = x + e, the cast of z
// sent, e = z - its widening; one IEEE operation each, as on the CPU.
__global__ void __launch_bounds__(kThreads)
    cast_encode_kernel(const float* x, float* e, size_t count, uint8_t* out, bool bf16,
                       bool aligned2) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float z = e != nullptr ? x[i] + e[i] : x[i];
    const uint16_t h = bf16 ? cpu::float_to_bfloat16(z) : cpu::float_to_half(z);
    store_u16(out + 2 * i, h, aligned2);
    if (e != nullptr) e[i] = z - (bf16 ? cpu::bfloat16_to_float(h) : cpu::half_to_float(h));
  }
}

__global__ void __launch_bounds__(kThreads)
    cast_decode_kernel(const uint8_t* in, size_t count, float* dst, bool bf16, bool accumulate,
                       bool aligned2) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const uint16_t h = load_u16(in + 2 * i, aligned2);
    const float v = bf16 ? cpu::bfloat16_to_float(h) : cpu::half_to_float(h);
    dst[i] = accumulate ? dst[i] + v : v;
  }
}

Status check_cast(qc_codec_t codec, const float* f32) {
  if (codec != QC_CODEC_FP16 && codec != QC_CODEC_BF16)
    return unsupported("cuda: the cast kernels take fp16 or bf16");
  if (reinterpret_cast<uintptr_t>(f32) % 4 != 0)
    return invalid_argument("cuda: device float32 buffer must be 4-byte aligned");
  return Status::ok();
}

}  // namespace

Status cast_encode(qc_codec_t codec, const float* x, float* e, size_t count, uint8_t* out,
                   void* stream) {
  QC_RETURN_IF_ERROR(check_cast(codec, x));
  if (e != nullptr) QC_RETURN_IF_ERROR(check_cast(codec, e));
  if (count == 0) return Status::ok();
  const bool aligned2 = reinterpret_cast<uintptr_t>(out) % 2 == 0;
  auto* kernel = &cast_encode_kernel;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(
      x, e, count, out, codec == QC_CODEC_BF16, aligned2);
  return launch_status("cuda: cast encode");
}

Status cast_decode(qc_codec_t codec, const uint8_t* in, size_t count, float* dst, bool accumulate,
                   void* stream) {
  QC_RETURN_IF_ERROR(check_cast(codec, dst));
  if (count == 0) return Status::ok();
  const bool aligned2 = reinterpret_cast<uintptr_t>(in) % 2 == 0;
  auto* kernel = &cast_decode_kernel;
  QC_LAUNCH(kernel, blocks_for(count), kThreads, static_cast<cudaStream_t>(stream))(
      in, count, dst, codec == QC_CODEC_BF16, accumulate, aligned2);
  return launch_status("cuda: cast decode");
}

}  // namespace cuda
}  // namespace qc
