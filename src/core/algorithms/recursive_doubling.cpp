// Recursive doubling allreduce (paper 000 Alg. 3-5), for any rank count.
//
//  Core: G = min(group_size, n) ranks per group, P = the largest power of two
//  with G*P <= n groups, M = G*P core ranks. Core rank r is member l = r % G
//  of group g = r / G. The data is cut into M blocks; block l*P + g ends up
//  owned by member l of group g.
//  0. Fold: each extra rank M+i (i < n-M) sends its data to rank i, which
//     adds it to its own.
//  1. Intra-group one-shot reduce (Alg. 5): member l receives partition l
//     (blocks l*P .. l*P+P-1) from every other member of its group.
//  2. Recursive halving across groups (Alg. 4): members l of all groups
//     halve partition l log2(P) times, exchanging the half they give up.
//  3. Allgather of the owners' encoded blocks, bytes unchanged: recursive
//     doubling across groups, then within the group, then back to the
//     extra ranks.
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/blob_list.h"
#include "core/algorithms/partition.h"

namespace qc {
namespace {
enum RdStep : uint32_t {
  kFold = 0x800,
  kIntraReduce = 0x900,
  kHalving = 0xa00,
  kDoubling = 0xb00,
  kIntraGather = 0xc00,
  kUnfold = 0xd00,
};
}  // namespace

Status allreduce_recursive_doubling(CollectiveContext& ctx, float* data, size_t count,
                                    int group_size) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const int G = group_size < n ? group_size : n;
  int P = 1;
  while (G * P * 2 <= n) P *= 2;
  const int M = G * P;
  const size_t nblocks = static_cast<size_t>(M);
  BlockBlobs blobs(ctx.blob_storage(), nblocks);
  // out, in, then G outgoing and G incoming for the intra-group steps.
  Message* msgs = ctx.messages(2 + 2 * static_cast<size_t>(G));
  Message& out = msgs[0];
  Message& in = msgs[1];
  Message* outs = msgs + 2;
  Message* ins = msgs + 2 + G;

  // 0. Extra ranks hand their data to a core rank and wait for the result.
  if (r >= M) {
    QC_RETURN_IF_ERROR(ctx.encode(data, count, 0, &out));
    QC_RETURN_IF_ERROR(ctx.send(r - M, kFold, &out, ctx.max_encoded_size(count)));
    in.reserve_payload(BlockBlobs::pack_capacity(
        nblocks, ctx.max_encoded_size(block_range(count, nblocks, 0).count)));
    QC_RETURN_IF_ERROR(ctx.recv(r - M, kUnfold, &in));
    QC_RETURN_IF_ERROR(blobs.unpack(in));
    // A damaged block list may name the wrong blocks: that is corrupt data,
    // not an internal error (decode_all's check is for the library's bugs).
    for (size_t b = 0; b < nblocks; ++b)
      if (!blobs.has(b)) return corrupt_data("recursive doubling: the unfold message lacks a block");
    return blobs.decode_all(ctx, data, count);
  }
  const bool has_extra = r + M < n;
  if (has_extra) {
    in.reserve_payload(ctx.max_encoded_size(count));
    QC_RETURN_IF_ERROR(ctx.recv(r + M, kFold, &in));
    QC_RETURN_IF_ERROR(ctx.decode_accumulate(in.payload(), in.payload_size(), data, count));
  }

  const int l = r % G;
  const int g = r / G;
  const int group_base = g * G;

