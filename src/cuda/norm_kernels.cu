// The squared L2 norm of a device tensor, for the per-layer statistics a
// device call records (qc_layer_stats_t.mean_sq_norm, what adaptive bit
// widths read): the host path measures its input, and a call on device
// buffers must not leave its layers without a norm.
//
// Two launches, no atomics, so a tensor gives the same double on every run of
// one grid: each warp sums its grid-stride share in double and writes one
// partial; one warp then sums the partials in a fixed order. The first launch
// records how many partials it wrote, so the second never reads a slot no
// warp filled (the warp emulator runs fewer blocks than asked for).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernel_common.cuh"

namespace qc {
namespace cuda {
namespace {

using namespace kernel;

constexpr unsigned kWarpsPerBlock = kThreads / 32;
constexpr size_t kMaxPartials = kMaxNormBlocks * kWarpsPerBlock;

// Where the pieces live in the caller's scratch (kNormScratchBytes).
struct NormScratch {
  double partials[kMaxPartials];
  double result;
  unsigned partial_count;
};
static_assert(sizeof(NormScratch) <= kNormScratchBytes, "kNormScratchBytes is too small");

__device__ __forceinline__ double warp_sum(double v) {
  for (unsigned offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
  return v;  // lane 0 holds the warp's sum
}

__global__ void __launch_bounds__(kThreads)
    norm_partials_kernel(const float* x, size_t count, NormScratch* scratch) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  double sum = 0.0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const double v = x[i];
    sum += v * v;
  }
  sum = warp_sum(sum);  // every lane reaches the shuffles: no early return above
  const unsigned warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch->partials[blockIdx.x * (blockDim.x / 32) + warp] = sum;
  if (blockIdx.x == 0 && threadIdx.x == 0) scratch->partial_count = gridDim.x * (blockDim.x / 32);
}

// One warp.
__global__ void norm_finish_kernel(NormScratch* scratch) {
  const unsigned lane = threadIdx.x;
  const unsigned n = scratch->partial_count;
  double sum = 0.0;
  for (unsigned i = lane; i < n; i += 32) sum += scratch->partials[i];
  sum = warp_sum(sum);
  if (lane == 0) scratch->result = sum;
}

}  // namespace

Status squared_norm_on_device(const float* x, size_t count, void* scratch, void* stream) {
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0) {
    return invalid_argument("cuda: device float32 buffer must be 4-byte aligned");
  }
  if (reinterpret_cast<uintptr_t>(scratch) % alignof(NormScratch) != 0) {
    return invalid_argument("cuda: the norm scratch must be 8-byte aligned");
  }
  auto* s = static_cast<NormScratch*>(scratch);
  const unsigned blocks = blocks_for(count) < kMaxNormBlocks ? blocks_for(count) : kMaxNormBlocks;
  auto* partials = &norm_partials_kernel;
  QC_LAUNCH(partials, blocks, kThreads, static_cast<cudaStream_t>(stream))(x, count, s);
  QC_RETURN_IF_ERROR(launch_status("cuda: squared norm"));
  auto* finish = &norm_finish_kernel;
  QC_LAUNCH(finish, 1, 32, static_cast<cudaStream_t>(stream))(s);
  return launch_status("cuda: squared norm");
}

const double* squared_norm_result(const void* scratch) {
  return &static_cast<const NormScratch*>(scratch)->result;
}

}  // namespace cuda
}  // namespace qc
