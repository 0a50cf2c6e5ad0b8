// A CPU emulator for the CUDA kernels in src/cuda, so their lane logic (which
// lane owns which partial sum, the shuffles, the code bytes each lane pair
// writes, the bucket walks) is tested on every machine, GPU or not.
//
// Include this, define QC_CUDA_EMULATION, then include a kernel .cu file: its
// kernels compile as plain C++ and QC_LAUNCH(kernel, grid, block, stream)
// runs them here. Each warp is 32 coroutines on one thread (ucontext) that
// meet for every shuffle (__shfl_sync, __shfl_down_sync, __shfl_xor_sync with the
// CUDA semantics, width included); warps run one after the other, which is
// one legal schedule for kernels that share nothing between warps (ours use
// no shared memory and no __syncthreads). The grid is capped at two blocks:
// every kernel here is a grid-stride loop, so fewer blocks still cover all
// the work, with each warp taking several turns.
//
// What it does not cover: the GPU's code generation (FMA contraction is off
// by --fmad=false; the emulator compiles without contraction too), memory
// coalescing and speed. Those need a GPU: tests/cuda/test_cuda_codecs.cpp.
#pragma once

#include <cuda_runtime.h>  // host view: float4, make_float4, uint3, dim3
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace qc_emu {

constexpr unsigned kWarpSize = 32;
constexpr size_t kLaneStack = 256 * 1024;

// One warp in flight: 32 lanes as coroutines (ucontext) on the calling
// thread. A lane runs until its next shuffle, then the next lane runs; when
// all 32 have reached the shuffle, each resumes in turn and reads its
// source lane's value. Slots alternate between two banks per shuffle, so a
// lane that has already moved on to its next shuffle cannot overwrite a
// value a later lane has yet to read.
struct WarpRun {
  ucontext_t scheduler;
  ucontext_t lanes[kWarpSize];
  bool done[kWarpSize] = {};
  unsigned bank[kWarpSize] = {};
  uint64_t slots[2][kWarpSize] = {};
  unsigned current = 0;
  const std::function<void(unsigned)>* job = nullptr;
};

struct LaneContext {
  WarpRun* run = nullptr;
  unsigned lane = 0;
  uint3 thread{0, 0, 0}, block{0, 0, 0};
  dim3 block_dim{1, 1, 1}, grid_dim{1, 1, 1};
};
inline thread_local LaneContext tl;

inline void lane_entry() {
  WarpRun* run = tl.run;
  const unsigned lane = run->current;
  (*run->job)(lane);
  run->done[lane] = true;  // returning switches to uc_link, the scheduler
}

// Runs job(lane) for lanes 0..31 of one warp to completion.
inline void run_warp(const std::function<void(unsigned)>& job, unsigned warp_in_block) {
  static thread_local std::vector<char> stacks(kWarpSize * kLaneStack);
  WarpRun run;
  run.job = &job;
  tl.run = &run;
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    getcontext(&run.lanes[lane]);
    run.lanes[lane].uc_stack.ss_sp = stacks.data() + lane * kLaneStack;
    run.lanes[lane].uc_stack.ss_size = kLaneStack;
    run.lanes[lane].uc_link = &run.scheduler;
    makecontext(&run.lanes[lane], lane_entry, 0);
  }
  for (;;) {
    unsigned finished = 0;
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
      if (run.done[lane]) {
        ++finished;
        continue;
      }
      run.current = lane;
      tl.lane = lane;
      tl.thread = uint3{warp_in_block * kWarpSize + lane, 0, 0};
      swapcontext(&run.scheduler, &run.lanes[lane]);
      if (run.done[lane]) ++finished;
    }
    if (finished == kWarpSize) break;
    if (finished != 0) {
      // Some lanes returned while others wait at a shuffle: on a GPU that is
      // a hang or garbage, here a test failure that says so.
      std::fprintf(stderr, "warp_emulator: lanes diverged at a full-warp shuffle\n");
      std::abort();
    }
  }
  tl.run = nullptr;
}

// Every lane publishes v, then reads lane src's value.
template <class T>
T exchange(T v, unsigned src) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  WarpRun* run = tl.run;
  const unsigned lane = tl.lane;
  const unsigned bank = run->bank[lane];
  run->bank[lane] ^= 1u;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  run->slots[bank][lane] = bits;
  swapcontext(&run->lanes[lane], &run->scheduler);  // wait for the other 31
  T out;
  std::memcpy(&out, &run->slots[bank][src], sizeof out);
  return out;
}

inline unsigned segment_base(unsigned lane, int width) {
  return lane & ~static_cast<unsigned>(width - 1);
}

constexpr unsigned kMaxEmulatedBlocks = 2;

// QC_LAUNCH(kernel, grid, block, stream)(args...): runs the kernel now.
template <class Kernel>
struct Launch {
  Kernel kernel;
  unsigned grid;
  unsigned block;

  template <class... Args>
  void operator()(Args... args) const {
    const unsigned blocks = grid < kMaxEmulatedBlocks ? grid : kMaxEmulatedBlocks;
    for (unsigned b = 0; b < blocks; ++b) {
      tl.block = uint3{b, 0, 0};
      tl.block_dim = dim3(block);
      tl.grid_dim = dim3(blocks);
      const std::function<void(unsigned)> job = [&](unsigned) { kernel(args...); };
      for (unsigned w = 0; w < block / kWarpSize; ++w) run_warp(job, w);
    }
  }
};

template <class Kernel>
Launch<Kernel> make_launch(Kernel k, size_t grid, unsigned block) {
  return Launch<Kernel>{k, static_cast<unsigned>(grid), block};
}

}  // namespace qc_emu

// The CUDA built-ins the kernels use, on the CPU.
#define threadIdx (::qc_emu::tl.thread)
#define blockIdx (::qc_emu::tl.block)
#define blockDim (::qc_emu::tl.block_dim)
#define gridDim (::qc_emu::tl.grid_dim)

template <class T>
T __shfl_sync(unsigned /*mask*/, T v, int src, int width = 32) {
  const unsigned lane = ::qc_emu::tl.lane;
  return ::qc_emu::exchange(v, ::qc_emu::segment_base(lane, width) +
                                   (static_cast<unsigned>(src) & static_cast<unsigned>(width - 1)));
}
template <class T>
T __shfl_down_sync(unsigned /*mask*/, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::qc_emu::tl.lane;
  const unsigned in_segment = lane & static_cast<unsigned>(width - 1);
  return ::qc_emu::exchange(v, in_segment + delta < static_cast<unsigned>(width) ? lane + delta : lane);
}
template <class T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask, int width = 32) {
  const unsigned lane = ::qc_emu::tl.lane;
  const unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  const bool inside = ::qc_emu::segment_base(src, width) == ::qc_emu::segment_base(lane, width);
  return ::qc_emu::exchange(v, inside ? src : lane);
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
using std::isfinite;
using std::isnan;

#define QC_LAUNCH(kernel, grid, block, stream) \
  (static_cast<void>(stream), ::qc_emu::make_launch(kernel, (grid), (block)))
