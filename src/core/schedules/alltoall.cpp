// Pairwise alltoall (paper 000 §3.3): each rank encodes the block for each
// peer once, and the peer decodes it. A rank's block to itself takes the
// same encode/decode path, so every block of the result is treated alike.
#include "core/schedules/pieces.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
// A pipelined call's piece c is step kExchangePiece + c, transfer group c.
enum AlltoallTag : uint32_t { kExchange = 0x700, kExchangePiece = 0x60000 };

// Every block cut into pieces (pieces.h): piece c of every block is
// encoded and sent while piece c-1 is decoded. The pieces are encoded at
// their own element offsets on bucket boundaries: the unpipelined bits.
void build_pipelined(const ScheduleShape& shape, const Pieces& pieces, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t C = pieces.count;
  const Range whole{0, shape.count};
  auto piece = [&](size_t block, size_t c) {
    Range p = pieces.of_block(whole, c);
    p.begin += block * shape.count;
    return p;
  };
  ScheduleBuilder s(schedule);
  // Slot to*C + c: piece c for rank `to`; n*C + from*C + c: from rank
  // `from` (the own piece is decoded from its out-going slot).
  for (int j = 0; j < 2 * n; ++j) {
    for (size_t c = 0; c < C; ++c) s.slot(pieces.of_block(whole, c).count);
  }
  auto out_slot = [&](size_t to, size_t c) { return to * C + c; };
  auto in_slot = [&](size_t from, size_t c) {
    return from == static_cast<size_t>(r) ? out_slot(from, c) : (n + from) * C + c;
  };
  for (size_t c = 0; c < C + 1; ++c) {
    if (c < C) {
      const uint32_t tag = kExchangePiece + static_cast<uint32_t>(c);
      for (int k = 0; k < n; ++k) {
        const size_t to = static_cast<size_t>((r + k) % n);
        const Range p = piece(to, c);
        s.encode_at(input(p.begin, p.count), p.begin, out_slot(to, c));
      }
      for (int k = 1; k < n; ++k) {
        const size_t to = static_cast<size_t>((r + k) % n);
        s.send(static_cast<int>(to), out_slot(to, c), tag, static_cast<uint32_t>(c));
      }
      for (int k = 1; k < n; ++k) {
        const size_t from = static_cast<size_t>((r - k + n) % n);
        s.recv(static_cast<int>(from), in_slot(from, c), tag, static_cast<uint32_t>(c));
      }
    }
    if (c >= 1) {
      s.wait_group(static_cast<uint32_t>(c - 1));
      for (size_t from = 0; from < static_cast<size_t>(n); ++from) {
        Range p = pieces.of_block(whole, c - 1);
        p.begin += from * shape.count;
        s.decode(in_slot(from, c - 1), output(p.begin, p.count));
      }
    }
  }
}

}  // namespace

void build_alltoall_pairwise(const ScheduleShape& shape, Schedule* schedule) {
  const Pieces pieces = Pieces::of(shape.count, shape.chunk);
  if (pieces.pipelined() && shape.ranks > 1) {
    build_pipelined(shape, pieces, schedule);
    return;
  }
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t c = shape.count;
  ScheduleBuilder s(schedule);
  // Slot j: the block for rank j; slot n + i: the block from rank i (the
  // own block is decoded from slot r).
  for (int j = 0; j < 2 * n; ++j) s.slot(c);
  auto incoming = [&](int from) { return static_cast<size_t>(from == r ? r : n + from); };

  for (int k = 0; k < n; ++k) {
    const size_t to = static_cast<size_t>((r + k) % n);
    s.encode(input(to * c, c), to);
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    s.send(to, static_cast<size_t>(to), kExchange);
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    s.recv(from, incoming(from), kExchange);
  }
  s.wait();
  for (int from = 0; from < n; ++from) {
    s.decode(incoming(from), output(static_cast<size_t>(from) * c, c));
  }
}

}  // namespace qc
