#include "core/algorithms/blob_list.h"

#include "core/byte_order.h"
#include <cstring>
#include <string>

#include "core/algorithms/partition.h"
#include "core/checked_math.h"

namespace qc {
namespace {
constexpr size_t kBlobEntryHeader = 16;

}  // namespace

void BlockBlobs::set(size_t block, const uint8_t* data, size_t size) {
  blobs_[block].assign(data, data + size);
  present_[block] = true;
}

size_t BlockBlobs::pack_capacity(size_t nblocks, size_t max_blob) {
  // Saturates as max_encoded_size does (a SIZE_MAX blob must not wrap to a
  // small frame).
  size_t entry = 0, total = 0;
  const bool fits = checked_add(kBlobEntryHeader, max_blob, &entry) &&
                    checked_mul(nblocks, entry, &total);
  return fits ? total : SIZE_MAX;
}

void BlockBlobs::pack(size_t first, size_t last, Message* msg) const {
  size_t total = 0;
  for (size_t b = first; b < last; ++b) total += kBlobEntryHeader + blobs_[b].size();
  if (msg->payload_capacity() < total) msg->reserve_payload(total);
  uint8_t* p = msg->payload();
  for (size_t b = first; b < last; ++b) {
    store_le64(p, static_cast<uint64_t>(b) & 0xffffffffu);  // index + zero reserved word
    store_le64(p + 8, blobs_[b].size());
    if (!blobs_[b].empty()) std::memcpy(p + kBlobEntryHeader, blobs_[b].data(), blobs_[b].size());
    p += kBlobEntryHeader + blobs_[b].size();
  }
  msg->set_payload_size(total);
}

Status BlockBlobs::unpack(const Message& msg) {
  const uint8_t* p = msg.payload();
  size_t left = msg.payload_size();
  while (left > 0) {
    if (left < kBlobEntryHeader) return corrupt_data("truncated block list entry");
    const uint64_t index = load_le64(p);
    const uint64_t size = load_le64(p + 8);
    if (index >= present_.size()) {
      return corrupt_data("block list names block " + std::to_string(index) + " of " +
                          std::to_string(present_.size()));
    }
    if (size > left - kBlobEntryHeader) return corrupt_data("block list entry overruns its message");
    set(index, p + kBlobEntryHeader, size);
    p += kBlobEntryHeader + size;
    left -= kBlobEntryHeader + size;
  }
  return Status::ok();
}

Status BlockBlobs::decode_all(CollectiveContext& ctx, float* data, size_t count) const {
  for (size_t b = 0; b < size(); ++b) {
    if (!present_[b]) return internal_error("block " + std::to_string(b) + " never arrived");
    const Range r = block_range(count, size(), b);
    QC_RETURN_IF_ERROR(ctx.decode(blobs_[b].data(), blobs_[b].size(), data + r.begin, r.count));
  }
  return Status::ok();
}

}  // namespace qc
