// Pairwise alltoall (paper 000 §3.3): each rank encodes the block for each
// peer once, and the peer decodes it. A rank's block to itself takes the
// same encode/decode path, so every block of the result is treated alike.
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum AlltoallTag : uint32_t { kExchange = 0x700 };
}

void build_alltoall_pairwise(const ScheduleShape& shape, Schedule* schedule) {
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
