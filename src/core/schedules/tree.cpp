// Tree allreduce: binomial reduce to rank 0 (each parent decodes its
// children's partial sums into its own and re-encodes the total for its
// parent), then a binomial broadcast of the root's encoded result, forwarded
// unchanged.
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum TreeTag : uint32_t { kReduce = 0x300, kBroadcast = 0x400 };
}

void build_allreduce_tree(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const Span all = output(0, shape.count);
  ScheduleBuilder s(schedule);
  // Reduced in place, in the output.
  s.copy(output(0, shape.count), input(0, shape.count));
  // Slot 0: what this rank sends up the tree, later the root's encoded
  // result (the send is done before it arrives). Slot 1: a child's partial
  // sum, for ranks with children (an even rank with a right neighbour).
  const size_t up = s.slot(shape.count);
  const size_t child_sum = r % 2 == 0 && r + 1 < n ? s.slot(shape.count) : up;

  // Reduce: at distance `mask`, ranks with that bit set send to rank - mask.
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (r & mask) {
      s.encode(all, up);
      s.send(r - mask, up, kReduce + static_cast<uint32_t>(mask));
      s.wait();
      break;
    }
    if (r + mask < n) {
      s.recv(r + mask, child_sum, kReduce + static_cast<uint32_t>(mask));
      s.wait();
      s.decode_add(child_sum, all);
    }
  }

  // Broadcast: a non-root rank receives from the rank it sent to, then
  // forwards to its own children at the smaller distances, all at once.
  if (r == 0) {
    s.encode(all, up);
  } else {
    s.recv(r - mask, up, kBroadcast);
    s.wait();
  }
  // For the root `mask` ended as the first power of two >= n.
  for (int child = mask >> 1; child >= 1; child >>= 1) {
    if (r + child < n) s.send(r + child, up, kBroadcast);
  }
  s.wait();
  s.decode(up, all);
}

}  // namespace qc
