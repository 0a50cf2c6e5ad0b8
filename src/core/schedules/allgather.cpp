// Allgather: rank r's input (shape.count values) becomes block r of every
// rank's output. The owner encodes its block once (at element offset 0 of
// its input, which keys its random bits and residuals) and those bytes
// travel unchanged, forwarded as block lists: every rank decodes the same
// bytes, the owner its own block too, so every replica is bit-identical.
#include "core/schedules/pieces.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum AllgatherTag : uint32_t {
  kDirect = 0x1300,
  kRing = 0x1400,
  kDoubling = 0x1500,
  kDirectPiece = 0xa0000,  // + piece
};

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

// Slot b holds block b's encoded bytes; the own one encoded here. The
// block list names blocks by slot, so slot numbers are alike on every rank.
void encode_own(const ScheduleShape& shape, ScheduleBuilder& s) {
  for (int b = 0; b < shape.ranks; ++b) s.slot(shape.count);
  s.mark_block_slots();
  if (shape.count > 0) s.encode(input(0, shape.count), static_cast<size_t>(shape.rank));
}

void decode_all(const ScheduleShape& shape, ScheduleBuilder& s) {
  if (shape.count == 0) return;
  for (int b = 0; b < shape.ranks; ++b) {
    s.decode(static_cast<size_t>(b),
             output(static_cast<size_t>(b) * shape.count, shape.count));
  }
}

}  // namespace

bool allgather_recursive_doubling_fits(int ranks) { return ranks > 0 && (ranks & (ranks - 1)) == 0; }

// Direct: the owner sends its block to every peer (staggered), cut into
// pieces (pieces.h; one piece unless shape.chunk cuts it), so that the
// encode of a piece, its transfer and its decode on the receivers overlap
// with the others'. Each piece is encoded at its own offset on bucket
// boundaries: the bits of the whole block. Slot b*C + c is piece c of
// block b. The exchange of piece c with each peer (the send to it, the
// receive from it) is a group of its own, awaited in increasing (piece,
// peer) order on every rank: deadlock-free also where a group's transfers
// start only at its wait (the smallest unfinished exchange can always
// progress). Received pieces are decoded as they come in.
void build_allgather_direct(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t own = static_cast<size_t>(r);
  const size_t m = shape.count;
  const Range whole{0, m};
  const Pieces pieces = Pieces::of(m, shape.chunk);
  const size_t C = pieces.count;
  ScheduleBuilder s(schedule);
  for (int b = 0; b < n; ++b) {
    for (size_t c = 0; c < C; ++c) s.slot(pieces.of_block(whole, c).count);
  }
  s.mark_block_slots();
  if (m == 0) return;
  auto slot = [C](size_t b, size_t c) { return b * C + c; };
  auto group = [n](size_t c, size_t peer) {
    return static_cast<uint32_t>(c * static_cast<size_t>(n) + peer);
  };
  auto tag = [](size_t c) { return kDirectPiece + static_cast<uint32_t>(c); };
  for (size_t c = 0; c < C; ++c) {
    for (int k = 1; k < n; ++k) {
      const size_t from = mod(r - k, n);
      s.recv_blocks(static_cast<int>(from), slot(from, c), slot(from, c) + 1, tag(c),
                    group(c, from));
    }
  }
  for (size_t c = 0; c < C; ++c) {
    const Range p = pieces.of_block(whole, c);
    s.encode(input(p.begin, p.count), slot(own, c));
    for (int k = 1; k < n; ++k) {
      const size_t to = mod(r + k, n);
      s.send_blocks(static_cast<int>(to), slot(own, c), slot(own, c) + 1, tag(c), group(c, to));
    }
    s.decode(slot(own, c), output(own * m + p.begin, p.count));
    // The pieces before this one, from every peer, while this one travels.
    if (c == 0) continue;
    const Range q = pieces.of_block(whole, c - 1);
    for (size_t from = 0; from < static_cast<size_t>(n); ++from) {
      if (from == own) continue;
      s.wait_group(group(c - 1, from));
      s.decode(slot(from, c - 1), output(from * m + q.begin, q.count));
    }
  }
  const Range last = pieces.of_block(whole, C - 1);
  for (size_t from = 0; from < static_cast<size_t>(n); ++from) {
    if (from == own) continue;
    s.wait_group(group(C - 1, from));
    s.decode(slot(from, C - 1), output(from * m + last.begin, last.count));
  }
}

// Ring: step k forwards block r-k to the right and receives block r-k-1
// from the left (group k); n-1 steps, each link carrying one block per
// step. The block received at step k-1 is decoded while step k's
// transfers are on the wire (its forward only reads the same bytes).
void build_allgather_ring(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  const size_t m = shape.count;
  ScheduleBuilder s(schedule);
  encode_own(shape, s);
  if (m == 0) return;
  auto decode_block = [&](size_t b) { s.decode(b, output(b * m, m)); };
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r - k, n);
    const size_t recv = mod(r - k - 1, n);
    const uint32_t group = static_cast<uint32_t>(k);
    s.send_blocks(right, send, send + 1, kRing + static_cast<uint32_t>(k), group);
    s.recv_blocks(left, recv, recv + 1, kRing + static_cast<uint32_t>(k), group);
    decode_block(send);  // the own block at step 0, then the one received last step
    s.wait_group(group);
  }
  decode_block(mod(r - n + 1, n));  // the last one received: r - (n-2) - 1 = r + 1
}

// Recursive doubling (a power-of-two rank count; the planner checks):
// round d exchanges the 2^d blocks gathered so far with rank r xor 2^d, so
// log2(n) rounds, each a block list of the blocks the partner lacks.
void build_allgather_recursive_doubling(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  ScheduleBuilder s(schedule);
  encode_own(shape, s);
  if (shape.count > 0) {
    for (int d = 1; d < n; d <<= 1) {
      const int partner = r ^ d;
      const size_t mine = static_cast<size_t>(r & ~(d - 1));
      const size_t theirs = static_cast<size_t>(partner & ~(d - 1));
      const uint32_t tag = kDoubling + static_cast<uint32_t>(d);
      s.send_blocks(partner, mine, mine + static_cast<size_t>(d), tag);
      s.recv_blocks(partner, theirs, theirs + static_cast<size_t>(d), tag);
      s.wait();
    }
  }
  decode_all(shape, s);
}

}  // namespace qc
