// Recursive doubling allreduce, stream-ordered (recursive_doubling.cpp's
// fold, intra-group reduce, halving, doubling, intra-group gather and
// unfold, with its blocks, encodes, random keys and decodes, so the same
// result bit for bit): each step a group on the call's stream, the kernels
// between them, nothing awaited.
//
// Slots, in this order:
//  - block b of the M core blocks at slot b: the owner's encoded block and
//    every copy the allgather steps bring; a step that passes on a range of
//    blocks sends their slots, one transfer each;
//  - the fold: the whole tensor an extra rank hands to its core rank;
//  - core ranks: for each group member, the partition this rank sends it,
//    then the one it receives from it; for each halving level the range it
//    gives, then the one it receives.
#include <vector>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/enqueued.h"
#include "core/algorithms/partition.h"

namespace qc {
namespace {

// recursive_doubling.cpp's shape of the group: G members per group, P
// groups, M = G * P core ranks and blocks.
struct Shape {
  int G = 1;
  int P = 1;
  int M = 1;
};

Shape shape_of(int n, int group_size) {
  Shape s;
  s.G = group_size < n ? group_size : n;
  while (s.G * s.P * 2 <= n) s.P *= 2;
  s.M = s.G * s.P;
  return s;
}

// One level of the halving across groups: the partner, the element ranges
// given and kept, and the blocks [lo, hi) held after it.
struct Halving {
  int partner = 0;
  Range give;
  Range keep;
  size_t lo = 0;
  size_t hi = 0;
};

// Core rank r's halving levels, in order.
std::vector<Halving> halving_levels(size_t count, const Shape& sh, int r) {
  const int l = r % sh.G;
  const int g = r / sh.G;
  const size_t nblocks = static_cast<size_t>(sh.M);
  size_t lo = static_cast<size_t>(l) * sh.P;
  size_t hi = lo + static_cast<size_t>(sh.P);
  std::vector<Halving> levels;
  for (int d = sh.P / 2; d >= 1; d /= 2) {
    Halving h;
    h.partner = (g ^ d) * sh.G + l;
    const size_t mid = lo + (hi - lo) / 2;
    const bool keep_upper = (g & d) != 0;
    h.give = keep_upper ? blocks_range(count, nblocks, lo, mid)
                        : blocks_range(count, nblocks, mid, hi);
    h.keep = keep_upper ? blocks_range(count, nblocks, mid, hi)
                        : blocks_range(count, nblocks, lo, mid);
    if (keep_upper) lo = mid; else hi = mid;
    h.lo = lo;
    h.hi = hi;
    levels.push_back(h);
  }
  return levels;
}

// Member `member`'s partition: blocks [member * P, (member + 1) * P).
Range partition(size_t count, const Shape& sh, int member) {
  return blocks_range(count, static_cast<size_t>(sh.M), static_cast<size_t>(member) * sh.P,
                      static_cast<size_t>(member + 1) * sh.P);
}

// The slot indices of lay_out's order.
struct SlotIndex {
  Shape sh;
  size_t fold() const { return static_cast<size_t>(sh.M); }
  size_t to_member(int m) const { return fold() + 1 + static_cast<size_t>(m); }
  size_t from_member(int m) const { return to_member(sh.G) + static_cast<size_t>(m); }
  size_t give(size_t level) const { return from_member(sh.G) + 2 * level; }
  size_t kept(size_t level) const { return give(level) + 1; }
};

Status lay_out(PayloadSlots* slots, size_t count, int n, int r, int group_size) {
  const Shape sh = shape_of(n, group_size);
  size_t index = 0;
  for (size_t b = 0; b < static_cast<size_t>(sh.M); ++b) {
    QC_RETURN_IF_ERROR(slots->add(block_range(count, static_cast<size_t>(sh.M), b).count, &index));
  }
  // Slots a rank never uses are empty (a slot of no bytes takes none), so
  // the indices stay those of SlotIndex.
  const bool folds = r >= sh.M || r + sh.M < n;
  QC_RETURN_IF_ERROR(slots->add(folds ? count : 0, &index));
  if (r >= sh.M) return Status::ok();
  const int l = r % sh.G;
  const Range part = partition(count, sh, l);
  for (int m = 0; m < sh.G; ++m) {
    QC_RETURN_IF_ERROR(slots->add(m == l ? 0 : partition(count, sh, m).count, &index));
  }
  for (int m = 0; m < sh.G; ++m) QC_RETURN_IF_ERROR(slots->add(m == l ? 0 : part.count, &index));
  for (const Halving& h : halving_levels(count, sh, r)) {
    QC_RETURN_IF_ERROR(slots->add(h.give.count, &index));
    QC_RETURN_IF_ERROR(slots->add(h.keep.count, &index));
  }
  return Status::ok();
}

Status run(CollectiveContext& ctx, const PayloadSlots& slots, float* data, size_t count,
           int group_size) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const Shape sh = shape_of(n, group_size);
  const SlotIndex at{sh};
  const size_t nblocks = static_cast<size_t>(sh.M);
  DeviceGroup group;

