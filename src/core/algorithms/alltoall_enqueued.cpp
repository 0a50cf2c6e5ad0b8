// Alltoall, stream-ordered (alltoall_pairwise's blocks, random keys and
// codec, so the same result bit for bit): every block encoded into a device
// slot, one group of sends and receives, every block decoded, all enqueued
// on the call's stream and nothing awaited. Out-going and in-coming blocks
// have slots of their own: the group reads the ones and writes the others
// at once. No envelope travels: the agreement before the call fixed the
// codec and the block size.
#include <string>

#include "core/algorithms/algorithm.h"
#include "core/algorithms/payload_slots.h"

namespace qc {
Status alltoall_enqueued_payload_bytes(size_t payload, int ranks, size_t* bytes) {
  *bytes = 2 * static_cast<size_t>(ranks) * device_payload_slot(payload);
  return Status::ok();
}

Status alltoall_enqueued(CollectiveContext& ctx, const float* send, float* recv,
                         size_t count_per_rank) {
  const int n = ctx.size();
  const int r = ctx.rank();
  size_t payload = 0, total = 0;
  QC_RETURN_IF_ERROR(ctx.payload_bytes(count_per_rank, &payload));
  QC_RETURN_IF_ERROR(alltoall_enqueued_payload_bytes(payload, n, &total));
  if (total > ctx.device_payload_capacity()) {
    return internal_error("the enqueued alltoall needs " + std::to_string(total) +
                          " bytes of device payloads, " +
                          std::to_string(ctx.device_payload_capacity()) + " reserved");
  }
  const size_t slot = device_payload_slot(payload);
  uint8_t* const out = ctx.device_payloads();
  uint8_t* const in = out + static_cast<size_t>(n) * slot;
  for (int k = 0; k < n; ++k) {
    const size_t to = static_cast<size_t>((r + k) % n);
    QC_RETURN_IF_ERROR(ctx.encode_payload(send + to * count_per_rank, count_per_rank,
                                          to * count_per_rank, out + to * slot));
  }
  DeviceGroup group;
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    group.send(to, out + static_cast<size_t>(to) * slot, payload);
  }
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    group.recv(from, in + static_cast<size_t>(from) * slot, payload);
  }
  QC_RETURN_IF_ERROR(group.enqueue(ctx));
  for (int from = 0; from < n; ++from) {
    const uint8_t* block = (from == r ? out : in) + static_cast<size_t>(from) * slot;
    QC_RETURN_IF_ERROR(ctx.decode_payload(block, recv + static_cast<size_t>(from) * count_per_rank,
                                          count_per_rank, /*accumulate=*/false));
  }
  return Status::ok();
}

}  // namespace qc
