#include "core/emulation_keep.h"

#include <mutex>
#include <utility>

namespace qc {
namespace {

template <typename T>
size_t vector_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

size_t total_bytes(const std::vector<RankBuffers>& buffers) {
  size_t total = 0;
  for (const RankBuffers& b : buffers) total += b.bytes();
  return total;
}

// The one kept set and its size. Global because the emulation's groups
// are: each call's is gone when it returns. The lock is held only to move
// vectors, never while freeing or computing.
struct Kept {
  std::mutex mutex;
  std::vector<RankBuffers> buffers;
  size_t bytes = 0;
};

Kept& kept() {
  static Kept* k = new Kept();  // never destroyed: no order-of-exit hazard
  return *k;
}

}  // namespace

size_t RankBuffers::bytes() const {
  size_t total = vector_bytes(scratch.messages) + vector_bytes(scratch.values) +
                 vector_bytes(scratch.estimate) + vector_bytes(scratch.residual_loaded) +
                 vector_bytes(scratch.sums32) + vector_bytes(scratch.sums64) +
                 vector_bytes(scratch.schedule.steps) + vector_bytes(scratch.schedule.slot_counts) +
                 vector_bytes(scratch.schedule.slot_bytes) + vector_bytes(work) +
                 vector_bytes(work_out) + vector_bytes(residual_work);
  for (const Message& m : scratch.messages) total += kEnvelopeBytes + m.payload_capacity();
  return total;
}

std::vector<RankBuffers> EmulationKeep::take(size_t n) {
  std::vector<RankBuffers> out;
  {
    Kept& k = kept();
    std::lock_guard<std::mutex> lock(k.mutex);
    out.swap(k.buffers);
    k.bytes = 0;
  }
  // More ranks than this call has: the rest is freed here, unlocked.
  if (out.size() > n) out.resize(n);
  return out;
}

void EmulationKeep::give_back(std::vector<RankBuffers> buffers, size_t limit) {
  const size_t bytes = total_bytes(buffers);
  if (bytes > limit) return;  // freed on return
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  // Two calls at once: the larger set serves more of the next calls.
  if (bytes > k.bytes || k.buffers.empty()) {
    std::swap(k.buffers, buffers);
    k.bytes = bytes;
  }
  // `buffers` (the set not kept) is freed after the lock is released: a
  // parameter outlives the function's locals.
}

size_t EmulationKeep::kept_bytes() {
  Kept& k = kept();
  std::lock_guard<std::mutex> lock(k.mutex);
  return k.bytes;
}

}  // namespace qc
