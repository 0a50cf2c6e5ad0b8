// Scatter-reduce-allgather (papers 003, 004): every rank encodes block j of
// its data once and sends it to rank j; rank j adds all contributions in rank
// order in float32, encodes the sum once and sends those bytes to everyone.
// Each value is requantized at most twice, whatever the rank count.
#include "core/schedules/partition.h"
#include "core/schedules/pieces.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
// A pipelined call's piece c is step kScatterPiece + c and kAllgatherPiece + c.
enum SraTag : uint32_t {
  kScatter = 0x500,
  kAllgather = 0x600,
  kScatterPiece = 0x40000,
  kAllgatherPiece = 0x50000,
};

// SRA with every block cut into pieces (pieces.h), software-pipelined:
// while piece c is scattered, piece c-1 is summed, encoded and gathered,
// and piece c-2 decoded. Each piece is summed in rank order and encoded
// once by its owner at its own element offset, on bucket boundaries, so
// every value gets the bits of the unpipelined schedule. Transfers of
// piece c's scatter are group 2c, of its allgather group 2c+1.
void build_pipelined(const ScheduleShape& shape, const Pieces& pieces, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  const size_t C = pieces.count;
  const size_t own = static_cast<size_t>(r);
  auto piece = [&](size_t b, size_t c) {
    return pieces.of_block(block_range(shape.count, blocks, b), c);
  };
  auto piece_slot = [&](size_t b, size_t c) { return b * C + c; };
  auto values = [](const Range& p) { return output(p.begin, p.count); };
  auto given = [](const Range& p) { return input(p.begin, p.count); };
  ScheduleBuilder s(schedule);
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t c = 0; c < C; ++c) s.slot(piece(b, c).count);
  }
  s.mark_block_slots();
  std::vector<size_t> incoming(blocks * C);  // [from * C + c]
  for (size_t from = 0; from < blocks; ++from) {
    if (from == own) continue;
    for (size_t c = 0; c < C; ++c) incoming[from * C + c] = s.slot(piece(own, c).count);
  }
  auto group = [](size_t c, bool gather) { return static_cast<uint32_t>(2 * c + (gather ? 1 : 0)); };
  // Empty pieces (past a shorter block's end) are skipped by sender and
  // receiver alike: both look at the same block.
  auto scatter = [&](size_t c) {
    const uint32_t tag = kScatterPiece + static_cast<uint32_t>(c);
    for (int k = 1; k < n; ++k) {
      const size_t to = static_cast<size_t>((r + k) % n);
      if (piece(to, c).count == 0) continue;
      s.encode(given(piece(to, c)), piece_slot(to, c));
      s.send(static_cast<int>(to), piece_slot(to, c), tag, group(c, false));
    }
    if (piece(own, c).count == 0) return;
    for (int k = 1; k < n; ++k) {
      const size_t from = static_cast<size_t>((r - k + n) % n);
      s.recv(static_cast<int>(from), incoming[from * C + c], tag, group(c, false));
    }
  };
  auto reduce_and_gather = [&](size_t c) {
    s.wait_group(group(c, false));
    const Range mine = piece(own, c);
    const uint32_t tag = kAllgatherPiece + static_cast<uint32_t>(c);
    if (mine.count > 0) {
      s.zero_scratch(mine.count);
      for (size_t from = 0; from < blocks; ++from) {
        if (from == own) {
          s.add(scratch(mine.count), given(mine));
        } else {
          s.decode_add(incoming[from * C + c], scratch(mine.count));
        }
      }
      s.encode_at(scratch(mine.count), mine.begin, piece_slot(own, c));
      for (int k = 1; k < n; ++k) {
        s.send_blocks((r + k) % n, piece_slot(own, c), piece_slot(own, c) + 1, tag,
                      group(c, true));
      }
    }
    for (int k = 1; k < n; ++k) {
      const size_t from = static_cast<size_t>((r - k + n) % n);
      if (piece(from, c).count == 0) continue;
      s.recv_blocks(static_cast<int>(from), piece_slot(from, c), piece_slot(from, c) + 1, tag,
                    group(c, true));
    }
  };
  auto finish = [&](size_t c) {
    s.wait_group(group(c, true));
    for (size_t b = 0; b < blocks; ++b) {
      if (piece(b, c).count > 0) s.decode(piece_slot(b, c), values(piece(b, c)));
    }
  };
  for (size_t c = 0; c < C + 2; ++c) {
    if (c < C) scatter(c);
    if (c >= 1 && c - 1 < C) reduce_and_gather(c - 1);
    if (c >= 2) finish(c - 2);
  }
}

}  // namespace

void build_allreduce_sra(const ScheduleShape& shape, Schedule* schedule) {
  const Pieces pieces = Pieces::of(
      block_range(shape.count, static_cast<size_t>(shape.ranks), 0).count, shape.chunk);
  if (pieces.pipelined() && shape.ranks > 1) {
    build_pipelined(shape, pieces, schedule);
    return;
  }
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  auto block = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return output(range.begin, range.count);
  };
  auto given = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return input(range.begin, range.count);
  };
  const Span mine = block(static_cast<size_t>(r));
  ScheduleBuilder s(schedule);
  // Slot j: the block this rank scatters to rank j, later the allgather's
  // copy of j's encoded sum (the scatter's sends are done by then); then a
  // slot per peer for its contribution to this rank's block.
  s.block_slots(shape.count, blocks);
  std::vector<size_t> incoming(blocks);
  for (size_t from = 0; from < blocks; ++from) {
    if (from != static_cast<size_t>(r)) incoming[from] = s.slot(mine.count);
  }

  // Scatter, staggered so that peers are not all hit at once.
  for (int k = 1; k < n; ++k) {
    const size_t to = static_cast<size_t>((r + k) % n);
    s.encode(given(to), to);
    s.send(static_cast<int>(to), to, kScatter);
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    s.recv(from, incoming[static_cast<size_t>(from)], kScatter);
  }
  s.wait();

  // The sum of this rank's block, added in rank order so that it does not
  // depend on arrival order; encoded once, at the block's offset.
  s.zero_scratch(mine.count);
  for (int from = 0; from < n; ++from) {
    if (from == r) {
      s.add(scratch(mine.count), given(static_cast<size_t>(r)));
    } else {
      s.decode_add(incoming[static_cast<size_t>(from)], scratch(mine.count));
    }
  }
  const size_t own = static_cast<size_t>(r);
  s.encode_at(scratch(mine.count), mine.begin, own);

  // Allgather: the owner's encoded sum to everyone, bytes unchanged.
  for (int k = 1; k < n; ++k) s.send_blocks((r + k) % n, own, own + 1, kAllgather);
  for (int k = 1; k < n; ++k) {
    const size_t from = static_cast<size_t>((r - k + n) % n);
    s.recv_blocks(static_cast<int>(from), from, from + 1, kAllgather);
  }
  s.wait();
  for (size_t b = 0; b < blocks; ++b) s.decode(b, block(b));
}

}  // namespace qc
