#include "core/error_buffer.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/byte_order.h"

namespace qc {
namespace {
const uint8_t kMagic[4] = {'Q', 'C', 'E', 'B'};
constexpr uint32_t kImageVersion = 2;
constexpr size_t kChecksumOffset = 48;
constexpr uint32_t kFlagBound = 1u;

uint64_t image_checksum(const uint8_t* image, size_t payload_bytes) {
  const uint64_t h = fnv1a64(image, kChecksumOffset);
  return fnv1a64(image + kErrorBufferHeaderBytes, payload_bytes, h);
}

int32_t load_i32(const uint8_t* p) { return static_cast<int32_t>(load_le32(p)); }
void store_i32(uint8_t* p, int32_t v) { store_le32(p, static_cast<uint32_t>(v)); }

}  // namespace

size_t error_buffer_image_size(const ErrorBuffer& b) {
  return kErrorBufferHeaderBytes + 4 * b.residual.size();
}

void save_error_buffer(const ErrorBuffer& b, uint8_t* dst) {
  uint8_t* payload = dst + kErrorBufferHeaderBytes;
  for (size_t i = 0; i < b.residual.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &b.residual[i], 4);
    store_le32(payload + 4 * i, bits);
  }
  std::memcpy(dst, kMagic, 4);
  store_le32(dst + 4, kImageVersion);
  store_le64(dst + 8, b.residual.size());
  store_i32(dst + 16, b.rank);
  store_i32(dst + 20, b.size);
  store_i32(dst + 24, b.grid.algorithm);
  store_i32(dst + 28, b.grid.codec);
  store_i32(dst + 32, b.grid.bits);
  store_i32(dst + 36, b.grid.bucket_size);
  store_i32(dst + 40, b.grid.group_size);
  store_le32(dst + 44, b.bound ? kFlagBound : 0u);
  store_le64(dst + kChecksumOffset, image_checksum(dst, 4 * b.residual.size()));
}

Status load_error_buffer(ErrorBuffer* b, const uint8_t* src, size_t size) {
  if (size < kErrorBufferHeaderBytes) {
    return corrupt_data("error buffer image of " + std::to_string(size) +
                        " bytes is shorter than its " + std::to_string(kErrorBufferHeaderBytes) +
                        "-byte header");
  }
  if (std::memcmp(src, kMagic, 4) != 0) {
    return corrupt_data("error buffer image does not start with \"QCEB\"");
  }
  if (load_le32(src + 4) != kImageVersion) {
    return corrupt_data("error buffer image has format version " +
                        std::to_string(load_le32(src + 4)) + "; this library reads version " +
                        std::to_string(kImageVersion));
  }
  const uint64_t count = load_le64(src + 8);
  if (count > (size - kErrorBufferHeaderBytes) / 4 ||
      size != kErrorBufferHeaderBytes + 4 * count) {
    return corrupt_data("error buffer image of " + std::to_string(size) + " bytes cannot hold the " +
                        std::to_string(count) + " residuals its header announces");
  }
  if (image_checksum(src, 4 * count) != load_le64(src + kChecksumOffset)) {
    return corrupt_data("error buffer image fails its checksum (damaged in storage or transit)");
  }
  const uint32_t flags = load_le32(src + 44);
  if ((flags & ~kFlagBound) != 0) {
    return corrupt_data("error buffer image has unknown flag bits set");
  }
  // What the image says the residuals belong to, read into a plain struct
  // so that the buffer changes only once everything is checked.
  struct {
    int rank;
    int size;
    bool bound;
    ErrorBufferGrid grid;
  } image;
  image.rank = load_i32(src + 16);
  image.size = load_i32(src + 20);
  image.bound = (flags & kFlagBound) != 0;
  image.grid.algorithm = static_cast<qc_algorithm_t>(load_i32(src + 24));
  image.grid.codec = static_cast<qc_codec_t>(load_i32(src + 28));
  image.grid.bits = load_i32(src + 32);
  image.grid.bucket_size = load_i32(src + 36);
  image.grid.group_size = load_i32(src + 40);
  if (image.rank < -1 || image.size < -1 || (image.rank >= 0 && image.rank >= image.size)) {
    return corrupt_data("error buffer image names rank " + std::to_string(image.rank) +
                        " of a group of " + std::to_string(image.size));
  }
  if (image.bound && (image.rank < 0 || image.grid.algorithm <= QC_ALGO_AUTO ||
                      image.grid.algorithm > QC_ALGO_NATIVE ||
                      ((image.grid.codec < QC_CODEC_NONE || image.grid.codec > QC_CODEC_NVFP4) &&
                       image.grid.codec != kFusedGridCodec))) {
    return corrupt_data("error buffer image records an algorithm or codec this library does "
                        "not know");
  }

  if (count != b->residual.size()) {
    return mismatch("error buffer image holds " + std::to_string(count) +
                    " residuals but the buffer has " + std::to_string(b->residual.size()));
  }
  if (b->rank >= 0 && image.rank >= 0 && (b->rank != image.rank || b->size != image.size)) {
    return mismatch("error buffer image was saved by rank " + std::to_string(image.rank) +
                    " of a group of " + std::to_string(image.size) +
                    "; this buffer belongs to rank " + std::to_string(b->rank) + " of " +
                    std::to_string(b->size));
  }

  // Residual hygiene (cpu/codec_kernels.h): an encode never leaves a
  // non-finite residual, but an image saved by an older qc (or edited) may
  // hold one, which would poison the next call's bucket; it loads as 0.
  const uint8_t* payload = src + kErrorBufferHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = load_le32(payload + 4 * i);
    float v;
    std::memcpy(&v, &bits, 4);
    b->residual[i] = std::isfinite(v) ? v : 0.0f;
  }
  if (image.rank >= 0) {
    b->rank = image.rank;
    b->size = image.size;
  }
  b->bound = image.bound;
  b->grid = image.grid;
  b->device.host_changed();
  return Status::ok();
}

Status residuals_to_host(ErrorBuffer* b) { return b->device.to_host(&b->residual); }

double error_buffer_norm(const ErrorBuffer& b) {
  double sum = 0.0;
  for (float v : b.residual) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

}  // namespace qc
