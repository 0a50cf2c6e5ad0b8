#include "core/executors/block_list.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/byte_order.h"
#include "core/checked_math.h"

namespace qc {
namespace {
constexpr size_t kEntryHeader = 16;
}

size_t block_list_capacity(size_t count, size_t max_blob) {
  // Saturates as max_encoded_size does (a SIZE_MAX blob must not wrap to a
  // small frame).
  size_t entry = 0, total = 0;
  const bool fits = checked_add(kEntryHeader, max_blob, &entry) && checked_mul(count, entry, &total);
  return fits ? total : SIZE_MAX;
}

void pack_block_list(Message* const* slots, size_t first, size_t last, Message* msg) {
  size_t total = 0;
  for (size_t b = first; b < last; ++b) total += kEntryHeader + slots[b]->payload_size();
  if (msg->payload_capacity() < total) msg->reserve_payload(total);
  uint8_t* p = msg->payload();
  for (size_t b = first; b < last; ++b) {
    const size_t size = slots[b]->payload_size();
    store_le64(p, static_cast<uint64_t>(b) & 0xffffffffu);  // index + zero reserved word
    store_le64(p + 8, size);
    if (size > 0) std::memcpy(p + kEntryHeader, slots[b]->payload(), size);
    p += kEntryHeader + size;
  }
  msg->set_payload_size(total);
}

Status unpack_block_list(const Message& msg, Message* const* slots, size_t first, size_t last) {
  std::vector<bool> seen(last - first, false);
  const uint8_t* p = msg.payload();
  size_t left = msg.payload_size();
  while (left > 0) {
    if (left < kEntryHeader) return corrupt_data("truncated block list entry");
    const uint64_t index = load_le64(p);
    const uint64_t size = load_le64(p + 8);
    if (index < first || index >= last || seen[index - first]) {
      return corrupt_data("block list names block " + std::to_string(index) + " where blocks " +
                          std::to_string(first) + ".." + std::to_string(last - 1) +
                          " are expected, each once");
    }
    if (size > left - kEntryHeader) return corrupt_data("block list entry overruns its message");
    seen[index - first] = true;
    Message& slot = *slots[index];
    if (slot.payload_capacity() < size) slot.reserve_payload(size);
    if (size > 0) std::memcpy(slot.payload(), p + kEntryHeader, size);
    slot.set_payload_size(size);
    p += kEntryHeader + size;
    left -= kEntryHeader + size;
  }
  for (size_t b = first; b < last; ++b) {
    if (!seen[b - first]) {
      return corrupt_data("block list lacks block " + std::to_string(b) +
                          " (a peer sent the wrong blocks)");
    }
  }
  return Status::ok();
}

}  // namespace qc
