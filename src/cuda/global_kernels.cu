// global_linear and global_exp (paper 002; defined in
// core/codecs/codec_global.h) on the device, with the CPU's bytes.
//
// The norm is sqrt of the canonical sum of z*z over the whole tensor: 16
// partial sums, each added in index order. The only way to get the CPU's
// float is to keep those 16 chains, so one warp does it, lane r adding
// elements r, r + 16, r + 32, ... (coalesced 64-byte reads), then the
// fixed tree. That pass is latency-bound (one dependent add per 16
// elements): exact, not fast. The codes are then one thread per group of 8
// elements, at memory speed. Collectives agree the norm across ranks before
// encoding, so there the norm pass is a per-rank share of that sum.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "cpu/codec_kernels.h"
#include "cpu/global_levels.h"
#include "cpu/random.h"
#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernel_common.cuh"

namespace qc {
namespace cuda {
namespace {

using namespace kernel;

constexpr int kChains = 16;  // the canonical sum's partial sums

// One warp: the norm, written to the message (NaN when it is not finite: a
// NaN or Inf input, or a sum of squares that overflows).
__global__ void __launch_bounds__(32) global_norm_kernel(const float* x, const float* e,
                                                         size_t count, uint8_t* meta) {
  const unsigned lane = threadIdx.x & 31u;
  float acc = 0.0f;
  if (lane < kChains) {
    for (size_t i = lane; i < count; i += kChains) {
      const float z = e != nullptr ? x[i] + e[i] : x[i];
      const float sq = z * z;
      acc = acc + sq;
    }
  }
  // cpu canonical_reduce16: acc[j] += acc[j + w] for w = 8, 4, 2, 1.
  for (int w = kChains / 2; w >= 1; w /= 2) acc = acc + __shfl_down_sync(kFullMask, acc, w);
  if (lane == 0) {
    const float norm = sqrtf(acc);
    store_meta(meta, isfinite(norm) ? norm : __int_as_float(0x7fc00000));
  }
}

// One warp: the max-abs scale max |z|, written to the message (NaN when some
// z is NaN or infinite). A max is exact in any order, so it equals the CPU's.
__global__ void __launch_bounds__(32) global_max_abs_kernel(const float* x, const float* e,
                                                            size_t count, uint8_t* meta) {
  const unsigned lane = threadIdx.x & 31u;
  float m = 0.0f;
  int finite = 1;
  for (size_t i = lane; i < count; i += 32) {
    const float a = fabsf(e != nullptr ? x[i] + e[i] : x[i]);
    finite = finite && a <= FLT_MAX;
    m = a > m ? a : m;
  }
  for (int w = 16; w >= 1; w /= 2) {
    // Every lane shuffles (no short-circuit): a full-warp shuffle needs all.
    const float other = __shfl_down_sync(kFullMask, m, w);
    const int other_finite = __shfl_down_sync(kFullMask, finite, w);
    finite = finite & other_finite;
    m = other > m ? other : m;
  }
  if (lane == 0) {
    if (m < cpu::kMinGlobalMaxAbsScale) m = 0.0f;  // as the CPU (codec_kernels.h)
    if (m > cpu::kMaxGlobalMaxAbsScale) finite = 0;
    store_meta(meta, finite ? m : __int_as_float(0x7fc00000));
  }
}

struct GlobalJob {
  bool exponential;
  int bits;
  bool stochastic;
  cpu::RandomStream rng;
  uint64_t index_base;
  const float* x;
  float* e;
  size_t count;
  const uint8_t* meta;  // the norm global_norm_kernel wrote
  uint8_t* codes;
  float keep_limit;  // residual hygiene: cpu::global_residual_limit(count)
};

__global__ void __launch_bounds__(kThreads) global_quantize_kernel(GlobalJob j) {
  const float norm = load_meta(j.meta);
  const bool finite = isfinite(norm);
  const uint32_t sign_bit = 1u << (j.bits - 1);
  const int Mi = static_cast<int>(sign_bit - 1u);
  const float M = static_cast<float>(Mi);
  const float inv = norm > 0 ? M / norm : 0.0f;
  const float step = norm / M;
  // Residual hygiene (cpu/codec_kernels.h), as GlobalCodec::encode_impl.
  const bool keep =
      cpu::keeps_residuals(cpu::global_residual_gauge(j.exponential, norm, Mi), j.keep_limit);
  for_each_group_of_8(j.count, [&](size_t g, size_t i0, int valid) {
    uint64_t word = 0;
    for (int c = 0; c < valid; ++c) {
      const size_t i = i0 + c;
      if (!finite) {  // NaN norm: zero codes, nothing to carry forward
        if (j.e != nullptr) j.e[i] = 0.0f;
        continue;
      }
      const float z = j.e != nullptr ? j.x[i] + j.e[i] : j.x[i];
      const bool negative = z < 0;
      uint32_t level;
      float v;
      if (!j.exponential) {
        const float t = fabsf(z) * inv;
        const float r = j.stochastic ? floorf(t + cpu::random_uniform(j.rng, j.index_base + i))
                                     : rintf(t);
        const float lf = ref_min(ref_max(r, 0.0f), M);
        level = static_cast<uint32_t>(lf);
        v = lf * step;
      } else {
        const float r = norm > 0 ? fabsf(z) / norm : 0.0f;
        level = cpu::exp_level(r, Mi, j.stochastic, j.rng, j.index_base + i);
        v = norm * cpu::exp_value(static_cast<int>(level), Mi);
      }
      word |= static_cast<uint64_t>((negative ? sign_bit : 0u) | level) << (c * j.bits);
      if (j.e != nullptr) j.e[i] = keep ? z - (negative ? -v : v) : 0.0f;
    }
    store_code_bytes(j.codes + g * j.bits, word, (valid * j.bits + 7) / 8);
  });
}

struct GlobalDecodeJob {
  bool exponential;
  int bits;
  const uint8_t* meta;
  const uint8_t* codes;
  size_t count;
  float* dst;
  bool accumulate;
};

__global__ void __launch_bounds__(kThreads) global_decode_kernel(GlobalDecodeJob d) {
  const float norm = load_meta(d.meta);
  const uint32_t sign_bit = 1u << (d.bits - 1);
  const int Mi = static_cast<int>(sign_bit - 1u);
  const float step = norm / static_cast<float>(Mi);
  const uint32_t mask = (1u << d.bits) - 1u;
  for_each_group_of_8(d.count, [&](size_t g, size_t i0, int valid) {
    const uint64_t word = load_code_bytes(d.codes + g * d.bits, (valid * d.bits + 7) / 8);
    for (int c = 0; c < valid; ++c) {
      const uint32_t code = static_cast<uint32_t>(word >> (c * d.bits)) & mask;
      const uint32_t level = code & (sign_bit - 1u);
      const float v = d.exponential ? norm * cpu::exp_value(static_cast<int>(level), Mi)
                                    : static_cast<float>(level) * step;
      const float s = (code & sign_bit) ? -v : v;
      float* out = d.dst + i0 + c;
      *out = d.accumulate ? *out + s : s;
    }
  });
}

Status check_global(qc_codec_t codec, int bits) {
  if (codec != QC_CODEC_GLOBAL_LINEAR && codec != QC_CODEC_GLOBAL_EXP)
    return unsupported("cuda: the global kernels take global_linear or global_exp");
  if (bits < 2 || bits > 8) return invalid_argument("cuda: bits out of range for a global codec");
  return Status::ok();
}

}  // namespace

Status global_encode(qc_codec_t codec, int bits, bool stochastic, bool max_abs_scale,
                     const cpu::RandomStream& rng, uint64_t index_base, const float* x, float* e,
                     size_t count, uint8_t* meta, uint8_t* codes, void* stream) {
  QC_RETURN_IF_ERROR(check_global(codec, bits));
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0 || reinterpret_cast<uintptr_t>(e) % 4 != 0)
    return invalid_argument("cuda: device float32 buffers must be 4-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (max_abs_scale) {
    auto* scale = &global_max_abs_kernel;
    QC_LAUNCH(scale, 1, 32, s)(x, e, count, meta);
  } else {
    auto* norm = &global_norm_kernel;
    QC_LAUNCH(norm, 1, 32, s)(x, e, count, meta);
  }
  QC_RETURN_IF_ERROR(launch_status("cuda: global scale"));
  if (count == 0) return Status::ok();
  const GlobalJob j{codec == QC_CODEC_GLOBAL_EXP, bits, stochastic, rng, index_base, x, e, count,
                    meta, codes, cpu::global_residual_limit(count)};
  auto* quantize = &global_quantize_kernel;
  QC_LAUNCH(quantize, blocks_for((count + 7) / 8), kThreads, s)(j);
  return launch_status("cuda: global quantize");
}

Status global_decode(qc_codec_t codec, int bits, const uint8_t* meta, const uint8_t* codes,
                     size_t count, float* dst, bool accumulate, void* stream) {
  QC_RETURN_IF_ERROR(check_global(codec, bits));
  if (reinterpret_cast<uintptr_t>(dst) % 4 != 0)
    return invalid_argument("cuda: device output must be 4-byte aligned");
  if (count == 0) return Status::ok();
  const GlobalDecodeJob d{codec == QC_CODEC_GLOBAL_EXP, bits, meta, codes, count, dst, accumulate};
  auto* decode = &global_decode_kernel;
  QC_LAUNCH(decode, blocks_for((count + 7) / 8), kThreads, static_cast<cudaStream_t>(stream))(d);
  return launch_status("cuda: global decode");
}

}  // namespace cuda
}  // namespace qc
