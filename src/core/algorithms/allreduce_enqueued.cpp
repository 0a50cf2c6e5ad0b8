// allreduce_enqueued's dispatch: one layout function per algorithm serves
// both the memory reserved before the call and the steps (enqueued.h).
#include <string>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/enqueued.h"

namespace qc {
namespace {

Status enqueued_algorithm(qc_algorithm_t algorithm, const EnqueuedAllreduce** out) {
  switch (algorithm) {
    case QC_ALGO_RING: *out = &kRingEnqueued; return Status::ok();
    case QC_ALGO_RECURSIVE_DOUBLING: *out = &kRecursiveDoublingEnqueued; return Status::ok();
    case QC_ALGO_SRA: *out = &kSraEnqueued; return Status::ok();
    case QC_ALGO_TREE: *out = &kTreeEnqueued; return Status::ok();
    default:
      return internal_error("algorithm " + std::to_string(static_cast<int>(algorithm)) +
                            " has no stream-ordered form");
  }
}

}  // namespace

Status allreduce_enqueued_payload_bytes(qc_algorithm_t algorithm, const Codec& codec,
                                        size_t count, int ranks, int rank, int group_size,
                                        size_t* bytes) {
  const EnqueuedAllreduce* a = nullptr;
  QC_RETURN_IF_ERROR(enqueued_algorithm(algorithm, &a));
  PayloadSlots slots(payload_size_of(codec));
  QC_RETURN_IF_ERROR(a->lay_out(&slots, count, ranks, rank, group_size));
  *bytes = slots.total();
  return Status::ok();
}

Status allreduce_enqueued(CollectiveContext& ctx, qc_algorithm_t algorithm, float* data,
                          size_t count, int group_size) {
  const EnqueuedAllreduce* a = nullptr;
  QC_RETURN_IF_ERROR(enqueued_algorithm(algorithm, &a));
  PayloadSlots slots(payload_size_of(ctx));
  QC_RETURN_IF_ERROR(a->lay_out(&slots, count, ctx.size(), ctx.rank(), group_size));
  QC_RETURN_IF_ERROR(slots.bind(ctx, a->name));
  return a->run(ctx, slots, data, count, group_size);
}

}  // namespace qc
