// Ring allreduce (paper 000 Alg. 2): a reduce-scatter around the ring in
// n-1 steps, each hop decoding the incoming partial sum into the local block
// and re-encoding it for the next hop; then the owner of each reduced block
// encodes it once and those bytes travel the ring unchanged (allgather).
#include "core/schedules/partition.h"
#include "core/schedules/pieces.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
// A pipelined call's piece c is step kReduceScatterPiece + c and
// kAllgatherPiece + c in every step (each link carries them in order).
enum RingTag : uint32_t {
  kReduceScatter = 0x100,
  kAllgather = 0x200,
  kReduceScatterPiece = 0x70000,
  kAllgatherPiece = 0x80000,
};

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

// The ring with every block cut into C pieces (pieces.h), as one stream of
// hops: hop h is piece c = h % C of a step, reduce-scatter steps first,
// then allgather steps. Hop h posts its piece (the encode of a partial sum
// or of the owner's reduced block, send right, receive from left, group
// h); then hop h-1 is awaited and its piece added or decoded while hop h
// is on the wire. The piece a hop sends came in C hops earlier (the last
// step's piece c) and was added one hop after that, so with C >= 2 no
// step waits for the whole of the last one; at most two hops, of
// different pieces (slots), are in flight. Every element goes through the
// whole ring's steps in the same order (the same sums), and pieces are
// encoded at their own offsets on bucket boundaries: the unpipelined bits.
void build_pipelined(const ScheduleShape& shape, const Pieces& pieces, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  const size_t C = pieces.count;
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  auto piece = [&](size_t b, size_t c) {
    return pieces.of_block(block_range(shape.count, blocks, b), c);
  };
  auto piece_slot = [&](size_t b, size_t c) { return b * C + c; };
  auto values = [](const Range& p) { return output(p.begin, p.count); };
  auto given = [](const Range& p) { return input(p.begin, p.count); };
  ScheduleBuilder s(schedule);
  // The input is read where it is (see build_allreduce_ring).
  // Slot b*C + c: piece c of block b, as this rank last encoded or received it.
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t c = 0; c < C; ++c) s.slot(piece(b, c).count);
  }
  s.mark_block_slots();

  struct Hop {
    bool gather;  // an allgather step's, else a reduce-scatter step's
    size_t step, c, send, recv;  // the blocks whose piece c goes right and comes from left
  };
  const size_t phase = (blocks - 1) * C;  // hops per phase
  auto hop = [&](size_t h) {
    Hop x;
    x.gather = h >= phase;
    x.step = (h % phase) / C;
    x.c = h % C;
    const long long k = static_cast<long long>(x.step);
    // As in the whole ring: reduce-scatter step k sends block r-k and
    // receives r-k-1; allgather step k forwards block r+1-k, receives r-k.
    x.send = mod(r - k + (x.gather ? 1 : 0), n);
    x.recv = mod(r - k - (x.gather ? 0 : 1), n);
    return x;
  };
  // Empty pieces (past a shorter block's end) are skipped by sender and
  // receiver alike: on each link both look at the same block.
  auto post = [&](size_t h) {
    const Hop x = hop(h);
    const uint32_t group = static_cast<uint32_t>(h);
    const size_t out = piece_slot(x.send, x.c);
    const size_t in = piece_slot(x.recv, x.c);
    const Range sent = piece(x.send, x.c);
    if (!x.gather) {
      const uint32_t tag = kReduceScatterPiece + static_cast<uint32_t>(x.c);
      if (sent.count > 0) {
        // Step 0 sends this rank's own piece, the others partial sums.
        s.encode(x.step == 0 ? given(sent) : values(sent), out);
        s.send(right, out, tag, group);
      }
      if (piece(x.recv, x.c).count > 0) s.recv(left, in, tag, group);
      return;
    }
    const uint32_t tag = kAllgatherPiece + static_cast<uint32_t>(x.c);
    if (sent.count > 0) {
      // Step 0 sends this rank's reduced block r+1: encoded once, here.
      if (x.step == 0) s.encode(values(sent), out);
      s.send_blocks(right, out, out + 1, tag, group);
    }
    if (piece(x.recv, x.c).count > 0) s.recv_blocks(left, in, in + 1, tag, group);
  };
  auto finish = [&](size_t h) {
    s.wait_group(static_cast<uint32_t>(h));
    const Hop x = hop(h);
    const Range got = piece(x.recv, x.c);
    if (got.count > 0) {
      const size_t in = piece_slot(x.recv, x.c);
      if (x.gather) {
        s.decode(in, values(got));
      } else {
        s.copy(values(got), given(got));
        s.decode_add(in, values(got));
      }
    }
    // The owner's own piece, decoded from its encode once that is sent.
    const Range sent = piece(x.send, x.c);
    if (x.gather && x.step == 0 && sent.count > 0) {
      s.decode(piece_slot(x.send, x.c), values(sent));
    }
  };
  for (size_t h = 0; h <= 2 * phase; ++h) {
    if (h < 2 * phase) post(h);
    if (h > 0) finish(h - 1);
  }
}

}  // namespace

