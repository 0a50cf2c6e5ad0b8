// The squared norm of a call's float32 input, for its layer statistics
// (qc_layer_stats_t.mean_sq_norm, what adaptive bit widths read).
//
// Summed a slice of kSlice values at a time, each slice by the kernel
// (cpu/codec_kernels.h, the same bits on every ISA) and the slices in order,
// so the value does not depend on when the slices run. The host executor
// runs one slice before each wait, while the call's transfers are in flight:
// a separate pass over a large input, cold in memory, costs about as much
// as an encode. finish() sums what is left.
#pragma once

#include <cstddef>

namespace qc {

class InputNorm {
 public:
  static constexpr size_t kSlice = 65536;

  InputNorm(const float* x, size_t count) : x_(x), count_(count) {}

  // Sums the next slice; false when none was left.
  bool step();
  // Sums the rest; the norm.
  double finish();

  // The whole norm at once (the same value).
  static double of(const float* x, size_t count) { return InputNorm(x, count).finish(); }

 private:
  const float* x_;
  size_t count_;
  size_t done_ = 0;
  double sum_ = 0;
};

}  // namespace qc
