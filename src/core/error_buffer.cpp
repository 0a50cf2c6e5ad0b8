#include "core/error_buffer.h"

#include "core/byte_order.h"
#include <cmath>
#include <cstring>
#include <string>

namespace qc {
namespace {
const uint8_t kMagic[4] = {'Q', 'C', 'E', 'B'};
constexpr uint32_t kImageVersion = 1;

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
    store_le32(payload + 4 * i, bits);
  }
  for (int i = 0; i < 4; ++i) dst[i] = kMagic[i];
  store_le32(dst + 4, kImageVersion);
  store_le64(dst + 8, 0);
  store_le64(dst + 16, b.residual.size());
  store_le64(dst + 24, fnv1a64(payload, 4 * b.residual.size()));
}

Status load_error_buffer(qc_error_buffer_s* b, const uint8_t* src, size_t size) {
  if (size < kErrorBufferHeaderBytes) {
    return corrupt_data("error buffer image of " + std::to_string(size) +
                        " bytes is shorter than its header");
  }
  for (int i = 0; i < 4; ++i) {
    if (src[i] != kMagic[i]) return corrupt_data("error buffer image does not start with \"QCEB\"");
  }
  if (load_le32(src + 4) != kImageVersion) {
    return corrupt_data("error buffer image has format version " +
                        std::to_string(load_le32(src + 4)) + "; this library reads version " +
                        std::to_string(kImageVersion));
  }
  if (load_le64(src + 8) != 0) {
    return corrupt_data("error buffer image has nonzero reserved header bytes");
  }
  const uint64_t count = load_le64(src + 16);
  if (count > (size - kErrorBufferHeaderBytes) / 4 ||
      size != kErrorBufferHeaderBytes + 4 * count) {
    return corrupt_data("error buffer image of " + std::to_string(size) + " bytes cannot hold the " +
                        std::to_string(count) + " residuals its header announces");
  }
  const uint8_t* payload = src + kErrorBufferHeaderBytes;
  if (fnv1a64(payload, 4 * count) != load_le64(src + 24)) {
    return corrupt_data("error buffer image fails its checksum (damaged in storage or transit)");
  }
  if (count != b->residual.size()) {
    return mismatch("error buffer image holds " + std::to_string(count) +
                    " residuals but the buffer has " + std::to_string(b->residual.size()));
  }
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = load_le32(payload + 4 * i);
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