void build_allreduce_ring(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const Pieces pieces =
      Pieces::of(block_range(shape.count, static_cast<size_t>(n), 0).count, shape.chunk);
  if (pieces.pipelined() && n > 1) {
    build_pipelined(shape, pieces, schedule);
    return;
  }
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  auto block = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return output(range.begin, range.count);
  };
  auto given = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return input(range.begin, range.count);
  };
  // Where block b's partial sums are made: its place in the output, or
  // with ScheduleShape::partials_in_scratch one scratch block that every
  // step reuses. The input is read where it is: a block is copied there
  // just before the first partial sum is added to it, while it is in
  // cache, instead of in a pass over the whole input first (a copy that is
  // nothing when the input is the output). Every sum has the operands it
  // had after a whole copy, and is encoded at its block's own offset: the
  // same bits either way. In scratch, the output is written once, by the
  // allgather (the input blocks are all read before it writes any, so in
  // place still works), and the sums stay in cache: a 128-rank emulation's
  // outputs are 512 MiB that a pass touches cold (issue 36).
  auto partial = [&](size_t b) {
    return shape.partials_in_scratch ? scratch(block_range(shape.count, blocks, b).count)
                                     : block(b);
  };
  auto offset = [&](size_t b) { return block_range(shape.count, blocks, b).begin; };
  ScheduleBuilder s(schedule);
  if (shape.partials_in_scratch && n > 1) {
    s.zero_scratch(block_range(shape.count, blocks, 0).count);
  }
  //
  // A few slots, each used again and again: the partial sum this rank
  // sends and the one it receives, and the allgather's block it forwards
  // and the one arriving, each once per block size (blocks differ by at
  // most one value), so a slot always holds exactly its count (a
  // stream-ordered call sends a slot's bytes as they are laid out). Each
  // step waits for its transfers before the next reuses a slot. A slot per
  // block (n of them) put a 128-rank emulation's messages in 64 MiB of
  // memory that every hop touched cold (issue 36).
  struct SizeSlots {
    size_t sent_sum = 0, got_sum = 0, gathered[2] = {0, 0};
  };
  const size_t extra = shape.count % blocks;  // blocks [0, extra) hold one value more
  SizeSlots sized[2];                         // [0]: the longer blocks, [1]: the others
  for (int c = extra > 0 ? 0 : 1; c < 2; ++c) {
    const size_t values = block_range(shape.count, blocks, c == 0 ? 0 : extra).count;
    sized[c].sent_sum = s.slot(values);
    sized[c].got_sum = s.slot(values);
    sized[c].gathered[0] = s.slot(values);
    sized[c].gathered[1] = s.slot(values);
  }
  auto slots_of = [&](size_t b) -> const SizeSlots& { return sized[b < extra ? 0 : 1]; };

  // Step k: send block r-k (own data at k=0, then the partial sum received
  // last step), receive block r-k-1 and add it to the local values.
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r - k, n);
    const size_t recv = mod(r - k - 1, n);
    if (k == 0) {
      s.encode(given(send), slots_of(send).sent_sum);
    } else {
      s.encode_at(partial(send), offset(send), slots_of(send).sent_sum);
    }
    s.send(right, slots_of(send).sent_sum, kReduceScatter + k);
    s.recv(left, slots_of(recv).got_sum, kReduceScatter + k);
    s.wait();
    s.copy(partial(recv), given(recv));
    s.decode_add(slots_of(recv).got_sum, partial(recv));
  }

  // Rank r now holds the full sum of block r+1 (one rank: its own input):
  // encoded once, its bytes go round the ring unchanged, and every rank
  // decodes every block, its own included, as it arrives.
  const size_t owned = mod(r + 1, n);
  // Step k forwards what step k-1 received (the owner's encode at k=0)
  // from one of the two slots of its size, and receives into the other.
  if (n > 1) {
    s.encode_at(partial(owned), offset(owned), slots_of(owned).gathered[0]);
  } else {
    s.encode(given(owned), slots_of(owned).gathered[0]);
  }
  s.decode(slots_of(owned).gathered[0], block(owned));
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r + 1 - k, n);
    const size_t recv = mod(r - k, n);
    const size_t forward = slots_of(send).gathered[k % 2];
    const size_t arriving = slots_of(recv).gathered[(k + 1) % 2];
    s.send(right, forward, kAllgather + k);
    s.recv(left, arriving, kAllgather + k);
    s.wait();
    s.decode(arriving, block(recv));
  }
}

}  // namespace qc
