// Alltoall (paper 000 3.3): each rank encodes the block for each peer once;
// the peer decodes it. A rank's block to itself takes the same encode/decode
// path, so every block of the result is treated alike.
#include <vector>

#include "core/algorithms/algorithm.h"

namespace qc {
namespace {
enum AlltoallStep : uint32_t { kExchange = 0x700 };
}

Status alltoall_exchange(CollectiveContext& ctx, Message* out, Message* in, size_t frame) {
  const int n = ctx.size();
  const int r = ctx.rank();
  std::vector<Request> reqs;
  std::vector<Message*> recv_msgs;
  reqs.reserve(2 * n);
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(ctx.post_send(to, kExchange, &out[to], frame, &reqs.back()));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    in[from].reserve_payload(frame);
    reqs.emplace_back();
    QC_RETURN_IF_ERROR(ctx.post_recv(from, kExchange, &in[from], &reqs.back()));
    recv_msgs.push_back(&in[from]);
  }
  return ctx.wait(reqs.data(), reqs.size(), recv_msgs.data(), recv_msgs.size());
}

Status alltoall_pairwise(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank) {
  const int n = ctx.size();
  const int r = ctx.rank();
  Message* msgs = ctx.messages(2 * n);
  Message* out = msgs;
  Message* in = msgs + n;
  for (int k = 0; k < n; ++k) {
    const int to = (r + k) % n;
    QC_RETURN_IF_ERROR(ctx.encode(send + to * count_per_rank, count_per_rank,
                                  to * count_per_rank, &out[to]));
  }
  QC_RETURN_IF_ERROR(alltoall_exchange(ctx, out, in, ctx.max_encoded_size(count_per_rank)));
  for (int from = 0; from < n; ++from) {
    const Message& m = from == r ? out[r] : in[from];
    QC_RETURN_IF_ERROR(
        ctx.decode(m.payload(), m.payload_size(), recv + from * count_per_rank, count_per_rank));
  }
  return Status::ok();
}

}  // namespace qc
