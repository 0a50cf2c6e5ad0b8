// What the qc_emulate_* calls keep from one call to the next. Each call
// makes a fresh group of virtual ranks, and fresh buffers for them (every
// rank's message slots, its schedule's steps, its working copies)
// page-fault in anew: ~20,000 faults per 128-rank x 1 Mi minmax ring on a
// 2-core machine, whose call went 0.216 s -> 0.200 s without them (issue 36). A communicator keeps its buffers
// across its calls (Scratch); an emulation's communicators end with their
// call, so their buffers wait here for the next group, up to
// QC_EMULATION_KEEP bytes. Only capacity is kept: a call sizes and fills
// every buffer it reads, as a communicator's second call does.
#pragma once

#include <cstddef>
#include <vector>

#include "core/collective_context.h"

namespace qc {

// One virtual rank's buffers (the Communicator fields of the same names).
struct RankBuffers {
  Scratch scratch;
  std::vector<float> work;
  std::vector<float> work_out;
  std::vector<float> residual_work;

  // The heap bytes they hold, about (allocator overhead aside).
  size_t bytes() const;
};

// Process-wide, behind one lock: calls on several threads take and give
// back in turn, and a call that finds nothing kept allocates its own.
class EmulationKeep {
 public:
  // Up to `n` ranks' buffers kept by an earlier call, moved out (a call
  // running at the same time starts from fresh ones).
  static std::vector<RankBuffers> take(size_t n);
  // Keeps `buffers` for the next call if they total at most `limit` bytes
  // and hold more than what is kept now; frees the loser outside the lock.
  static void give_back(std::vector<RankBuffers> buffers, size_t limit);
  // The bytes kept now (tests).
  static size_t kept_bytes();
};

}  // namespace qc
