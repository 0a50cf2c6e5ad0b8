// The CUDA codec kernels, as the host sees them. No CUDA type appears here:
// every pointer is a device pointer (cudaMalloc'd, or managed) and `stream`
// is a cudaStream_t passed as void* (NULL: the legacy default stream). Every
// call only enqueues work on that stream and returns; a launch error comes
// back as the Status, an error inside a kernel at the next synchronisation.
//
// The kernels write the same bytes as the CPU reference kernels
// (cpu/codec_kernels.h, docs/wire-format.md): the same arithmetic with no
// fused multiply-add (the .cu files are compiled with --fmad=false), the
// canonical sum's 16 partial sums each kept by one lane in index order, the
// same counter-based random bits (cpu/random.h, shared), the same tie rules
// for min and max. tests/cuda compares them with the CPU byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "cpu/codec_kernels.h"  // cpu::BlockArgs
#include "cpu/random.h"
#include "cuda/device_runtime.h"  // device_count, copies
#include "qc.h"

namespace qc {
namespace cuda {

// One bucketed quantizing encode (minmax, qsgd, onebit), the device twin of
// cpu::QuantArgs plus the codec.
struct DeviceQuantArgs {
  qc_codec_t codec = QC_CODEC_MINMAX;  // QC_CODEC_MINMAX, QC_CODEC_QSGD or QC_CODEC_ONEBIT
  int bits = 4;
  size_t bucket = 128;
  bool stochastic = false;
  cpu::RandomStream rng;
  uint64_t index_base = 0;                  // global index of element 0 (random bits)
  qc_dtype_t input_dtype = QC_DTYPE_FLOAT32;  // 16-bit input: plain encode only (e == nullptr)
};

// Encodes x[0..count) into meta (per-bucket metadata) and codes (the bit
// stream), both inside one message buffer on the device. With e != nullptr
// (float32 input only) the encode is error-compensated in the same pass:
// z = x + e is encoded and e becomes z - decode(z).
//
// Buckets whose size is a multiple of 8 take the single-pass kernel: one team
// of 4 lanes per bucket reads the bucket once for its statistics and again,
// from L1/L2, to quantize it. Other bucket sizes take a two-kernel path
// (statistics, then quantize per group of 8 elements), because their code
// bytes straddle buckets. Both write identical bytes.
Status quant_encode(const void* x, float* e, size_t count, const DeviceQuantArgs& args,
                    uint8_t* meta, uint8_t* codes, void* stream);

// dst = decode (or dst += decode with accumulate) of count values.
Status quant_decode(qc_codec_t codec, const uint8_t* meta, const uint8_t* codes, size_t count,
                    int bits, size_t bucket, float* dst, bool accumulate, void* stream);

// global_linear / global_exp (codec QC_CODEC_GLOBAL_LINEAR or _EXP, bits
// 2..8): meta is the message's 4-byte scale, which the first kernel writes
// (the L2 norm: sqrt of the canonical sum of z*z over all count elements,
// exact and latency-bound: one warp keeps the CPU's 16 partial sums; or
// with max_abs_scale max |z|; NaN when not finite) and the second reads to
// write the codes (and e, with e != nullptr).
Status global_encode(qc_codec_t codec, int bits, bool stochastic, bool max_abs_scale,
                     const cpu::RandomStream& rng, uint64_t index_base, const float* x, float* e,
                     size_t count, uint8_t* meta, uint8_t* codes, void* stream);
Status global_decode(qc_codec_t codec, int bits, const uint8_t* meta, const uint8_t* codes,
                     size_t count, float* dst, bool accumulate, void* stream);

// The block-scaled codecs (MX, nvfp4: core/codecs/codec_block_scaled.h,
// cpu/block_formats.h): `payload` is the message's payload (nvfp4's f32 S,
// one scale byte per block, the codes), `args` the codec's kernel arguments
// (cpu::BlockArgs: format, block, nvfp4, rounding, random stream and the
// index of element 0). With e != nullptr the encode is error-compensated as
// the CPU's (z = x + e encoded, e = z - decode(z), 0 in a non-finite block).
// nvfp4's encode uses the code area as scratch for its message scale first.
// The decoder trusts the payload: callers check it as the CPU codec does.
Status block_encode(const cpu::BlockArgs& args, const float* x, float* e, size_t count,
                    uint8_t* payload, void* stream);
Status block_decode(const cpu::BlockArgs& args, const uint8_t* payload, size_t count, float* dst,
                    bool accumulate, void* stream);

// fp16 / bf16 wire casts (codec QC_CODEC_FP16 or QC_CODEC_BF16): out holds
// count little-endian 16-bit values at any alignment. With e != nullptr the
// encode is error-compensated as the CPU codecs' generic one: z = x + e is
// cast and e becomes z - widen(cast(z)).
Status cast_encode(qc_codec_t codec, const float* x, float* e, size_t count, uint8_t* out,
                   void* stream);
Status cast_decode(qc_codec_t codec, const uint8_t* in, size_t count, float* dst, bool accumulate,
                   void* stream);

// The allreduce algorithms' float32 arithmetic between codec calls
// (vector_kernels.cu): dst += src, dst *= factor, dst = 0; each element the
// host loop's one IEEE operation.
Status add_values(float* dst, const float* src, size_t count, void* stream);
Status scale_values(float* dst, float factor, size_t count, void* stream);
Status zero_values(float* dst, size_t count, void* stream);
// 16-bit data (QC_DTYPE_FLOAT16 or QC_DTYPE_BFLOAT16, 2-byte aligned) to
// float32 and back, element by element with cpu/half_convert.h's functions,
// as cpu::to_float32 and cpu::from_float32 (round to nearest even).
Status widen_values(const void* src, qc_dtype_t dtype, float* dst, size_t count, void* stream);
Status narrow_values(const float* src, qc_dtype_t dtype, void* dst, size_t count, void* stream);

// The squared L2 norm of count float32 values (norm_kernels.cu), summed in
// double, enqueued on `stream` into `scratch` (kNormScratchBytes of device
// memory, 8-byte aligned); squared_norm_result(scratch) is where the double
// lies once the stream has run it. The same grid sums in the same order, so
// a tensor gives the same double every time.
constexpr unsigned kMaxNormBlocks = 1024;
constexpr size_t kNormScratchBytes = 65536 + 64;
Status squared_norm_on_device(const float* x, size_t count, void* scratch, void* stream);
const double* squared_norm_result(const void* scratch);

}  // namespace cuda
}  // namespace qc
