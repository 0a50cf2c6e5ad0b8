// Reduce-scatter: the input holds `ranks` blocks of shape.count values,
// block j for rank j; rank r's output is the sum over ranks of their block
// r. Only what crosses to another rank is encoded, once per hop, at the
// block's offset in the input (which keys its random bits and residuals):
// a rank's own block enters its sum exactly.
#include "core/schedules/registry.h"

namespace qc {
namespace {
enum ReduceScatterTag : uint32_t {
  kDirect = 0x1100,
  kRing = 0x1200,
};

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }
}  // namespace

// Direct (SRA's first half, papers 003, 004): every rank encodes block j of
// its input once and sends it to rank j; rank r adds the contributions in
// rank order (so the sum does not depend on arrival order). Each value is
// quantized once, whatever the rank count.
void build_reduce_scatter_direct(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t m = shape.count;
  const size_t own = static_cast<size_t>(r);
  auto given = [&](size_t b) { return input(b * m, m); };
  ScheduleBuilder s(schedule);
  // Slot j: the block sent to rank j (slot r unused); then one per peer for
  // its contribution to this rank's block.
  for (int b = 0; b < n; ++b) s.slot(m);
  std::vector<size_t> incoming(static_cast<size_t>(n));
  for (int from = 0; from < n; ++from) {
    if (from != r) incoming[static_cast<size_t>(from)] = s.slot(m);
  }
  if (m == 0) return;
  // Sends staggered, so that peers are not all hit at once, each posted as
  // soon as its block is encoded. The exchange with each peer is a group
  // of its own (the send to it and the receive from it); the sum takes the
  // contributions in rank order, so it does not depend on arrival order,
  // each added as soon as it and the ones before it are in, while later
  // ones are still on the wire. Waiting for the pairs in increasing peer
  // order on every rank is what keeps an executor that starts a group's
  // transfers only at its wait (the device's) free of deadlock.
  auto pair = [](int peer) { return static_cast<uint32_t>(peer); };
  for (int k = 1; k < n; ++k) {
    const size_t to = static_cast<size_t>((r + k) % n);
    s.encode(given(to), to);
    s.send(static_cast<int>(to), to, kDirect, pair(static_cast<int>(to)));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    s.recv(from, incoming[static_cast<size_t>(from)], kDirect, pair(from));
  }
  const Span out = output(0, m);
  for (int from = 0; from < n; ++from) {
    const bool first = from == 0;
    if (from == r) {
      if (first) s.copy(out, given(own)); else s.add(out, given(own));
      continue;
    }
    s.wait_group(pair(from));
    if (first) {
      s.decode(incoming[static_cast<size_t>(from)], out);
    } else {
      s.decode_add(incoming[static_cast<size_t>(from)], out);
    }
  }
}

// Ring (paper 000 Alg. 2's first half, blocks numbered so that rank r ends
// with block r): step k sends the partial sum of block r-k-1 to the right
// and receives that of block r-k-2 from the left, which is added to this
// rank's own values of it, in the output (one block of working memory).
// A partial sum is requantized at every hop: n-1 encodes per value.
void build_reduce_scatter_ring(const ScheduleShape& shape, Schedule* schedule) {
  const int n = shape.ranks;
  const int r = shape.rank;
  const size_t m = shape.count;
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  ScheduleBuilder s(schedule);
  // Slot b: block b, as this rank last encoded or received it; a step
  // sends one block and receives another, never the same one.
  for (int b = 0; b < n; ++b) s.slot(m);
  const Span out = output(0, m);
  if (m == 0) return;
  if (n == 1) {
    s.copy(out, input(0, m));
    return;
  }
  for (int k = 0; k < n - 1; ++k) {
    const size_t send = mod(r - k - 1, n);
    const size_t recv = mod(r - k - 2, n);
    // Step 0 sends this rank's own values; later steps the sum made last step.
    if (k == 0) {
      s.encode(input(send * m, m), send);
    } else {
      s.encode_at(out, send * m, send);
    }
    s.send(right, send, kRing + static_cast<uint32_t>(k));
    s.recv(left, recv, kRing + static_cast<uint32_t>(k));
    s.wait();
    s.copy(out, input(recv * m, m));
    s.decode_add(recv, out);
  }
}

}  // namespace qc
