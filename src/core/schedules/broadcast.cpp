// Broadcast: the root's input (shape.count values) becomes every rank's
// output. The root encodes it once, at its element offsets, and those bytes
// travel unchanged; every rank decodes them, the root too, so every replica
// is bit-identical (the root's output is its decoded input, like the
// others', not a copy of it).
#include "core/schedules/pieces.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum BroadcastTag : uint32_t {
  kChainPiece = 0x90000,  // + piece
  kTree = 0x1600,
};

int relative(const ScheduleShape& shape) { return (shape.rank - shape.root + shape.ranks) % shape.ranks; }
int absolute(const ScheduleShape& shape, int v) { return (v + shape.root) % shape.ranks; }

}  // namespace

// Chain, pipelined: ranks in order from the root; the message cut into
// pieces (pieces.h), piece c forwarded by each rank as soon as it arrives,
// so the chain's n-1 hops overlap and the time is about one message's
// transfer plus n-2 pieces'. Piece c's receive is group c, its forward
// group C+c.
void build_broadcast_chain(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int v = relative(shape);
  const Range whole{0, shape.count};
  const Pieces pieces = Pieces::of(shape.count, shape.chunk);
  const size_t C = pieces.count;
  ScheduleBuilder s(schedule);
  for (size_t c = 0; c < C; ++c) s.slot(pieces.of_block(whole, c).count);
  s.mark_block_slots();
  if (shape.count == 0) return;
  const int prev = v > 0 ? absolute(shape, v - 1) : -1;
  const int next = v + 1 < n ? absolute(shape, v + 1) : -1;
  auto tag = [](size_t c) { return kChainPiece + static_cast<uint32_t>(c); };
  auto forward_group = [C](size_t c) { return static_cast<uint32_t>(C + c); };
  if (prev < 0) {
    for (size_t c = 0; c < C; ++c) {
      const Range p = pieces.of_block(whole, c);
      s.encode(input(p.begin, p.count), c);
      if (next >= 0) s.send(next, c, tag(c), forward_group(c));
      s.decode(c, output(p.begin, p.count));
    }
    if (next >= 0) s.wait();
    return;
  }
  for (size_t c = 0; c < C; ++c) s.recv(prev, c, tag(c), static_cast<uint32_t>(c));
  for (size_t c = 0; c < C; ++c) {
    const Range p = pieces.of_block(whole, c);
    s.wait_group(static_cast<uint32_t>(c));
    if (next >= 0) s.send(next, c, tag(c), forward_group(c));
    s.decode(c, output(p.begin, p.count));
  }
  if (next >= 0) s.wait();
}

// Binomial tree from the root (relative rank v): v receives from v minus
// its lowest set bit, then forwards to v + 2^j for every 2^j below that
// bit, farthest first. ceil(log2 n) rounds; the whole message in one piece.
void build_broadcast_tree(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int v = relative(shape);
  ScheduleBuilder s(schedule);
  const size_t slot = s.slot(shape.count);
  s.mark_block_slots();
  if (shape.count == 0) return;
  const Span all = output(0, shape.count);
  int low = 1;  // v's lowest set bit; for the root the first power of two >= n
  while (low < n && (v & low) == 0) low <<= 1;
  if (v == 0) {
    s.encode(input(0, shape.count), slot);
  } else {
    s.recv(absolute(shape, v - low), slot, kTree);
    s.wait();
  }
  for (int child = low >> 1; child >= 1; child >>= 1) {
    if (v + child < n) s.send(absolute(shape, v + child), slot, kTree);
  }
  s.wait();
  s.decode(slot, all);
}

}  // namespace qc
