#include "core/comm_state.h"

#include <cstring>

#include "core/byte_order.h"
#include "core/fnv1a.h"

namespace qc {
namespace {

const uint8_t kMagic[4] = {'Q', 'C', 'C', 'S'};
constexpr uint32_t kImageVersion = 1;
constexpr size_t kChecksumOffset = 16;

uint64_t image_checksum(const uint8_t* image, size_t size) {
  const uint64_t h = fnv1a64(image, kChecksumOffset);
  return fnv1a64(image + kCommStateHeaderBytes, size - kCommStateHeaderBytes, h);
}

Status damaged(const std::string& what) { return corrupt_data("communicator state image " + what); }

}  // namespace

size_t comm_state_image_size(const LayerCalls& calls) {
  size_t size = kCommStateHeaderBytes;
  for (const auto& entry : calls) size += 16 + entry.first.size();
  return size;
}

void save_comm_state(const LayerCalls& calls, uint8_t* dst) {
  std::memcpy(dst, kMagic, 4);
  store_le32(dst + 4, kImageVersion);
  store_le64(dst + 8, calls.size());
  size_t pos = kCommStateHeaderBytes;
  for (const auto& entry : calls) {
    store_le64(dst + pos, entry.first.size());
    std::memcpy(dst + pos + 8, entry.first.data(), entry.first.size());
    pos += 8 + entry.first.size();
    store_le64(dst + pos, entry.second);
    pos += 8;
  }
  store_le64(dst + kChecksumOffset, image_checksum(dst, pos));
}

Status load_comm_state(const uint8_t* src, size_t size, LayerCalls* calls) {
  if (size < kCommStateHeaderBytes) {
    return damaged("of " + std::to_string(size) + " bytes is shorter than its " +
                   std::to_string(kCommStateHeaderBytes) + "-byte header");
  }
  if (std::memcmp(src, kMagic, 4) != 0) return damaged("does not start with \"QCCS\"");
  if (load_le32(src + 4) != kImageVersion) {
    return damaged("has format version " + std::to_string(load_le32(src + 4)) +
                   "; this library reads version " + std::to_string(kImageVersion));
  }
  if (image_checksum(src, size) != load_le64(src + kChecksumOffset)) {
    return damaged("fails its checksum (damaged in storage or transit, or truncated)");
  }
  const uint64_t count = load_le64(src + 8);
  LayerCalls loaded;
  size_t pos = kCommStateHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t left = size - pos;
    const uint64_t name_bytes = left >= 8 ? load_le64(src + pos) : 0;
    if (left < 16 || name_bytes > left - 16) {
      return damaged("ends inside layer " + std::to_string(i) + " of the " +
                     std::to_string(count) + " its header announces");
    }
    std::string name(reinterpret_cast<const char*>(src + pos + 8), name_bytes);
    pos += 8 + name_bytes;
    if (!loaded.empty() && !(loaded.rbegin()->first < name)) {
      return damaged("lists its layers out of order or twice (at \"" + name + "\")");
    }
    loaded.emplace_hint(loaded.end(), std::move(name), load_le64(src + pos));
    pos += 8;
  }
  if (pos != size) {
    return damaged("has " + std::to_string(size - pos) + " bytes after its " +
                   std::to_string(count) + " layers");
  }
  *calls = std::move(loaded);
  return Status::ok();
}

}  // namespace qc
