// The block-scaled codecs (OCP MX, nvfp4; core/codecs/codec_block_scaled.h)
// on the device, with the CPU's bytes: every element goes through
// cpu/block_formats.h's round_element / element_value and every block
// through its block_scale, the same functions the scalar reference calls.
//
// Encode: one team of B lanes per block (B = 32 for MX, 16 for nvfp4, so a
// warp holds one or two blocks), lane r holding element r: the team's
// largest finite |z| and whether all are finite by shuffles, then each lane
// its code; groups of 8 lanes OR their codes into one word (8 codes are
// exactly `bits` whole bytes) and the group's first lane stores it.
// nvfp4 needs the message's largest finite |z| first: per-warp maxima go to
// the code area (scratch until the encode overwrites it), one warp reduces
// them into S. A max is exact in any order, so S is the CPU's.
// Decode: one thread per group of 8 elements (a block is whole groups).
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "cpu/block_formats.h"
#include "cpu/codec_kernels.h"
#include "cpu/random.h"
#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernel_common.cuh"

namespace qc {
namespace cuda {
namespace {

using namespace kernel;

struct BlockJob {
  cpu::BlockArgs args;
  const float* x;
  float* e;
  size_t count;
  uint8_t* payload;  // [S (nvfp4)] [scale bytes] [codes]
};

__host__ __device__ inline size_t blocks_of(size_t count, size_t block) { return count == 0 ? 0 : (count - 1) / block + 1; }

__device__ __forceinline__ float z_at(const float* x, const float* e, size_t i) {
  return e != nullptr ? x[i] + e[i] : x[i];
}

// The largest finite |z| among this thread's elements, as a warp's maximum
// in lane 0 (0 when there is none).
__device__ __forceinline__ float warp_max_finite(float m) {
  for (int o = 16; o >= 1; o /= 2) {
    const float other = __shfl_xor_sync(kFullMask, m, o);
    m = other > m ? other : m;
  }
  return m;
}

// nvfp4, pass 1: the input in n_slots contiguous chunks, each chunk's
// largest finite |z| into its slot of `partials` (float32 at any
// alignment). Warps take whole chunks, so every slot is written whatever
// grid runs it.
__global__ void __launch_bounds__(kThreads) finite_max_partials_kernel(const float* x, const float* e,
                                                                      size_t count, size_t n_slots,
                                                                      uint8_t* partials) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const size_t chunk = (count + n_slots - 1) / n_slots;
  for (size_t slot = warp; slot < n_slots; slot += warps) {
    const size_t from = slot * chunk;
    const size_t to = size_min(count, from + chunk);
    float m = 0.0f;
    for (size_t i = from + lane; i < to; i += 32) {
      const float a = fabsf(z_at(x, e, i));
      if (a <= FLT_MAX && a > m) m = a;
    }
    m = warp_max_finite(m);
    if (lane == 0) store_meta(partials + 4 * slot, m);
  }
}

// nvfp4, pass 2 (one warp): S = max / 2688 from the partials, or straight
// from the input when `partials` is null (a small message).
__global__ void __launch_bounds__(32) message_scale_kernel(const float* x, const float* e,
                                                           size_t count, const uint8_t* partials,
                                                           size_t n_partials, uint8_t* S_out) {
  const unsigned lane = threadIdx.x & 31u;
  float m = 0.0f;
  if (partials != nullptr) {
    for (size_t w = lane; w < n_partials; w += 32) {
      const float p = load_meta(partials + 4 * w);
      m = p > m ? p : m;
    }
  } else {
    for (size_t i = lane; i < count; i += 32) {
      const float a = fabsf(z_at(x, e, i));
      if (a <= FLT_MAX && a > m) m = a;
    }
  }
  m = warp_max_finite(m);
  if (lane == 0) store_meta(S_out, m / cpu::kNvfp4Range);
}

template <int B>
__global__ void __launch_bounds__(kThreads) block_encode_kernel(BlockJob j) {
  constexpr size_t kTeams = 32 / B;  // blocks per warp
  const cpu::BlockArgs& a = j.args;
  const cpu::ElementFormat& f = a.format;
  const int q = f.bits;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned r = lane % B;  // element within the block
  const size_t blocks = blocks_of(j.count, B);
  uint8_t* scales = j.payload + (a.nvfp4 ? 4 : 0);
  uint8_t* codes = scales + blocks;
  const float S = a.nvfp4 ? load_meta(j.payload) : 0.0f;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  // Every lane of a warp takes the same turns (full-warp shuffles); lanes
  // past the last block or element hold z = 0 and write nothing.
  for (size_t w = warp; w * kTeams < blocks; w += warps) {
    const size_t b = w * kTeams + lane / B;
    const size_t i = b * B + r;
    const bool valid = b < blocks && i < j.count;
    const float z = valid ? z_at(j.x, j.e, i) : 0.0f;
    const float mag = fabsf(z);
    int finite = mag <= FLT_MAX;  // false for NaN and Inf
    float amax = finite ? mag : 0.0f;
    for (int o = B / 2; o >= 1; o /= 2) {
      const float other = __shfl_xor_sync(kFullMask, amax, o, B);
      finite &= __shfl_xor_sync(kFullMask, finite, o, B);
      amax = other > amax ? other : amax;
    }
    const cpu::BlockScale bs = cpu::block_scale(amax, finite != 0, S, a);
    uint32_t code = 0;
    float decoded = 0.0f;
    if (valid && !bs.zero) {
      const float qv = a.nvfp4 ? z / bs.x : (z * bs.enc.first) * bs.enc.second;
      const float u = a.stochastic ? cpu::random_uniform(a.rng, a.index_base + i) : 0.0f;
      code = cpu::round_element(qv, f, a.stochastic, u);
      if (j.e != nullptr) {
        const float v = cpu::element_value(code, f);
        decoded = a.nvfp4 ? v * bs.x : (v * bs.dec.first) * bs.dec.second;
      }
    }
    if (valid && j.e != nullptr) j.e[i] = finite ? z - decoded : 0.0f;
    uint64_t word = static_cast<uint64_t>(code) << ((r % 8) * q);
    for (int o = 1; o < 8; o *= 2) word |= __shfl_xor_sync(kFullMask, word, o, 8);
    if (valid && r % 8 == 0) {
      const size_t n = size_min(8, j.count - i);
      store_code_bytes(codes + (i / 8) * q, word, (n * q + 7) / 8);
    }
    if (valid && r == 0) scales[b] = bs.byte;
  }
}

struct BlockDecodeJob {
  cpu::BlockArgs args;
  const uint8_t* payload;
  size_t count;
  float* dst;
  bool accumulate;
};

__global__ void __launch_bounds__(kThreads) block_decode_kernel(BlockDecodeJob d) {
  const cpu::BlockArgs& a = d.args;
  const cpu::ElementFormat& f = a.format;
  const int q = f.bits;
  const size_t blocks = blocks_of(d.count, a.block);
  const uint8_t* scales = d.payload + (a.nvfp4 ? 4 : 0);
  const uint8_t* codes = scales + blocks;
  const float S = a.nvfp4 ? load_meta(d.payload) : 0.0f;
  const uint32_t mask = (1u << q) - 1u;
  for_each_group_of_8(d.count, [&](size_t g, size_t i0, int valid) {
    const cpu::BlockDecodeScale ds = cpu::block_decode_scale(scales[i0 / a.block], S, a.nvfp4);
    const uint64_t word = load_code_bytes(codes + g * q, (valid * q + 7) / 8);
    for (int c = 0; c < valid; ++c) {
      const float v = cpu::element_value(static_cast<uint32_t>(word >> (c * q)) & mask, f);
      const float s = ds.is_nan ? __int_as_float(0x7fc00000)
                      : a.nvfp4 ? v * ds.x
                                : (v * ds.dec.first) * ds.dec.second;
      float* out = d.dst + i0 + c;
      *out = d.accumulate ? *out + s : s;
    }
  });
}

Status check_block_args(const cpu::BlockArgs& a) {
  if (a.block != (a.nvfp4 ? 16u : 32u)) return invalid_argument("cuda: block size of a block-scaled format");
  if (a.format.bits != 4 && a.format.bits != 6 && a.format.bits != 8)
    return invalid_argument("cuda: element width of a block-scaled format");
  return Status::ok();
}

// Partial maxima for nvfp4's message scale beyond this many elements; below
// it one warp reads the input itself.
constexpr size_t kOneWarpScaleCount = 1 << 15;
constexpr size_t kScaleSlots = 512;  // partial maxima: 2 KiB of the >= 16 KiB code area

}  // namespace

Status block_encode(const cpu::BlockArgs& args, const float* x, float* e, size_t count,
                    uint8_t* payload, void* stream) {
  QC_RETURN_IF_ERROR(check_block_args(args));
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0 || reinterpret_cast<uintptr_t>(e) % 4 != 0)
    return invalid_argument("cuda: device float32 buffers must be 4-byte aligned");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const size_t blocks = blocks_of(count, args.block);
  if (args.nvfp4) {
    uint8_t* codes = payload + 4 + blocks;
    auto* scale = &message_scale_kernel;
    if (count <= kOneWarpScaleCount) {
      QC_LAUNCH(scale, 1, 32, s)(x, e, count, nullptr, size_t{0}, payload);
    } else {
      // The count / 2 code bytes hold the partials (4 bytes each) until
      // the encode overwrites them.
      auto* partials = &finite_max_partials_kernel;
      QC_LAUNCH(partials, kScaleSlots / (kThreads / 32), kThreads, s)(x, e, count, kScaleSlots, codes);
      QC_RETURN_IF_ERROR(launch_status("cuda: nvfp4 partial maxima"));
      QC_LAUNCH(scale, 1, 32, s)(x, e, count, codes, kScaleSlots, payload);
    }
    QC_RETURN_IF_ERROR(launch_status("cuda: nvfp4 message scale"));
  }
  if (count == 0) return Status::ok();
  const BlockJob j{args, x, e, count, payload};
  const size_t warps_needed = blocks_of(blocks, 32 / args.block);
  if (args.nvfp4) {
    auto* encode = &block_encode_kernel<16>;
    QC_LAUNCH(encode, blocks_for(32 * warps_needed), kThreads, s)(j);
  } else {
    auto* encode = &block_encode_kernel<32>;
    QC_LAUNCH(encode, blocks_for(32 * warps_needed), kThreads, s)(j);
  }
  return launch_status("cuda: block-scaled encode");
}

Status block_decode(const cpu::BlockArgs& args, const uint8_t* payload, size_t count, float* dst,
                    bool accumulate, void* stream) {
  QC_RETURN_IF_ERROR(check_block_args(args));
  if (reinterpret_cast<uintptr_t>(dst) % 4 != 0)
    return invalid_argument("cuda: device output must be 4-byte aligned");
  if (count == 0) return Status::ok();
  const BlockDecodeJob d{args, payload, count, dst, accumulate};
  auto* decode = &block_decode_kernel;
  QC_LAUNCH(decode, blocks_for((count + 7) / 8), kThreads, static_cast<cudaStream_t>(stream))(d);
  return launch_status("cuda: block-scaled decode");
}

}  // namespace cuda
}  // namespace qc
