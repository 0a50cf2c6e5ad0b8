// Scatter-reduce-allgather, stream-ordered (sra.cpp's blocks, encodes,
// random keys, rank-order sum and decodes, so the same result bit for bit):
// two groups on the call's stream, the scatter and the allgather, with the
// kernels between them, and nothing awaited.
//
// Slots: block j's payload at slot j, which holds the block this rank
// scatters to rank j and later the allgather's copy of j's encoded sum (the
// stream runs the scatter group before the allgather overwrites it), and
// slot n + i for the contribution to this rank's block from rank i.
#include "core/algorithms/algorithm.h"
#include "core/algorithms/enqueued.h"
#include "core/algorithms/partition.h"
#include "core/algorithms/sra_sum.h"

namespace qc {
namespace {

Status lay_out(PayloadSlots* slots, size_t count, int n, int r, int /*group_size*/) {
  const size_t blocks = static_cast<size_t>(n);
  size_t index = 0;
  for (size_t b = 0; b < blocks; ++b) {
    QC_RETURN_IF_ERROR(slots->add(block_range(count, blocks, b).count, &index));
  }
  const size_t mine = block_range(count, blocks, static_cast<size_t>(r)).count;
  for (size_t from = 0; from < blocks; ++from) QC_RETURN_IF_ERROR(slots->add(mine, &index));
  return Status::ok();
}

Status run(CollectiveContext& ctx, const PayloadSlots& slots, float* data, size_t count,
           int /*group_size*/) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t blocks = static_cast<size_t>(n);
  const Range mine = block_range(count, blocks, static_cast<size_t>(r));
  auto incoming = [&](int from) { return blocks + static_cast<size_t>(from); };
  DeviceGroup group;

  // Scatter: block j of this rank's data to rank j, staggered as in sra.cpp.
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    const Range b = block_range(count, blocks, static_cast<size_t>(to));
    QC_RETURN_IF_ERROR(ctx.encode_payload(data + b.begin, b.count, b.begin,
                                          slots.at(static_cast<size_t>(to))));
    group.send(to, slots.at(static_cast<size_t>(to)), slots.bytes(static_cast<size_t>(to)));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    group.recv(from, slots.at(incoming(from)), slots.bytes(incoming(from)));
  }
  QC_RETURN_IF_ERROR(group.enqueue(ctx));

  float* sum = nullptr;
  QC_RETURN_IF_ERROR(sum_in_rank_order(
      ctx, data + mine.begin, mine.count,
      [&](int from, float* acc) {
        return ctx.decode_payload(slots.at(incoming(from)), acc, mine.count, /*accumulate=*/true);
      },
      &sum));

  // Allgather: the owner's encoded sum to everyone, bytes unchanged.
  const size_t own = static_cast<size_t>(r);
  QC_RETURN_IF_ERROR(ctx.encode_payload(sum, mine.count, mine.begin, slots.at(own)));
  for (int k = 1; k < n; ++k) group.send((r + k) % n, slots.at(own), slots.bytes(own));
  for (int k = 1; k < n; ++k) {
    const size_t from = static_cast<size_t>((r - k + n) % n);
    group.recv(static_cast<int>(from), slots.at(from), slots.bytes(from));
  }
  QC_RETURN_IF_ERROR(group.enqueue(ctx));
  return decode_blocks_enqueued(ctx, slots, data, count, blocks);
}

}  // namespace

const EnqueuedAllreduce kSraEnqueued = {"SRA", lay_out, run};

}  // namespace qc