  // 1. Intra-group reduce of partition l.
  const Range part = blocks_range(count, nblocks, static_cast<size_t>(l) * P,
                                  static_cast<size_t>(l + 1) * P);
  if (G > 1) {
    std::vector<Request> reqs;
    std::vector<Message*> recv_msgs;
    reqs.reserve(2 * G);
    for (int k = 1; k < G; ++k) {
      const int peer = (l + k) % G;
      const Range pr = blocks_range(count, nblocks, static_cast<size_t>(peer) * P,
                                    static_cast<size_t>(peer + 1) * P);
      QC_RETURN_IF_ERROR(ctx.encode(data + pr.begin, pr.count, pr.begin, &outs[peer]));
      reqs.emplace_back();
      QC_RETURN_IF_ERROR(ctx.post_send(group_base + peer, kIntraReduce, &outs[peer],
                                       ctx.max_encoded_size(pr.count), &reqs.back()));
    }
    for (int k = 1; k < G; ++k) {
      const int peer = (l - k + G) % G;
      ins[peer].reserve_payload(ctx.max_encoded_size(part.count));
      reqs.emplace_back();
      QC_RETURN_IF_ERROR(ctx.post_recv(group_base + peer, kIntraReduce, &ins[peer], &reqs.back()));
      recv_msgs.push_back(&ins[peer]);
    }
    QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), reqs.size(), recv_msgs.data(), recv_msgs.size()));
    for (int peer = 0; peer < G; ++peer) {  // member order: independent of arrival
      if (peer == l) continue;
      QC_RETURN_IF_ERROR(ctx.decode_accumulate(ins[peer].payload(), ins[peer].payload_size(),
                                               data + part.begin, part.count));
    }
  }

  // 2. Recursive halving of partition l across the P groups.
  size_t lo = static_cast<size_t>(l) * P;
  size_t hi = lo + P;
  uint32_t level = 0;
  for (int d = P / 2; d >= 1; d /= 2, ++level) {
    const int partner = (g ^ d) * G + l;
    const size_t mid = lo + (hi - lo) / 2;
    const bool keep_upper = (g & d) != 0;
    const Range give = keep_upper ? blocks_range(count, nblocks, lo, mid)
                                  : blocks_range(count, nblocks, mid, hi);
    const Range keep = keep_upper ? blocks_range(count, nblocks, mid, hi)
                                  : blocks_range(count, nblocks, lo, mid);
    QC_RETURN_IF_ERROR(ctx.encode(data + give.begin, give.count, give.begin, &out));
    in.reserve_payload(ctx.max_encoded_size(keep.count));
    QC_RETURN_IF_ERROR(ctx.send_recv(partner, &out, ctx.max_encoded_size(give.count), partner, &in,
                                     kHalving + level));
    QC_RETURN_IF_ERROR(ctx.decode_accumulate(in.payload(), in.payload_size(),
                                             data + keep.begin, keep.count));
    if (keep_upper) lo = mid; else hi = mid;
  }

  // This rank now owns block lo = l*P + g, fully reduced: encode it once.
  const Range own = block_range(count, nblocks, lo);
  QC_RETURN_IF_ERROR(ctx.encode(data + own.begin, own.count, own.begin, &out));
  blobs.set(lo, out.payload(), out.payload_size());
  const size_t max_blob = ctx.max_encoded_size(block_range(count, nblocks, 0).count);

  // 3a. Recursive doubling across groups: the held range doubles each level.
  level = 0;
  for (int d = 1; d < P; d *= 2, ++level) {
    const int partner = (g ^ d) * G + l;
    blobs.pack(lo, hi, &out);
    const size_t held = hi - lo;
    in.reserve_payload(BlockBlobs::pack_capacity(held, max_blob));
    QC_RETURN_IF_ERROR(ctx.send_recv(partner, &out, BlockBlobs::pack_capacity(held, max_blob), partner,
                                     &in, kDoubling + level));
    QC_RETURN_IF_ERROR(blobs.unpack(in));
    if ((g & d) != 0) lo -= held; else hi += held;
    for (size_t b = lo; b < hi; ++b)
      if (!blobs.has(b)) return corrupt_data("recursive doubling: a partner sent the wrong blocks");
  }

  // 3b. Within the group: partition l to every other member.
  if (G > 1) {
    std::vector<Request> reqs;
    std::vector<Message*> recv_msgs;
    blobs.pack(lo, hi, &out);
    for (int k = 1; k < G; ++k) {
      reqs.emplace_back();
      QC_RETURN_IF_ERROR(ctx.post_send(group_base + (l + k) % G, kIntraGather, &out,
                                       BlockBlobs::pack_capacity(P, max_blob), &reqs.back()));
    }
    for (int k = 1; k < G; ++k) {
      const int peer = (l - k + G) % G;
      ins[peer].reserve_payload(BlockBlobs::pack_capacity(P, max_blob));
      reqs.emplace_back();
      QC_RETURN_IF_ERROR(ctx.post_recv(group_base + peer, kIntraGather, &ins[peer], &reqs.back()));
      recv_msgs.push_back(&ins[peer]);
    }
    QC_RETURN_IF_ERROR(ctx.wait(reqs.data(), reqs.size(), recv_msgs.data(), recv_msgs.size()));
    for (Message* m : recv_msgs) QC_RETURN_IF_ERROR(blobs.unpack(*m));
  }
  for (size_t b = 0; b < nblocks; ++b)
    if (!blobs.has(b)) return corrupt_data("recursive doubling: a block never arrived");

  // 3c. Back to the extra rank folded into this one.
  if (has_extra) {
    blobs.pack(0, nblocks, &out);
    QC_RETURN_IF_ERROR(ctx.send(r + M, kUnfold, &out, BlockBlobs::pack_capacity(nblocks, max_blob)));
  }
  return blobs.decode_all(ctx, data, count);
}

}  // namespace qc
