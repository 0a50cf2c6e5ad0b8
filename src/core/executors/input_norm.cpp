#include "core/executors/input_norm.h"

#include <algorithm>

#include "cpu/codec_kernels.h"

namespace qc {

bool InputNorm::step() {
  if (done_ >= count_) return false;
  const size_t n = std::min(kSlice, count_ - done_);
  sum_ += cpu::kernels().squared_norm(x_ + done_, n);
  done_ += n;
  return true;
}

double InputNorm::finish() {
  while (step()) {
  }
  return sum_;
}

}  // namespace qc
