// Alltoall, stream-ordered (alltoall_pairwise's blocks, random keys and
// codec, so the same result bit for bit): every block encoded into a device
// slot, one group of sends and receives, every block decoded, all enqueued
// on the call's stream and nothing awaited. Out-going and in-coming blocks
// have slots of their own: the group reads the ones and writes the others
// at once. No envelope travels: the agreement before the call fixed the
// codec and the block size.
#include <string>
#include <vector>

#include "core/algorithms/algorithm.h"

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
  std::vector<DeviceTransfer> ops;
  if (payload > 0) {
    for (int k = 1; k < n; ++k) {
      DeviceTransfer t;
      t.send = true;
      t.peer = (r + k) % n;
      t.data = out + static_cast<size_t>(t.peer) * slot;
      t.bytes = payload;
      ops.push_back(t);
    }
    for (int k = 1; k < n; ++k) {
      DeviceTransfer t;
      t.peer = (r - k + n) % n;
      t.data = in + static_cast<size_t>(t.peer) * slot;
      t.bytes = payload;
      ops.push_back(t);
    }
  }
  QC_RETURN_IF_ERROR(ctx.enqueue_group(ops.data(), ops.size()));
  for (int from = 0; from < n; ++from) {
    const uint8_t* block = (from == r ? out : in) + static_cast<size_t>(from) * slot;
    QC_RETURN_IF_ERROR(ctx.decode_payload(block, recv + static_cast<size_t>(from) * count_per_rank,
                                          count_per_rank, /*accumulate=*/false));
  }
  return Status::ok();
}

}  // namespace qc