  // 0. An extra rank hands its data to a core rank and gets the blocks back.
  if (r >= sh.M) {
    QC_RETURN_IF_ERROR(ctx.encode_payload(data, count, 0, slots.at(at.fold())));
    group.send(r - sh.M, slots.at(at.fold()), slots.bytes(at.fold()));
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    group.recv_slots(r - sh.M, slots, 0, nblocks);
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    return decode_blocks_enqueued(ctx, slots, data, count, nblocks);
  }
  const bool has_extra = r + sh.M < n;
  if (has_extra) {
    group.recv(r + sh.M, slots.at(at.fold()), slots.bytes(at.fold()));
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    QC_RETURN_IF_ERROR(ctx.decode_payload(slots.at(at.fold()), data, count, /*accumulate=*/true));
  }

  const int l = r % sh.G;
  const int g = r / sh.G;
  const int group_base = g * sh.G;

  // 1. Intra-group reduce of partition l, summed in member order.
  const Range part = partition(count, sh, l);
  if (sh.G > 1) {
    for (int k = 1; k < sh.G; ++k) {
      const int peer = (l + k) % sh.G;
      const Range pr = partition(count, sh, peer);
      QC_RETURN_IF_ERROR(
          ctx.encode_payload(data + pr.begin, pr.count, pr.begin, slots.at(at.to_member(peer))));
      group.send(group_base + peer, slots.at(at.to_member(peer)), slots.bytes(at.to_member(peer)));
    }
    for (int k = 1; k < sh.G; ++k) {
      const int peer = (l - k + sh.G) % sh.G;
      group.recv(group_base + peer, slots.at(at.from_member(peer)),
                 slots.bytes(at.from_member(peer)));
    }
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    for (int peer = 0; peer < sh.G; ++peer) {
      if (peer == l) continue;
      QC_RETURN_IF_ERROR(ctx.decode_payload(slots.at(at.from_member(peer)), data + part.begin,
                                            part.count, /*accumulate=*/true));
    }
  }

  // 2. Recursive halving of partition l across the P groups.
  size_t lo = static_cast<size_t>(l) * sh.P;
  size_t hi = lo + static_cast<size_t>(sh.P);
  const std::vector<Halving> levels = halving_levels(count, sh, r);
  for (size_t i = 0; i < levels.size(); ++i) {
    const Halving& h = levels[i];
    QC_RETURN_IF_ERROR(
        ctx.encode_payload(data + h.give.begin, h.give.count, h.give.begin, slots.at(at.give(i))));
    group.send(h.partner, slots.at(at.give(i)), slots.bytes(at.give(i)));
    group.recv(h.partner, slots.at(at.kept(i)), slots.bytes(at.kept(i)));
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    QC_RETURN_IF_ERROR(ctx.decode_payload(slots.at(at.kept(i)), data + h.keep.begin, h.keep.count,
                                          /*accumulate=*/true));
    lo = h.lo;
    hi = h.hi;
  }

  // This rank owns block lo = l*P + g, fully reduced: encoded once.
  const Range own = block_range(count, nblocks, lo);
  QC_RETURN_IF_ERROR(ctx.encode_payload(data + own.begin, own.count, own.begin, slots.at(lo)));

  // 3a. Recursive doubling across groups: the held blocks double each level.
  for (int d = 1; d < sh.P; d *= 2) {
    const int partner = (g ^ d) * sh.G + l;
    const size_t held = hi - lo;
    const size_t their_lo = (g & d) != 0 ? lo - held : hi;
    group.send_slots(partner, slots, lo, hi);
    group.recv_slots(partner, slots, their_lo, their_lo + held);
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
    if ((g & d) != 0) lo -= held; else hi += held;
  }

  // 3b. Within the group: partition l to every other member, theirs back.
  if (sh.G > 1) {
    for (int k = 1; k < sh.G; ++k) group.send_slots(group_base + (l + k) % sh.G, slots, lo, hi);
    for (int k = 1; k < sh.G; ++k) {
      const int peer = (l - k + sh.G) % sh.G;
      group.recv_slots(group_base + peer, slots, static_cast<size_t>(peer) * sh.P,
                       static_cast<size_t>(peer + 1) * sh.P);
    }
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
  }

  // 3c. Back to the extra rank folded into this one.
  if (has_extra) {
    group.send_slots(r + sh.M, slots, 0, nblocks);
    QC_RETURN_IF_ERROR(group.enqueue(ctx));
  }
  return decode_blocks_enqueued(ctx, slots, data, count, nblocks);
}

}  // namespace

const EnqueuedAllreduce kRecursiveDoublingEnqueued = {"recursive doubling", lay_out, run};

}  // namespace qc
