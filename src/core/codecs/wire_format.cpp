#include "core/codecs/wire_format.h"

#include "core/byte_order.h"
#include "core/enum_names.h"
#include <string>

namespace qc {
namespace {

const uint8_t kMagic[4] = {'Q', 'C', 'W', 'F'};

}  // namespace

void write_wire_header(const WireHeader& h, uint8_t* dst) {
  for (int i = 0; i < 4; ++i) dst[i] = kMagic[i];
  dst[4] = h.version;
  dst[5] = h.codec;
  dst[6] = h.bits;
  dst[7] = h.dtype;
  store_le32(dst + 8, h.bucket_size);
  store_le32(dst + 12, h.flags);
  store_le64(dst + 16, h.count);
  store_le64(dst + 24, h.payload_bytes);
}

Status read_wire_header(const uint8_t* src, size_t size, WireHeader* h) {
  if (size < kWireHeaderBytes) {
    return corrupt_data("encoded message of " + std::to_string(size) +
                        " bytes is shorter than its " + std::to_string(kWireHeaderBytes) +
                        "-byte header");
  }
  for (int i = 0; i < 4; ++i) {
    if (src[i] != kMagic[i]) return corrupt_data("encoded message does not start with \"QCWF\"");
  }
  h->version = src[4];
  h->codec = src[5];
  h->bits = src[6];
  h->dtype = src[7];
  h->bucket_size = load_le32(src + 8);
  h->flags = load_le32(src + 12);
  h->count = load_le64(src + 16);
  h->payload_bytes = load_le64(src + 24);
  if (h->version != kWireFormatVersion) {
    return corrupt_data("encoded message has format version " + std::to_string(h->version) +
                        "; this library reads version " + std::to_string(kWireFormatVersion));
  }
  if (h->codec > QC_CODEC_NVFP4) {
    return corrupt_data("encoded message names unknown codec " + std::to_string(h->codec));
  }
  if (h->dtype > QC_DTYPE_BFLOAT16) {
    return corrupt_data("encoded message names unknown dtype " + std::to_string(h->dtype));
  }
  const bool global = h->codec == QC_CODEC_GLOBAL_LINEAR || h->codec == QC_CODEC_GLOBAL_EXP;
  const uint32_t known = kWireFlagStochastic | (global ? kWireFlagMaxAbsScale : 0u);
  if ((h->flags & ~known) != 0) {
    return corrupt_data("encoded message has unknown flags " + std::to_string(h->flags) +
                        " for codec " + codec_name(static_cast<qc_codec_t>(h->codec)));
  }
  if (h->payload_bytes != size - kWireHeaderBytes) {
    return corrupt_data("encoded message header promises " + std::to_string(h->payload_bytes) +
                        " payload bytes but " + std::to_string(size - kWireHeaderBytes) +
                        " follow it");
  }
  return Status::ok();
}

}  // namespace qc
