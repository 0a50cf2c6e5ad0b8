// Ring allreduce (paper 000 Alg. 2): a reduce-scatter around the ring in
// n-1 steps, each hop decoding the incoming partial sum into the local block
// and re-encoding it for the next hop; then the owner of each reduced block
// encodes it once and those bytes travel the ring unchanged (allgather).
#include "core/algorithms/algorithm.h"
#include "core/algorithms/blob_list.h"
#include "core/algorithms/partition.h"

namespace qc {
namespace {
enum RingStep : uint32_t { kReduceScatter = 0x100, kAllgather = 0x200 };

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }
}  // namespace

Status allreduce_ring(CollectiveContext& ctx, float* data, size_t count) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  Message* msgs = ctx.messages(2);
  Message& out = msgs[0];
  Message& in = msgs[1];

  // Step s: send block r-s (own data at s=0, then the partial sum received
  // last step), receive block r-s-1 and add it to the local values.
  for (int s = 0; s < n - 1; ++s) {
    const Range send = block_range(count, n, mod(r - s, n));
    const Range recv = block_range(count, n, mod(r - s - 1, n));
    QC_RETURN_IF_ERROR(ctx.encode(data + send.begin, send.count, send.begin, &out));
    in.reserve_payload(ctx.max_encoded_size(recv.count));
    QC_RETURN_IF_ERROR(ctx.send_recv(right, &out, ctx.max_encoded_size(send.count), left, &in,
                                     kReduceScatter + s));
    QC_RETURN_IF_ERROR(ctx.decode_accumulate(in.payload(), in.payload_size(),
                                             data + recv.begin, recv.count));
  }

  // Rank r now holds the full sum of block r+1.
  BlockBlobs blobs(ctx.blob_storage(), n);
  const size_t owned = mod(r + 1, n);
  const Range own = block_range(count, n, owned);
  QC_RETURN_IF_ERROR(ctx.encode(data + own.begin, own.count, own.begin, &out));
  blobs.set(owned, out.payload(), out.payload_size());

  for (int s = 0; s < n - 1; ++s) {
    const size_t send_block = mod(r + 1 - s, n);
    const size_t recv_block = mod(r - s, n);
    blobs.pack(send_block, send_block + 1, &out);
    const size_t send_frame = BlockBlobs::pack_capacity(
        1, ctx.max_encoded_size(block_range(count, n, send_block).count));
    in.reserve_payload(BlockBlobs::pack_capacity(
        1, ctx.max_encoded_size(block_range(count, n, recv_block).count)));
    QC_RETURN_IF_ERROR(ctx.send_recv(right, &out, send_frame, left, &in, kAllgather + s));
    QC_RETURN_IF_ERROR(blobs.unpack(in));
    if (!blobs.has(recv_block)) return corrupt_data("ring allgather: expected block missing");
  }
  return blobs.decode_all(ctx, data, count);
}

}  // namespace qc
