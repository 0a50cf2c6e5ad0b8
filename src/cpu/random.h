// Counter-based random bits for stochastic rounding.
//
// The bits for element i of a stream depend only on (stream key, i), never
// on the ISA, the thread count or how the tensor was chunked: that is what
// makes a rerun with the same seed bit-identical (DESIGN.md promise 4) and
// lets scalar, AVX2, AVX-512 and CUDA kernels agree.
//
//   stream key (k0, k1) = split of mix64(seed, rank, stream)
// where `stream` names a layer's call (core/call_stats.h: layer_stream).
//   bits(i) = lowbias32(lowbias32(lo32(i) ^ k0) ^ (hi32(i) ^ k1))
//   uniform(i) = (bits(i) >> 8) * 2^-24, in [0, 1)
//
// lowbias32 is a 32-bit integer hash (xorshift-multiply, constants
// 0x7feb352d and 0x846ca68b) that needs only 32-bit lane operations, so
// SIMD kernels compute it in registers.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace qc {
namespace cpu {

struct RandomStream {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
};

QC_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

QC_HOST_DEVICE inline RandomStream make_random_stream(uint64_t seed, uint32_t rank,
                                                      uint64_t stream) {
  const uint64_t h =
      splitmix64(seed ^ splitmix64(static_cast<uint64_t>(rank) ^ splitmix64(stream)));
  return {static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
}

QC_HOST_DEVICE inline uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

QC_HOST_DEVICE inline uint32_t random_bits(const RandomStream& s, uint64_t index) {
  const uint32_t lo = static_cast<uint32_t>(index);
  const uint32_t hi = static_cast<uint32_t>(index >> 32);
  return lowbias32(lowbias32(lo ^ s.k0) ^ (hi ^ s.k1));
}

// Exactly representable in float: a multiple of 2^-24 below 1.
QC_HOST_DEVICE inline float random_uniform(const RandomStream& s, uint64_t index) {
  return static_cast<float>(random_bits(s, index) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace cpu
}  // namespace qc
