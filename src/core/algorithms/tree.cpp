// Tree allreduce: binomial reduce to rank 0 (each parent decodes its
// children's partial sums into its own and re-encodes the total for its
// parent), then a binomial broadcast of the root's encoded result, forwarded
// unchanged.
#include "core/algorithms/algorithm.h"

namespace qc {
namespace {
enum TreeStep : uint32_t { kReduce = 0x300, kBroadcast = 0x400 };
}

Status allreduce_tree(CollectiveContext& ctx, float* data, size_t count) {
  const int n = ctx.size();
  const int r = ctx.rank();
  Message* msgs = ctx.messages(3);
  Message& out = msgs[0];
  Message& in = msgs[1];

  // Reduce: at distance `mask`, ranks with that bit set send to rank - mask.
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (r & mask) {
      QC_RETURN_IF_ERROR(ctx.encode(data, count, 0, &out));
      QC_RETURN_IF_ERROR(ctx.send(r - mask, kReduce + static_cast<uint32_t>(mask), &out,
                                  ctx.max_encoded_size(count)));
      break;
    }
    if (r + mask < n) {
      in.reserve_payload(ctx.max_encoded_size(count));
      QC_RETURN_IF_ERROR(ctx.recv(r + mask, kReduce + static_cast<uint32_t>(mask), &in));
      QC_RETURN_IF_ERROR(ctx.decode_accumulate(in.payload(), in.payload_size(), data, count));
    }
  }

  // Broadcast: a non-root rank receives from the rank it sent to, then
  // forwards to its own children at the smaller distances.
  Message& result = msgs[2];
  if (r == 0) {
    QC_RETURN_IF_ERROR(ctx.encode(data, count, 0, &result));
  } else {
    result.reserve_payload(ctx.max_encoded_size(count));
    QC_RETURN_IF_ERROR(ctx.recv(r - mask, kBroadcast, &result));
  }
  // For the root `mask` ended as the first power of two >= n.
  for (int child = mask >> 1; child >= 1; child >>= 1) {
    if (r + child < n) QC_RETURN_IF_ERROR(ctx.send(r + child, kBroadcast, &result,
                                                     ctx.max_encoded_size(count)));
  }
  return ctx.decode(result.payload(), result.payload_size(), data, count);
}

}  // namespace qc
