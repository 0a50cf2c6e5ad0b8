#include "core/algorithms/integer_allreduce.h"

#include <string>

#include "core/schedules/partition.h"

namespace qc {
namespace {

size_t packed_bytes(size_t count, int width) {
  return (count * static_cast<size_t>(width) + 7) / 8;
}

void pack(const int64_t* v, size_t count, int width, uint8_t* out) {
  const uint64_t mask = (uint64_t{1} << width) - 1;
  uint64_t acc = 0;
  int used = 0;
  for (size_t i = 0; i < count; ++i) {
    acc |= (static_cast<uint64_t>(v[i]) & mask) << used;  // used <= 7, width <= 56
    used += width;
    while (used >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      used -= 8;
    }
  }
  if (used > 0) *out = static_cast<uint8_t>(acc);
}

// dst[i] += the i-th packed value (sign-extended).
void unpack_add(const uint8_t* in, size_t count, int width, int64_t* dst) {
  const uint64_t mask = (uint64_t{1} << width) - 1;
  const uint64_t sign = uint64_t{1} << (width - 1);
  for (size_t i = 0; i < count; ++i) {
    const size_t bit = i * static_cast<size_t>(width);
    const size_t first = bit / 8;
    const int shift = static_cast<int>(bit % 8);
    const size_t nbytes = static_cast<size_t>((shift + width + 7) / 8);
    uint64_t word = 0;
    for (size_t b = 0; b < nbytes; ++b) word |= static_cast<uint64_t>(in[first + b]) << (8 * b);
    const uint64_t u = (word >> shift) & mask;
    dst[i] += static_cast<int64_t>((u ^ sign) - sign);  // sign-extend
  }
}

size_t mod(long long a, int n) { return static_cast<size_t>(((a % n) + n) % n); }

}  // namespace

int sum_width(int width, int n) {
  int extra = 0;
  while ((1LL << extra) < n) ++extra;
  return width + extra;
}

Status allreduce_integers(CollectiveContext& ctx, int64_t* values, size_t count, int width,
                          uint32_t step) {
  const int n = ctx.size();
  const int r = ctx.rank();
  if (width < 2 || width > 56) return internal_error("integer allreduce width out of range");
  if (n == 1) return Status::ok();
  Message* msgs = ctx.messages(2);
  Message& out = msgs[0];
  Message& in = msgs[1];
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;

  // Sends block `send` packed, receives block `recv` and checks its size.
  auto exchange = [&](const Range& send, const Range& recv, uint32_t tag_step) -> Status {
    out.reserve_payload(packed_bytes(send.count, width));
    pack(values + send.begin, send.count, width, out.payload());
    out.set_payload_size(packed_bytes(send.count, width));
    in.reserve_payload(packed_bytes(recv.count, width));
    QC_RETURN_IF_ERROR(ctx.send_recv(right, &out, packed_bytes(send.count, width), left, &in,
                                     tag_step));
    if (in.payload_size() != packed_bytes(recv.count, width)) {
      return corrupt_data("integer allreduce: a message of " + std::to_string(in.payload_size()) +
                          " bytes where " + std::to_string(recv.count) + " values of " +
                          std::to_string(width) + " bits need " +
                          std::to_string(packed_bytes(recv.count, width)));
    }
    return Status::ok();
  };

  // Reduce-scatter: after n-1 steps rank r holds the sums of block r+1.
  for (int s = 0; s < n - 1; ++s) {
    const Range send = block_range(count, n, mod(r - s, n));
    const Range recv = block_range(count, n, mod(r - s - 1, n));
    QC_RETURN_IF_ERROR(exchange(send, recv, step + static_cast<uint32_t>(s)));
    unpack_add(in.payload(), recv.count, width, values + recv.begin);
  }
  // Allgather of the summed blocks.
  for (int s = 0; s < n - 1; ++s) {
    const Range send = block_range(count, n, mod(r + 1 - s, n));
    const Range recv = block_range(count, n, mod(r - s, n));
    QC_RETURN_IF_ERROR(exchange(send, recv, step + static_cast<uint32_t>(n - 1 + s)));
    for (size_t i = 0; i < recv.count; ++i) values[recv.begin + i] = 0;
    unpack_add(in.payload(), recv.count, width, values + recv.begin);
  }
  return Status::ok();
}

}  // namespace qc
