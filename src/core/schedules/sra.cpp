// Scatter-reduce-allgather (papers 003, 004): every rank encodes block j of
// its data once and sends it to rank j; rank j adds all contributions in rank
// order in float32, encodes the sum once and sends those bytes to everyone.
// Each value is requantized at most twice, whatever the rank count.
#include "core/schedules/partition.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum SraTag : uint32_t { kScatter = 0x500, kAllgather = 0x600 };
}

void build_allreduce_sra(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  auto block = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return output(range.begin, range.count);
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
    s.encode(block(to), to);
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
      s.add(scratch(mine.count), mine);
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
