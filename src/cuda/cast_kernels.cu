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
// sent, e = z - its widening, or 0 when the widening is not finite (residual
// hygiene: NaN, Inf, or beyond the 16-bit range); one IEEE operation each,
// as on the CPU. (A NaN that x + e makes is CUDA's canonical NaN, where x86
// keeps x's payload: a NaN's payload is not part of the contract, that it
// is NaN is.)
__device__ __forceinline__ float widen(uint16_t h, bool bf16) {
  return bf16 ? cpu::bfloat16_to_float(h) : cpu::half_to_float(h);
}

__device__ __forceinline__ uint16_t cast_encode_one(float x, float* e, bool bf16) {
  const float z = e != nullptr ? x + *e : x;  // x alone: -0 + 0 would be +0
  const uint16_t h = bf16 ? cpu::float_to_bfloat16(z) : cpu::float_to_half(z);
  if (e != nullptr) {
    const float w = widen(h, bf16);
    *e = isfinite(w) ? z - w : 0.0f;
  }
  return h;
}

// vec4 (x and e 16-byte aligned, the wire 8-byte aligned): four elements
// per thread, a float4 in and 8 wire bytes out, the last count % 4 one by
// one; else one element per thread. Memory speed needs the wide accesses:
// one float and one 16-bit store per thread ran at 0.57 of a copy (H200).
__global__ void __launch_bounds__(kThreads)
    cast_encode_kernel(const float* x, float* e, size_t count, uint8_t* out, bool bf16,
                       bool aligned2, bool vec4) {
  for_each_4_then_1(
      count, vec4,
      [&](size_t g) {
        const float4 xv = reinterpret_cast<const float4*>(x)[g];
        const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
        float es[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (e != nullptr) {
          const float4 ev = reinterpret_cast<const float4*>(e)[g];
          es[0] = ev.x, es[1] = ev.y, es[2] = ev.z, es[3] = ev.w;
        }
        uint32_t h[4];
        QC_UNROLL
        for (int c = 0; c < 4; ++c)
          h[c] = cast_encode_one(xs[c], e != nullptr ? &es[c] : nullptr, bf16);
        reinterpret_cast<uint2*>(out)[g] = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
        if (e != nullptr) reinterpret_cast<float4*>(e)[g] = make_float4(es[0], es[1], es[2], es[3]);
      },
      [&](size_t i) {
        store_u16(out + 2 * i, cast_encode_one(x[i], e != nullptr ? e + i : nullptr, bf16),
                  aligned2);
      });
}

// vec4: 8 wire bytes in, a float4 out (in 8-byte, dst 16-byte aligned).
__global__ void __launch_bounds__(kThreads)
    cast_decode_kernel(const uint8_t* in, size_t count, float* dst, bool bf16, bool accumulate,
                       bool aligned2, bool vec4) {
  for_each_4_then_1(
      count, vec4,
      [&](size_t g) {
        const uint2 w = reinterpret_cast<const uint2*>(in)[g];
        float4 v = make_float4(widen(static_cast<uint16_t>(w.x), bf16),
                               widen(static_cast<uint16_t>(w.x >> 16), bf16),
                               widen(static_cast<uint16_t>(w.y), bf16),
                               widen(static_cast<uint16_t>(w.y >> 16), bf16));
        if (accumulate) {
          const float4 d = reinterpret_cast<const float4*>(dst)[g];
          v = make_float4(d.x + v.x, d.y + v.y, d.z + v.z, d.w + v.w);
        }
        reinterpret_cast<float4*>(dst)[g] = v;
      },
      [&](size_t i) {
        const float v = widen(load_u16(in + 2 * i, aligned2), bf16);
        dst[i] = accumulate ? dst[i] + v : v;
      });
}

Status check_cast(qc_codec_t codec, const float* f32) {
  if (codec != QC_CODEC_FP16 && codec != QC_CODEC_BF16)
    return unsupported("cuda: the cast kernels take fp16 or bf16");
  if (!aligned(f32, 4))
    return invalid_argument("cuda: device float32 buffer must be 4-byte aligned");
  return Status::ok();
}

}  // namespace

Status cast_encode(qc_codec_t codec, const float* x, float* e, size_t count, uint8_t* out,
                   void* stream) {
  QC_RETURN_IF_ERROR(check_cast(codec, x));
  if (e != nullptr) QC_RETURN_IF_ERROR(check_cast(codec, e));
  if (count == 0) return Status::ok();
  const bool vec4 = aligned(x, 16) && (e == nullptr || aligned(e, 16)) && aligned(out, 8);
  auto* kernel = &cast_encode_kernel;
  QC_LAUNCH(kernel, blocks_for(vec4 ? (count + 3) / 4 : count), kThreads,
            static_cast<cudaStream_t>(stream))(x, e, count, out, codec == QC_CODEC_BF16,
                                               aligned(out, 2), vec4);
  return launch_status("cuda: cast encode");
}

Status cast_decode(qc_codec_t codec, const uint8_t* in, size_t count, float* dst, bool accumulate,
                   void* stream) {
  QC_RETURN_IF_ERROR(check_cast(codec, dst));
  if (count == 0) return Status::ok();
  const bool vec4 = aligned(in, 8) && aligned(dst, 16);
  auto* kernel = &cast_decode_kernel;
  QC_LAUNCH(kernel, blocks_for(vec4 ? (count + 3) / 4 : count), kThreads,
            static_cast<cudaStream_t>(stream))(in, count, dst, codec == QC_CODEC_BF16, accumulate,
                                               aligned(in, 2), vec4);
  return launch_status("cuda: cast decode");
}

}  // namespace cuda
}  // namespace qc
