// Tree allreduce, stream-ordered (tree.cpp's binomial reduce and broadcast,
// its encodes, random keys and decodes, so the same result bit for bit):
// each step a group on the call's stream, in tree.cpp's order, with the
// kernels between them, and nothing awaited. A parent's broadcast to its
// children is one group.
//
// Slots: 0 for what this rank sends up the tree and then for the root's
// encoded result (the stream has sent the one before the other arrives),
// 1 for a child's partial sum.
#include "core/algorithms/algorithm.h"
#include "core/algorithms/enqueued.h"

namespace qc {
namespace {

constexpr size_t kOut = 0;
constexpr size_t kIn = 1;

Status lay_out(PayloadSlots* slots, size_t count, int n, int r, int /*group_size*/) {
  size_t index = 0;
  QC_RETURN_IF_ERROR(slots->add(count, &index));
  // Only an even rank with a right neighbour has children (rank r+1 first).
  const bool has_children = r % 2 == 0 && r + 1 < n;
  return slots->add(has_children ? count : 0, &index);
}

Status run(CollectiveContext& ctx, const PayloadSlots& slots, float* data, size_t count,
           int /*group_size*/) {
  const int n = ctx.size();
  const int r = ctx.rank();
  DeviceGroup group;

  // Reduce: at distance `mask`, ranks with that bit set send to rank - mask.
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (r & mask) {
      QC_RETURN_IF_ERROR(ctx.encode_payload(data, count, 0, slots.at(kOut)));
      group.send(r - mask, slots.at(kOut), slots.bytes(kOut));
      QC_RETURN_IF_ERROR(group.enqueue(ctx));
      break;
    }
    if (r + mask < n) {
      group.recv(r + mask, slots.at(kIn), slots.bytes(kIn));
      QC_RETURN_IF_ERROR(group.enqueue(ctx));
      QC_RETURN_IF_ERROR(ctx.decode_payload(slots.at(kIn), data, count, /*accumulate=*/true));
    }
  }

  // Broadcast of the root's encoded result, forwarded unchanged.
  if (r == 0) {
    QC_RETURN_IF_ERROR(ctx.encode_payload(data, count, 0, slots.at(kOut)));
  } else {
    group.recv(r - mask, slots.at(kOut), slots.bytes(kOut));
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
  }
  // To every child in one group: no child's receive waits for another's.
  for (int child = mask >> 1; child >= 1; child >>= 1) {
    if (r + child < n) group.send(r + child, slots.at(kOut), slots.bytes(kOut));
  }
  QC_RETURN_IF_ERROR(group.enqueue(ctx));
  return ctx.decode_payload(slots.at(kOut), data, count, /*accumulate=*/false);
}

}  // namespace

const EnqueuedAllreduce kTreeEnqueued = {"tree", lay_out, run};

}  // namespace qc
