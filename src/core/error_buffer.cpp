#include "core/error_buffer.h"

#include <cmath>
#include <cstring>
#include <string>

namespace qc {
namespace {
const uint8_t kMagic[4] = {'Q', 'C', 'E', 'B'};
constexpr uint32_t kImageVersion = 1;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
}  // namespace

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

size_t error_buffer_image_size(const qc_error_buffer_s& b) {
  return kErrorBufferHeaderBytes + 4 * b.residual.size();
}

void save_error_buffer(const qc_error_buffer_s& b, uint8_t* dst) {
  uint8_t* payload = dst + kErrorBufferHeaderBytes;
  for (size_t i = 0; i < b.residual.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &b.residual[i], 4);
    put_u32(payload + 4 * i, bits);
  }
  for (int i = 0; i < 4; ++i) dst[i] = kMagic[i];
  put_u32(dst + 4, kImageVersion);
  put_u64(dst + 8, 0);
  put_u64(dst + 16, b.residual.size());
  put_u64(dst + 24, fnv1a64(payload, 4 * b.residual.size()));
}

Status load_error_buffer(qc_error_buffer_s* b, const uint8_t* src, size_t size) {
  if (size < kErrorBufferHeaderBytes) {
    return corrupt_data("error buffer image of " + std::to_string(size) +
                        " bytes is shorter than its header");
  }
  for (int i = 0; i < 4; ++i) {
    if (src[i] != kMagic[i]) return corrupt_data("error buffer image does not start with \"QCEB\"");
  }
  if (get_u32(src + 4) != kImageVersion) {
    return corrupt_data("error buffer image has format version " +
                        std::to_string(get_u32(src + 4)) + "; this library reads version " +
                        std::to_string(kImageVersion));
  }
  const uint64_t count = get_u64(src + 16);
  if (count > (size - kErrorBufferHeaderBytes) / 4 ||
      size != kErrorBufferHeaderBytes + 4 * count) {
    return corrupt_data("error buffer image of " + std::to_string(size) + " bytes cannot hold the " +
                        std::to_string(count) + " residuals its header announces");
  }
  const uint8_t* payload = src + kErrorBufferHeaderBytes;
  if (fnv1a64(payload, 4 * count) != get_u64(src + 24)) {
    return corrupt_data("error buffer image fails its checksum (damaged in storage or transit)");
  }
  if (count != b->residual.size()) {
    return mismatch("error buffer image holds " + std::to_string(count) +
                    " residuals but the buffer has " + std::to_string(b->residual.size()));
  }
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = get_u32(payload + 4 * i);
    std::memcpy(&b->residual[i], &bits, 4);
  }
  return Status::ok();
}

double error_buffer_norm(const qc_error_buffer_s& b) {
  double sum = 0.0;
  for (float v : b.residual) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

}  // namespace qc
