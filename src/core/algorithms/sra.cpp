// Scatter-reduce-allgather (papers 003, 004): every rank encodes block j of
// its data once and sends it to rank j; rank j adds all contributions in rank
// order in float32, encodes the sum once and sends those bytes to everyone.
// Each value is requantized at most twice, whatever the rank count.
#include <memory>
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/blob_list.h"
#include "core/algorithms/partition.h"
#include "core/algorithms/sra_sum.h"

namespace qc {
namespace {
enum SraStep : uint32_t { kScatter = 0x500, kAllgather = 0x600 };
}

Status allreduce_sra(CollectiveContext& ctx, float* data, size_t count) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const Range mine = block_range(count, n, r);

  // Scatter: one encoded block to every peer, one from every peer.
  Message* msgs = ctx.messages(2 * n + 1);
  Message* out = msgs;
  Message* in = msgs + n;
  Message& result = msgs[2 * n];
  std::vector<Request> reqs;
  std::vector<Message*> recv_msgs;
  reqs.reserve(2 * n);
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;  // staggered so peers are not all hit at once
    const Range b = block_range(count, n, to);
    QC_RETURN_IF_ERROR(ctx.encode(data + b.begin, b.count, b.begin, &out[to]));
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(ctx.post_send(to, kScatter, &out[to], ctx.max_encoded_size(b.count),
                                     &reqs.back()));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    in[from].reserve_payload(ctx.max_encoded_size(mine.count));
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(ctx.post_recv(from, kScatter, &in[from], &reqs.back()));
    recv_msgs.push_back(&in[from]);
  }
  QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), reqs.size(), recv_msgs.data(), recv_msgs.size()));

  float* sum = nullptr;
  QC_RETURN_IF_ERROR(sum_in_rank_order(
      ctx, data + mine.begin, mine.count,
      [&](int from, float* acc) {
        return ctx.decode_accumulate(in[from].payload(), in[from].payload_size(), acc, mine.count);
      },
      &sum));

  // Allgather: the owner's encoded sum, forwarded unchanged.
  BlockBlobs blobs(ctx.blob_storage(), n);
  QC_RETURN_IF_ERROR(ctx.encode(sum, mine.count, mine.begin, &result));
  blobs.set(r, result.payload(), result.payload_size());
  blobs.pack(r, r + 1, &result);
  const size_t result_frame = BlockBlobs::pack_capacity(1, ctx.max_encoded_size(mine.count));
  reqs.clear();
  recv_msgs.clear();
  for (int k = 1; k < n; ++k) {
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(
        ctx.post_send((r + k) % n, kAllgather, &result, result_frame, &reqs.back()));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    in[from].reserve_payload(BlockBlobs::pack_capacity(
        1, ctx.max_encoded_size(block_range(count, n, from).count)));
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(ctx.post_recv(from, kAllgather, &in[from], &reqs.back()));
    recv_msgs.push_back(&in[from]);
  }
  QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), reqs.size(), recv_msgs.data(), recv_msgs.size()));
  for (int from = 0; from < n; ++from) {
    if (from == r) continue;
    QC_RETURN_IF_ERROR(blobs.unpack(in[from]));
    if (!blobs.has(from)) return corrupt_data("SRA allgather: a peer sent the wrong block");
  }
  return blobs.decode_all(ctx, data, count);
}

}  // namespace qc
