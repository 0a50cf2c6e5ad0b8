// The stream-ordered allreduce algorithms (the *_enqueued.cpp files), as
// allreduce_enqueued (algorithm.h) runs them: each lays its payload slots
// out for rank r of n, then runs its steps on the slots so laid out and
// bound to the call's device payload memory. The layout is a function of
// the call's shape alone, so the memory reserved before the call is the
// memory the steps use.
#pragma once

#include <cstddef>

#include "core/algorithms/payload_slots.h"
#include "core/collective_context.h"

namespace qc {

struct EnqueuedAllreduce {
  const char* name;
  Status (*lay_out)(PayloadSlots* slots, size_t count, int n, int r, int group_size);
  Status (*run)(CollectiveContext& ctx, const PayloadSlots& slots, float* data, size_t count,
                int group_size);
};

extern const EnqueuedAllreduce kRingEnqueued;
extern const EnqueuedAllreduce kRecursiveDoublingEnqueued;
extern const EnqueuedAllreduce kSraEnqueued;
extern const EnqueuedAllreduce kTreeEnqueued;

}  // namespace qc
