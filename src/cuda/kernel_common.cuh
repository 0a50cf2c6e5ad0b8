// Small device helpers every CUDA kernel file uses.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qc {
namespace cuda {
namespace kernel {

// Unrolls a loop with a compile-time trip count, so arrays it indexes stay
// in registers (a plain loop for the warp emulator's C++ build).
#ifdef __CUDACC__
#define QC_UNROLL _Pragma("unroll")
#else
#define QC_UNROLL
#endif

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kThreads = 256;  // threads per block for every kernel here
constexpr size_t kMaxBlocks = size_t{1} << 20;

// Blocks for a grid-stride kernel that wants `threads_needed` threads.
inline unsigned blocks_for(size_t threads_needed) {
  const size_t blocks = (threads_needed + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// std::min(a, b) and std::max(a, b), which the CPU reference uses: the first
// argument wins unless the second compares strictly less (greater), which
// decides -0 vs +0 and keeps a NaN first argument.
__device__ __forceinline__ float ref_min(float a, float b) { return (b < a) ? b : a; }
__device__ __forceinline__ float ref_max(float a, float b) { return (a < b) ? b : a; }

__device__ __forceinline__ size_t size_min(size_t a, size_t b) { return a < b ? a : b; }

// Metadata is little-endian float32 at any alignment inside the message.
__device__ __forceinline__ float load_meta(const uint8_t* p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}
__device__ __forceinline__ void store_meta(uint8_t* p, float v) { memcpy(p, &v, 4); }

// Host side: whether p suits an access of `a` bytes (vector paths, checks).
inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Grid-stride loop over groups of 8 consecutive elements, the unit of the
// per-element kernels (8 codes are exactly `bits` whole bytes, so groups
// never share a code byte): body(g, i0, valid) for group g, whose elements
// are i0 = 8g .. i0 + valid - 1 (valid < 8 only for the last group).
template <class Body>
__device__ __forceinline__ void for_each_group_of_8(size_t count, Body&& body) {
  const size_t groups = (count + 7) / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += stride) {
    const size_t i0 = 8 * g;
    body(g, i0, static_cast<int>(size_min(8, count - i0)));
  }
}

// Grid-stride loop that takes four elements at a time where the caller's
// buffers allow wide accesses: four(g) for elements 4g .. 4g + 3 while vec4,
// then one(i) for the count % 4 left (every element without vec4).
template <class Four, class One>
__device__ __forceinline__ void for_each_4_then_1(size_t count, bool vec4, Four&& four, One&& one) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t from = 0;
  if (vec4) {
    const size_t groups = count / 4;
    for (size_t g = tid; g < groups; g += stride) four(g);
    from = 4 * groups;
  }
  for (size_t i = from + tid; i < count; i += stride) one(i);
}

// Writes the low `nbytes` bytes of `word`, the packed codes of one group of 8
// elements (a group's codes are exactly `bits` whole bytes): one store of 1,
// 2, 4 or 8 bytes where the address allows it (bits 1, 2, 4, 8; a GPU is
// little-endian like the wire), else byte by byte.
__device__ __forceinline__ void store_code_bytes(uint8_t* out, uint64_t word, size_t nbytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(out);
  if (nbytes == 4 && at % 4 == 0) {
    *reinterpret_cast<uint32_t*>(out) = static_cast<uint32_t>(word);
  } else if (nbytes == 8 && at % 8 == 0) {
    *reinterpret_cast<uint64_t*>(out) = word;
  } else if (nbytes == 2 && at % 2 == 0) {
    *reinterpret_cast<uint16_t*>(out) = static_cast<uint16_t>(word);
  } else {
    for (size_t t = 0; t < nbytes; ++t) out[t] = static_cast<uint8_t>(word >> (8 * t));
  }
}
__device__ __forceinline__ uint64_t load_code_bytes(const uint8_t* in, size_t nbytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(in);
  if (nbytes == 4 && at % 4 == 0) return *reinterpret_cast<const uint32_t*>(in);
  if (nbytes == 8 && at % 8 == 0) return *reinterpret_cast<const uint64_t*>(in);
  if (nbytes == 2 && at % 2 == 0) return *reinterpret_cast<const uint16_t*>(in);
  uint64_t word = 0;
  for (size_t t = 0; t < nbytes; ++t) word |= static_cast<uint64_t>(in[t]) << (8 * t);
  return word;
}

}  // namespace kernel
}  // namespace cuda
}  // namespace qc
