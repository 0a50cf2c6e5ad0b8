#include "core/algorithms/payload_slots.h"

#include <string>

#include "core/algorithms/partition.h"
#include "core/policy.h"

namespace qc {

PayloadSizeOf payload_size_of(const Codec& codec) {
  return [&codec](size_t count, size_t* bytes) {
    WireHeader h;
    if (!codec.header_for(count, &h)) {
      return internal_error(std::string("codec ") + codec_name(codec.id()) +
                            " has no fixed payload size for " + std::to_string(count) +
                            " values, which a stream-ordered call needs");
    }
    *bytes = h.payload_bytes;
    return Status::ok();
  };
}

PayloadSizeOf payload_size_of(const CollectiveContext& ctx) {
  return [&ctx](size_t count, size_t* bytes) { return ctx.payload_bytes(count, bytes); };
}

Status PayloadSlots::add(size_t count, size_t* index) {
  size_t bytes = 0;
  QC_RETURN_IF_ERROR(size_of_(count, &bytes));
  *index = bytes_.size();
  bytes_.push_back(bytes);
  offsets_.push_back(total_);
  total_ += device_payload_slot(bytes);
  return Status::ok();
}

Status PayloadSlots::bind(const CollectiveContext& ctx, const char* algorithm) {
  if (total_ > ctx.device_payload_capacity()) {
    return internal_error(std::string("the stream-ordered ") + algorithm + " needs " +
                          std::to_string(total_) + " bytes of device payloads, " +
                          std::to_string(ctx.device_payload_capacity()) + " reserved");
  }
  base_ = ctx.device_payloads();
  return Status::ok();
}

void DeviceGroup::send(int peer, const uint8_t* data, size_t bytes) {
  if (bytes == 0) return;
  DeviceTransfer t;
  t.send = true;
  t.peer = peer;
  t.data = const_cast<uint8_t*>(data);  // the transport only reads it
  t.bytes = bytes;
  ops_.push_back(t);
}

void DeviceGroup::recv(int peer, uint8_t* data, size_t bytes) {
  if (bytes == 0) return;
  DeviceTransfer t;
  t.peer = peer;
  t.data = data;
  t.bytes = bytes;
  ops_.push_back(t);
}

void DeviceGroup::send_slots(int peer, const PayloadSlots& slots, size_t first, size_t last) {
  for (size_t i = first; i < last; ++i) send(peer, slots.at(i), slots.bytes(i));
}

void DeviceGroup::recv_slots(int peer, const PayloadSlots& slots, size_t first, size_t last) {
  for (size_t i = first; i < last; ++i) recv(peer, slots.at(i), slots.bytes(i));
}

Status DeviceGroup::enqueue(CollectiveContext& ctx) {
  Status s = ctx.enqueue_group(ops_.data(), ops_.size());
  ops_.clear();
  return s;
}

Status decode_blocks_enqueued(CollectiveContext& ctx, const PayloadSlots& slots, float* data,
                              size_t count, size_t nblocks) {
  for (size_t b = 0; b < nblocks; ++b) {
    const Range range = block_range(count, nblocks, b);
    QC_RETURN_IF_ERROR(
        ctx.decode_payload(slots.at(b), data + range.begin, range.count, /*accumulate=*/false));
  }
  return Status::ok();
}

}  // namespace qc
