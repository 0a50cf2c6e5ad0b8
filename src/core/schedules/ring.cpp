// Ring allreduce (paper 000 Alg. 2): a reduce-scatter around the ring in
// n-1 steps, each hop decoding the incoming partial sum into the local block
// and re-encoding it for the next hop; then the owner of each reduced block
// encodes it once and those bytes travel the ring unchanged (allgather).
#include "core/schedules/partition.h"
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum RingTag : uint32_t { kReduceScatter = 0x100, kAllgather = 0x200 };

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }
}  // namespace

void build_allreduce_ring(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t blocks = static_cast<size_t>(n);
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  auto block = [&](size_t b) {
    const Range range = block_range(shape.count, blocks, b);
    return output(range.begin, range.count);
  };
  ScheduleBuilder s(schedule);
  // Reduced in place, in the output.
  s.copy(output(0, shape.count), input(0, shape.count));
  // Slot b: block b, as this rank last encoded or received it. A step
  // sends one block and receives another, never the same one.
  s.block_slots(shape.count, blocks);

  // Step k: send block r-k (own data at k=0, then the partial sum received
  // last step), receive block r-k-1 and add it to the local values.
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r - k, n);
    const size_t recv = mod(r - k - 1, n);
    s.encode(block(send), send);
    s.send(right, send, kReduceScatter + k);
    s.recv(left, recv, kReduceScatter + k);
    s.wait();
    s.decode_add(recv, block(recv));
  }

  // Rank r now holds the full sum of block r+1: encoded once, its bytes go
  // round the ring unchanged, and every rank decodes every block.
  const size_t owned = mod(r + 1, n);
  s.encode(block(owned), owned);
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r + 1 - k, n);
    const size_t recv = mod(r - k, n);
    s.send_blocks(right, send, send + 1, kAllgather + k);
    s.recv_blocks(left, recv, recv + 1, kAllgather + k);
    s.wait();
  }
  for (size_t b = 0; b < blocks; ++b) s.decode(b, block(b));
}

}  // namespace qc
