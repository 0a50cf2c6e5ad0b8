// Ring allreduce, stream-ordered (paper 000 Alg. 2 as in ring.cpp): the same
// blocks, encodes, random keys and decodes, so the same result bit for bit,
// but every step is enqueued on the call's stream (kernels and the
// transport's device sends and receives) and nothing is awaited, so the call
// returns before the GPU has done its work, as an NCCL collective does.
//
// The payloads live in device memory, one slot per block: a block's slot
// holds what this rank last encoded or received of it. A step sends one slot
// and receives into another (never the same: the blocks differ), and the
// stream orders each slot's decode before its next encode, so n slots serve
// the reduce-scatter and the allgather. No envelope or block list travels:
// the agreement before the call fixed the codec and every block's size.
#include "core/algorithms/algorithm.h"
#include "core/algorithms/enqueued.h"
#include "core/algorithms/partition.h"

namespace qc {
namespace {

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

// Slot b: block b.
Status lay_out(PayloadSlots* slots, size_t count, int n, int /*r*/, int /*group_size*/) {
  size_t index = 0;
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    QC_RETURN_IF_ERROR(slots->add(block_range(count, static_cast<size_t>(n), b).count, &index));
  }
  return Status::ok();
}

Status run(CollectiveContext& ctx, const PayloadSlots& slots, float* data, size_t count,
           int /*group_size*/) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  auto range = [&](size_t b) { return block_range(count, static_cast<size_t>(n), b); };
  DeviceGroup group;
  auto exchange = [&](size_t send, size_t recv) {
    group.send(right, slots.at(send), slots.bytes(send));
    group.recv(left, slots.at(recv), slots.bytes(recv));
    return group.enqueue(ctx);
  };

  // Step s: encode block r-s (own data at s=0, then the partial sum of the
  // last step), send it right, receive block r-s-1 from the left and add it.
  for (int s = 0; s < n - 1; ++s) {
    const size_t send = mod(r - s, n);
    const size_t recv = mod(r - s - 1, n);
    QC_RETURN_IF_ERROR(ctx.encode_payload(data + range(send).begin, range(send).count,
                                          range(send).begin, slots.at(send)));
    QC_RETURN_IF_ERROR(exchange(send, recv));
    QC_RETURN_IF_ERROR(ctx.decode_payload(slots.at(recv), data + range(recv).begin,
                                          range(recv).count, /*accumulate=*/true));
  }

  // Rank r holds the full sum of block r+1: encoded once, its bytes then go
  // round the ring unchanged, and every rank decodes every block (its own
  // too), so all ranks end with the same values.
  const size_t owned = mod(r + 1, n);
  QC_RETURN_IF_ERROR(ctx.encode_payload(data + range(owned).begin, range(owned).count,
                                        range(owned).begin, slots.at(owned)));
  for (int s = 0; s < n - 1; ++s) {
    QC_RETURN_IF_ERROR(exchange(mod(r + 1 - s, n), mod(r - s, n)));
  }
  return decode_blocks_enqueued(ctx, slots, data, count, static_cast<size_t>(n));
}

}  // namespace

const EnqueuedAllreduce kRingEnqueued = {"ring", lay_out, run};

}  // namespace qc
