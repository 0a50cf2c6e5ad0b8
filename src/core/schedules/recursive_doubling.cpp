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
#include "core/schedules/partition.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum RdTag : uint32_t {
  kFold = 0x800,
  kIntraReduce = 0x900,
  kHalving = 0xa00,
  kDoubling = 0xb00,
  kIntraGather = 0xc00,
  kUnfold = 0xd00,
};
}  // namespace

void build_allreduce_recursive_doubling(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t count = shape.count;
  const int G = shape.group_size < n ? shape.group_size : n;
  int P = 1;
  while (G * P * 2 <= n) P *= 2;
  const int M = G * P;
  const size_t nblocks = static_cast<size_t>(M);
  auto blocks = [&](size_t first, size_t last) {
    const Range range = blocks_range(count, nblocks, first, last);
    return output(range.begin, range.count);
  };
  const Span all = output(0, count);
  ScheduleBuilder s(schedule);
  // Reduced in place, in the output.
  s.copy(output(0, shape.count), input(0, shape.count));
  // Slot b: block b of the M core blocks, its owner's encoded bytes.
  s.block_slots(count, nblocks);

  // 0. Extra ranks hand their data to a core rank and get the blocks back.
  if (r >= M) {
    const size_t fold = s.slot(count);
    s.encode(all, fold);
    s.send(r - M, fold, kFold);
    s.wait();
    s.recv_blocks(r - M, 0, nblocks, kUnfold);
    s.wait();
    for (size_t b = 0; b < nblocks; ++b) s.decode(b, blocks(b, b + 1));
    return;
  }
  const bool has_extra = r + M < n;
  if (has_extra) {
    const size_t fold = s.slot(count);
    s.recv(r + M, fold, kFold);
    s.wait();
    s.decode_add(fold, all);
  }

  const int l = r % G;
  const int g = r / G;
  const int group_base = g * G;
  auto partition = [&](int member) {
    return blocks(static_cast<size_t>(member) * P, static_cast<size_t>(member + 1) * P);
  };

  // 1. Intra-group reduce of partition l, summed in member order.
  const Span part = partition(l);
  if (G > 1) {
    std::vector<size_t> to_member(static_cast<size_t>(G)), from_member(static_cast<size_t>(G));
    for (int m = 0; m < G; ++m) {
      if (m == l) continue;
      to_member[static_cast<size_t>(m)] = s.slot(partition(m).count);
      from_member[static_cast<size_t>(m)] = s.slot(part.count);
    }
    for (int k = 1; k < G; ++k) {
      const int peer = (l + k) % G;
      s.encode(partition(peer), to_member[static_cast<size_t>(peer)]);
      s.send(group_base + peer, to_member[static_cast<size_t>(peer)], kIntraReduce);
    }
    for (int k = 1; k < G; ++k) {
      const int peer = (l - k + G) % G;
      s.recv(group_base + peer, from_member[static_cast<size_t>(peer)], kIntraReduce);
    }
    s.wait();
    for (int peer = 0; peer < G; ++peer) {
      if (peer != l) s.decode_add(from_member[static_cast<size_t>(peer)], part);
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
    const Span give = keep_upper ? blocks(lo, mid) : blocks(mid, hi);
    const Span keep = keep_upper ? blocks(mid, hi) : blocks(lo, mid);
    const size_t given = s.slot(give.count);
    const size_t kept = s.slot(keep.count);
    s.encode(give, given);
    s.send(partner, given, kHalving + level);
    s.recv(partner, kept, kHalving + level);
    s.wait();
    s.decode_add(kept, keep);
    if (keep_upper) lo = mid; else hi = mid;
  }

  // This rank now owns block lo = l*P + g, fully reduced: encoded once.
  s.encode(blocks(lo, lo + 1), lo);

  // 3a. Recursive doubling across groups: the held blocks double each level.
  level = 0;
  for (int d = 1; d < P; d *= 2, ++level) {
    const int partner = (g ^ d) * G + l;
    const size_t held = hi - lo;
    const size_t their_lo = (g & d) != 0 ? lo - held : hi;
    s.send_blocks(partner, lo, hi, kDoubling + level);
    s.recv_blocks(partner, their_lo, their_lo + held, kDoubling + level);
    s.wait();
    if ((g & d) != 0) lo -= held; else hi += held;
  }

  // 3b. Within the group: partition l to every other member, theirs back.
  if (G > 1) {
    for (int k = 1; k < G; ++k) s.send_blocks(group_base + (l + k) % G, lo, hi, kIntraGather);
    for (int k = 1; k < G; ++k) {
      const int peer = (l - k + G) % G;
      s.recv_blocks(group_base + peer, static_cast<size_t>(peer) * P,
                    static_cast<size_t>(peer + 1) * P, kIntraGather);
    }
    s.wait();
  }

  // 3c. Back to the extra rank folded into this one.
  if (has_extra) {
    s.send_blocks(r + M, 0, nblocks, kUnfold);
    s.wait();
  }
  for (size_t b = 0; b < nblocks; ++b) s.decode(b, blocks(b, b + 1));
}

}  // namespace qc
